"""Google's `dp_accounting` events as the service's external charges, without importing it.

`record_dp_event` takes a ``dp_accounting.DpEvent`` (from ``dp_accounting.dp_event``) and sends
the charge the service prices. The events are read by their class name and attributes (duck
typing), so `dp_accounting` stays an optional dependency: the client never imports it, and any
object with the same class name and attributes is read the same way.

What is read:

- ``GaussianDpEvent(noise_multiplier)``: the Gaussian mechanism with noise standard deviation
  ``noise_multiplier`` times the ℓ2 sensitivity, sent as ``sigma = noise_multiplier``,
  ``sensitivity = 1`` (the multiplier is σ/Δ, and the RDP cost depends on that ratio only).
- ``LaplaceDpEvent(noise_multiplier)`` (an attribute ``parameter`` is read the same way): the
  Laplace mechanism with scale ``noise_multiplier`` times the ℓ1 sensitivity, sent as
  ``scale = noise_multiplier``, ``sensitivity = 1``.
- ``ZCDpEvent(rho, xi=0)``: ρ-zCDP, sent as ``zcdp`` with ``rho``; ``xi ≠ 0`` is refused.
- ``SelfComposedDpEvent(event, count)``: `event` `count` times (its charge's ``count``).
- ``ComposedDpEvent(events)``: every event in turn, nested to any depth.
- ``NoOpDpEvent``: nothing (left out of a composition).

Anything else (sampled events, tree aggregation, ``NonPrivateDpEvent``, ``UnsupportedDpEvent``,
objects that are not events) raises `ValueError` naming the event's type, before anything is
sent: the service prices only what it can bound, and a sampled event's amplified cost is not
among those.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

__all__ = ["dp_event_charge"]

_Leaf = Tuple[Dict[str, Any], int]


def _number(event: Any, attribute: str) -> float:
    value = getattr(event, attribute)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{type(event).__name__}.{attribute} must be a number, got {type(value).__name__}"
        )
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{type(event).__name__}.{attribute} must be finite and above 0")
    return number


def _leaves(event: Any, count: int, depth: int) -> List[_Leaf]:
    """The event as (charge of one application, how many times) pairs, compositions flattened."""
    if depth > 100:
        raise ValueError("the DpEvent is nested more than 100 deep")
    name = type(event).__name__
    if name == "GaussianDpEvent" and hasattr(event, "noise_multiplier"):
        sigma = _number(event, "noise_multiplier")
        return [({"mechanism": "gaussian", "sigma": sigma, "sensitivity": 1.0}, count)]
    if name == "LaplaceDpEvent" and (
        hasattr(event, "noise_multiplier") or hasattr(event, "parameter")
    ):
        attribute = "noise_multiplier" if hasattr(event, "noise_multiplier") else "parameter"
        scale = _number(event, attribute)
        return [({"mechanism": "laplace", "scale": scale, "sensitivity": 1.0}, count)]
    if name == "ZCDpEvent" and hasattr(event, "rho"):
        xi = getattr(event, "xi", 0.0)
        if xi:
            raise ValueError(
                "ZCDpEvent with xi != 0 cannot be recorded: the service takes ρ-zCDP (xi = 0)"
            )
        return [({"mechanism": "zcdp", "rho": _number(event, "rho")}, count)]
    if name == "SelfComposedDpEvent" and hasattr(event, "event") and hasattr(event, "count"):
        times = event.count
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise ValueError("SelfComposedDpEvent.count must be a whole number ≥ 0")
        if times == 0:
            return []
        return _leaves(event.event, count * times, depth + 1)
    if name == "ComposedDpEvent" and hasattr(event, "events"):
        events = event.events
        if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
            raise ValueError("ComposedDpEvent.events must be a list of events")
        return [leaf for inner in events for leaf in _leaves(inner, count, depth + 1)]
    if name == "NoOpDpEvent":
        return []
    raise ValueError(
        f"cannot record a {name}: the service prices GaussianDpEvent, LaplaceDpEvent, "
        "ZCDpEvent (xi = 0), and their SelfComposedDpEvent and ComposedDpEvent compositions"
    )


def dp_event_charge(event: Any) -> Dict[str, Any]:
    """The body of the external charge for a `dp_accounting` event (without its label).

    One mechanism applied once or several times is sent as it is (with ``count`` above 1);
    anything else as ``{"mechanism": "composed", "events": [...]}``, each with its own count.

    Raises:
        ValueError: the event (or one inside it) is of a type the service cannot price, or it
            costs nothing (only no-ops, or a count of 0), so there is nothing to record.

    """
    leaves = _leaves(event, 1, 0)
    if not leaves:
        raise ValueError(
            f"the {type(event).__name__} costs nothing (no-ops or a count of 0): nothing to record"
        )
    charges = [dict(charge, count=count) if count != 1 else charge for charge, count in leaves]
    if len(charges) == 1:
        return charges[0]
    return {"mechanism": "composed", "events": charges}
