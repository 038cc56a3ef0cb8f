"""`dp_accounting` events as charges: with the real classes, and with stand-ins of the same shape.

The client reads events by class name and attributes, so it never imports `dp_accounting`; the
stand-ins below check that, and the real classes (when `dp_accounting` is installed, as
scripts/ci/python-client.sh installs it) check that the names and attributes are Google's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List

import pytest

from dirichlet_release._dp_events import dp_event_charge


@dataclasses.dataclass(frozen=True)
class GaussianDpEvent:
    noise_multiplier: float


@dataclasses.dataclass(frozen=True)
class LaplaceDpEvent:
    noise_multiplier: float


@dataclasses.dataclass(frozen=True)
class ZCDpEvent:
    rho: float
    xi: float = 0.0


@dataclasses.dataclass(frozen=True)
class SelfComposedDpEvent:
    event: Any
    count: int


@dataclasses.dataclass(frozen=True)
class ComposedDpEvent:
    events: List[Any]


@dataclasses.dataclass(frozen=True)
class NoOpDpEvent:
    pass


@dataclasses.dataclass(frozen=True)
class PoissonSampledDpEvent:
    sampling_probability: float
    event: Any


STAND_INS: Dict[str, Callable[..., Any]] = {
    "GaussianDpEvent": GaussianDpEvent,
    "LaplaceDpEvent": LaplaceDpEvent,
    "ZCDpEvent": ZCDpEvent,
    "SelfComposedDpEvent": SelfComposedDpEvent,
    "ComposedDpEvent": ComposedDpEvent,
    "NoOpDpEvent": NoOpDpEvent,
    "PoissonSampledDpEvent": PoissonSampledDpEvent,
}


def real_classes() -> Dict[str, Callable[..., Any]]:
    dp_accounting = pytest.importorskip("dp_accounting")
    return {name: getattr(dp_accounting, name) for name in STAND_INS}


@pytest.fixture(params=["stand-ins", "dp_accounting"])
def ev(request: pytest.FixtureRequest) -> Dict[str, Callable[..., Any]]:
    return STAND_INS if request.param == "stand-ins" else real_classes()


def test_one_event(ev: Dict[str, Callable[..., Any]]) -> None:
    assert dp_event_charge(ev["GaussianDpEvent"](2.5)) == {
        "mechanism": "gaussian",
        "sigma": 2.5,
        "sensitivity": 1.0,
    }
    assert dp_event_charge(ev["LaplaceDpEvent"](3)) == {
        "mechanism": "laplace",
        "scale": 3.0,
        "sensitivity": 1.0,
    }
    assert dp_event_charge(ev["ZCDpEvent"](0.5)) == {"mechanism": "zcdp", "rho": 0.5}


def test_compositions_flatten(ev: Dict[str, Callable[..., Any]]) -> None:
    g, lap = ev["GaussianDpEvent"](2.0), ev["LaplaceDpEvent"](1.0)
    assert dp_event_charge(ev["SelfComposedDpEvent"](g, 100)) == {
        "mechanism": "gaussian",
        "sigma": 2.0,
        "sensitivity": 1.0,
        "count": 100,
    }
    nested = ev["SelfComposedDpEvent"](
        ev["ComposedDpEvent"]([g, ev["SelfComposedDpEvent"](lap, 3), ev["NoOpDpEvent"]()]), 2
    )
    assert dp_event_charge(nested) == {
        "mechanism": "composed",
        "events": [
            {"mechanism": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "count": 2},
            {"mechanism": "laplace", "scale": 1.0, "sensitivity": 1.0, "count": 6},
        ],
    }
    # A composition of one event is that event.
    assert dp_event_charge(ev["ComposedDpEvent"]([g])) == dp_event_charge(g)


def test_what_cannot_be_priced_is_named(ev: Dict[str, Callable[..., Any]]) -> None:
    sampled = ev["PoissonSampledDpEvent"](0.01, ev["GaussianDpEvent"](1.0))
    with pytest.raises(ValueError, match="PoissonSampledDpEvent"):
        dp_event_charge(sampled)
    inside = ev["ComposedDpEvent"]([ev["GaussianDpEvent"](1.0), sampled])
    with pytest.raises(ValueError, match="PoissonSampledDpEvent"):
        dp_event_charge(inside)
    with pytest.raises(ValueError, match="xi"):
        dp_event_charge(ev["ZCDpEvent"](0.5, 0.1))
    with pytest.raises(ValueError, match="costs nothing"):
        dp_event_charge(ev["SelfComposedDpEvent"](ev["GaussianDpEvent"](1.0), 0))
    with pytest.raises(ValueError, match="noise_multiplier"):
        dp_event_charge(ev["GaussianDpEvent"](0.0))
    with pytest.raises(ValueError, match="str"):
        dp_event_charge("GaussianDpEvent")


def test_an_older_laplace_parameter_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class LaplaceDpEvent:
        parameter: float

    assert dp_event_charge(LaplaceDpEvent(2.0))["scale"] == 2.0
