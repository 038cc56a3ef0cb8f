"""Planning for accuracy without the data: what `plan` sends (`PlanItem`, `Target`) and reads.

A plan describes the releases one intends to make by their shape and a **public** total, and the
service answers which mechanism and ε each would get, its cost, calibrated parameters and
worst-case forecast, and whether the whole list fits what the caller may still spend. No
counts are sent and nothing is charged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._counts import to_jsonable
from ._exceptions import BadResponse

__all__ = [
    "AccuracyForecast",
    "Plan",
    "PlanCandidate",
    "PlanItem",
    "PlanParameters",
    "PlannedItem",
    "Shortfall",
    "Target",
]

ITEM_STATUSES = ("planned", "unreachable")
CANDIDATE_STATUSES = ("chosen", "planned", "unreachable", "not_applicable", "outranked")


# --------------------------------------------------------------------------- what is sent


@dataclass(frozen=True)
class Target:
    """The accuracy a planned release must reach: at least one of `l2` and `cell_sd`.

    Attributes:
        l2: an upper bound on the ℓ2 error ‖y − x/n‖₂ of the released distribution, met with
            probability at least `confidence` for every count vector of the total.
        confidence: the probability of `l2` (strictly between 0 and 1; the service's default,
            0.95, when None). Only with `l2`.
        cell_sd: an upper bound on every output cell's root-mean-square deviation from the
            truth, √E[(yᵢ − xᵢ/n)²].

    """

    l2: Optional[float] = None
    confidence: Optional[float] = None
    cell_sd: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        """The request's form (the members that are set)."""
        return {
            name: to_jsonable(value, f"target.{name}")
            for name, value in (
                ("l2", self.l2),
                ("confidence", self.confidence),
                ("cell_sd", self.cell_sd),
            )
            if value is not None
        }


@dataclass(frozen=True)
class PlanItem:
    """One release to plan, described by public figures only.

    Give exactly one of `n` and `n_lower_bound`, and exactly one of `epsilon` and `target`
    (``explicit`` takes neither: its `r` and `alpha` fix it). The service checks every value and
    refuses a bad one with `InvalidRequest`, whose `field` names it (``items[2].target.l2``).

    **The total must be public.** `n` (or `n_lower_bound`) has to come from outside the data: a
    survey's published sample size, a registry's size, a lower bound known in advance. Never
    compute it from the counts you will release: under ``add_remove_one`` the total is private,
    and an ε chosen by looking at it leaks what the privacy guarantee does not account for. That
    is why the client has no way to build a plan item from counts.

    Attributes:
        d: the number of cells (per row, for a table).
        n: the public total number of records (per row, for a table).
        n_lower_bound: a public lower bound of the total instead (the forecast then holds for
            every total at least this large).
        rows: for a table of disjoint groups, the number of rows (released for one charge).
        mechanism: ``"auto"`` (every mechanism that applies; the cheapest that meets the
            target, or the most accurate at the given ε) or a mechanism's name.
        epsilon: plan at this ε (RDP at the dataset's order) instead of a target.
        target: the accuracy to reach; the plan finds the cheapest ε on the ledger grid.
        prior: ``dirichlet``'s base prior a₀ (a number) or ``exponential``'s Beta prior
            ``[α, β]``.
        r: ``posterior``'s (default 1) or ``explicit``'s r.
        alpha: ``diffuse``'s or ``explicit``'s prior α: a number, or one per cell (a list, an
            array or a Series).

    """

    d: int
    n: Optional[float] = None
    n_lower_bound: Optional[float] = None
    rows: Optional[int] = None
    mechanism: str = "auto"
    epsilon: Optional[float] = None
    target: Optional[Target] = None
    prior: Union[float, Sequence[float], None] = None
    r: Optional[float] = None
    alpha: Optional[Any] = None

    def to_json(self) -> Dict[str, Any]:
        """The request's form: the members that are set, in plain JSON values."""
        doc: Dict[str, Any] = {"d": to_jsonable(self.d, "d"), "mechanism": self.mechanism}
        for name in ("rows", "n", "n_lower_bound", "epsilon", "prior", "r", "alpha"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = to_jsonable(value, name)
        if self.target is not None:
            doc["target"] = self.target.to_json()
        return doc


def _member(value: Any, where: str) -> Any:
    if isinstance(value, Target):
        return value.to_json()
    if isinstance(value, Mapping):
        return {str(k): _member(v, f"{where}.{k}") for k, v in value.items()}
    return to_jsonable(value, where)


def plan_item_json(item: Union[PlanItem, Mapping[str, Any]], index: int) -> Dict[str, Any]:
    """One item of the request: a `PlanItem`, or a mapping sent as it is (the service checks it)."""
    if isinstance(item, PlanItem):
        return item.to_json()
    if isinstance(item, Mapping):
        return {str(k): _member(v, f"items[{index}].{k}") for k, v in item.items()}
    raise TypeError(f"items[{index}]: expected a PlanItem or a dict, got {type(item).__name__}")


# --------------------------------------------------------------------------- what comes back


def _get(doc: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return doc[key]
    except KeyError:
        raise BadResponse(f"{what}: the service's answer has no `{key}`") from None


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BadResponse(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadResponse(f"{what}: expected a finite number, got {type(value).__name__}")
    return float(value)


def _opt_float(doc: Mapping[str, Any], key: str, what: str) -> Optional[float]:
    value = doc.get(key)
    return None if value is None else _float(value, f"{what} {key}")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadResponse(f"{what}: expected an integer, got {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadResponse(f"{what}: expected a string, got {type(value).__name__}")
    return value


def _status(value: Any, allowed: Sequence[str], what: str) -> str:
    status = _str(value, what)
    if status not in allowed:
        raise BadResponse(f"{what}: unknown status {status!r}")
    return status


def _numbers(value: Any, what: str) -> List[float]:
    if not isinstance(value, list):
        raise BadResponse(f"{what}: expected a list of numbers, got {type(value).__name__}")
    return [_float(v, what) for v in value]


def _values(value: Any, what: str) -> Union[float, List[float], None]:
    """A parameter that is one number (every cell) or one per cell."""
    if value is None:
        return None
    if isinstance(value, list):
        return _numbers(value, what)
    return _float(value, what)


@dataclass(frozen=True)
class AccuracyForecast:
    """A worst-case forecast, for every count vector of the item's total (per row of a table).

    ‖y − x/n‖₂ ≤ `l2` with probability at least `confidence`, and every output cell's
    root-mean-square deviation from the truth, √E[(yᵢ − xᵢ/n)²], is at most `cell_sd`. With
    `n_lower_bound` it holds for every total at least that large.
    """

    l2: float
    confidence: float
    cell_sd: float

    @classmethod
    def from_json(cls, doc: Any) -> AccuracyForecast:
        """Read the service's JSON."""
        what = "forecast"
        doc = _object(doc, what)
        return cls(
            l2=_float(_get(doc, "l2", what), "forecast l2"),
            confidence=_float(_get(doc, "confidence", what), "forecast confidence"),
            cell_sd=_float(_get(doc, "cell_sd", what), "forecast cell_sd"),
        )


@dataclass(frozen=True)
class Shortfall:
    """Why a target is out of reach for a mechanism, and what would reach it.

    `max_epsilon` is the largest ε the mechanism is planned at (the ledger's maximum, 8192, or
    for ``posterior`` and ``diffuse`` where more ε stops buying accuracy); `best` the forecast
    there; `min_n` the smallest public total at which `max_epsilon` meets the target (None when
    no total up to 2⁵³ does, and for ``exponential``).
    """

    max_epsilon: float
    best: AccuracyForecast
    min_n: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Any) -> Shortfall:
        """Read the service's JSON."""
        what = "shortfall"
        doc = _object(doc, what)
        return cls(
            max_epsilon=_float(_get(doc, "max_epsilon", what), "shortfall max_epsilon"),
            best=AccuracyForecast.from_json(_get(doc, "best", what)),
            min_n=_opt_float(doc, "min_n", what),
        )


@dataclass(frozen=True)
class PlanParameters:
    """The calibrated parameters a release at the planned ε runs with (None where not used).

    The Dirichlet family has `r` and `alpha` (one number, or one per cell); ``gaussian`` has
    `sigma`, ``laplace`` `scale`, and ``exponential`` its Beta `prior` ``[α, β]``.
    """

    r: Optional[float] = None
    alpha: Union[float, List[float], None] = None
    prior: Optional[List[float]] = None
    sigma: Optional[float] = None
    scale: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Any) -> PlanParameters:
        """Read the service's JSON."""
        what = "parameters"
        doc = _object(doc, what)
        prior = doc.get("prior")
        return cls(
            r=_opt_float(doc, "r", what),
            alpha=_values(doc.get("alpha"), "parameters alpha"),
            prior=None if prior is None else _numbers(prior, "parameters prior"),
            sigma=_opt_float(doc, "sigma", what),
            scale=_opt_float(doc, "scale", what),
        )


@dataclass(frozen=True)
class PlanCandidate:
    """One mechanism as the planner saw it for an item.

    `status` is ``"chosen"`` (the item's `epsilon` and `cost` are its), ``"planned"`` (it meets
    the target, or runs at the given ε, but was not chosen), ``"unreachable"`` (see
    `shortfall`), ``"not_applicable"`` (`reason` says why) or ``"outranked"`` (ruled out by a
    lower bound on its cost before its exact plan; `reason`). `estimated_cost` is the price
    of its continuous optimum before grid rounding (what ``auto`` ranks by), or its cost at
    the given ε.
    """

    mechanism: str
    status: str
    estimated_cost: Optional[float] = None
    forecast: Optional[AccuracyForecast] = None
    shortfall: Optional[Shortfall] = None
    reason: Optional[str] = None

    @classmethod
    def from_json(cls, doc: Any) -> PlanCandidate:
        """Read the service's JSON."""
        what = "plan candidate"
        doc = _object(doc, what)
        forecast, shortfall, reason = doc.get("forecast"), doc.get("shortfall"), doc.get("reason")
        return cls(
            mechanism=_str(_get(doc, "mechanism", what), "candidate mechanism"),
            status=_status(_get(doc, "status", what), CANDIDATE_STATUSES, "candidate status"),
            estimated_cost=_opt_float(doc, "estimated_cost", what),
            forecast=None if forecast is None else AccuracyForecast.from_json(forecast),
            shortfall=None if shortfall is None else Shortfall.from_json(shortfall),
            reason=None if reason is None else _str(reason, "candidate reason"),
        )


# The members of a planned item that the chosen mechanism's release request takes besides its
# mechanism and ε (the planner's own rules: a number `prior` is dirichlet's, a pair is
# exponential's; `r` is posterior's or explicit's; `alpha` diffuse's or explicit's).
def _own_fields(mechanism: str, sent: Mapping[str, Any]) -> Dict[str, Any]:
    prior = sent.get("prior")
    own: Dict[str, Any] = {}
    if mechanism == "dirichlet" and isinstance(prior, (int, float)):
        own["prior"] = prior
    if mechanism == "exponential" and isinstance(prior, list):
        own["prior"] = prior
    if mechanism in ("posterior", "explicit") and sent.get("r") is not None:
        own["r"] = sent["r"]
    if mechanism in ("diffuse", "explicit") and sent.get("alpha") is not None:
        own["alpha"] = sent["alpha"]
    return own


@dataclass(frozen=True)
class PlannedItem:
    """The plan for one item, in the order the items were sent.

    A ``"planned"`` item has the `mechanism` chosen, the `epsilon` to release at (a ledger-grid
    value; None for ``explicit``, which runs with its own `r` and `alpha`), the `cost` the
    release will be charged at the dataset's order, the calibrated `parameters` and the
    worst-case `forecast`. An ``"unreachable"`` item has, when some mechanism came close, that
    `mechanism` and its `shortfall` (what it can do, and the total that would reach the
    target). `candidates` lists every mechanism considered, in the planner's tie-break order.

    `sent` is the item as the request carried it (its JSON form), which `release_kwargs` reads
    the mechanism's own fields from.
    """

    status: str
    candidates: List[PlanCandidate]
    mechanism: Optional[str] = None
    epsilon: Optional[float] = None
    cost: Optional[float] = None
    parameters: Optional[PlanParameters] = None
    forecast: Optional[AccuracyForecast] = None
    shortfall: Optional[Shortfall] = None
    sent: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Any, *, sent: Optional[Mapping[str, Any]] = None) -> PlannedItem:
        """Read the service's JSON; `sent` is the request's item it answers."""
        what = "planned item"
        doc = _object(doc, what)
        status = _status(_get(doc, "status", what), ITEM_STATUSES, "planned item status")
        candidates = _get(doc, "candidates", what)
        if not isinstance(candidates, list):
            raise BadResponse("planned item candidates: expected a list")
        mechanism = doc.get("mechanism")
        parameters, forecast, shortfall = (
            doc.get("parameters"),
            doc.get("forecast"),
            doc.get("shortfall"),
        )
        item = cls(
            status=status,
            candidates=[PlanCandidate.from_json(c) for c in candidates],
            mechanism=None if mechanism is None else _str(mechanism, "planned item mechanism"),
            epsilon=_opt_float(doc, "epsilon", what),
            cost=_opt_float(doc, "cost", what),
            parameters=None if parameters is None else PlanParameters.from_json(parameters),
            forecast=None if forecast is None else AccuracyForecast.from_json(forecast),
            shortfall=None if shortfall is None else Shortfall.from_json(shortfall),
            sent=dict(sent or {}),
            raw=dict(doc),
        )
        if status == "planned":
            # What a release needs: the mechanism, its price and what it will run with.
            for name in ("mechanism", "cost", "parameters", "forecast"):
                if getattr(item, name) is None:
                    raise BadResponse(f"a planned item without `{name}`")
            if item.epsilon is None and item.mechanism != "explicit":
                raise BadResponse("a planned item without `epsilon`")
        return item

    @property
    def planned(self) -> bool:
        """True when the item can be released as planned (its status is ``"planned"``)."""
        return self.status == "planned"

    def release_kwargs(self) -> Dict[str, Any]:
        """The arguments that release exactly what was planned, at exactly its `cost`.

        ``client.release(dataset_id, counts, **item.release_kwargs())`` sends the chosen
        `mechanism`, the planned `epsilon` (none for ``explicit``) and the mechanism's own
        fields the item was planned with (``dirichlet``'s number `prior`, ``exponential``'s
        ``[α, β]``, ``posterior``'s `r`, ``diffuse``'s `alpha`, ``explicit``'s `r` and
        `alpha`), so the service calibrates it as the plan did. The counts must be of the
        planned shape; the forecast holds when their total is the planned `n` (or at least
        `n_lower_bound`).

        Raises:
            ValueError: the item is unreachable (nothing to release at; see `shortfall`).

        """
        if not self.planned or self.mechanism is None:
            raise ValueError(
                "this item is unreachable: no mechanism meets its target (see `shortfall` "
                "for the best it can do and the total that would reach it)"
            )
        kwargs: Dict[str, Any] = {"mechanism": self.mechanism}
        if self.epsilon is not None:
            kwargs["epsilon"] = self.epsilon
        kwargs.update(_own_fields(self.mechanism, self.sent))
        return kwargs


@dataclass(frozen=True)
class Plan:
    """The answer to `plan`: every item's plan, and whether the list fits. Nothing was charged.

    `order` is the dataset's ledger order λ₀, at which every cost is RDP. `total_cost` is the
    sum of the planned items' costs (exact on the ledger grid: what their releases will be
    charged). `remaining` is what the caller may still spend on the dataset: its remaining
    budget, or less for an analyst under an allocation. `fits` is True when every item is
    planned and `total_cost ≤ remaining`; `unreachable` counts the items no mechanism can plan.
    """

    order: float
    items: List[PlannedItem]
    total_cost: float
    remaining: float
    fits: bool
    unreachable: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Any, *, sent: Optional[Sequence[Mapping[str, Any]]] = None) -> Plan:
        """Read the service's JSON; `sent` are the request's items, in order."""
        what = "plan"
        doc = _object(doc, what)
        items = _get(doc, "items", what)
        if not isinstance(items, list):
            raise BadResponse("plan items: expected a list")
        if sent is not None and len(sent) != len(items):
            raise BadResponse(f"a plan of {len(items)} items for {len(sent)} sent")
        fits = _get(doc, "fits", what)
        if not isinstance(fits, bool):
            raise BadResponse("plan fits: expected true or false")
        return cls(
            order=_float(_get(doc, "order", what), "plan order"),
            items=[
                PlannedItem.from_json(item, sent=None if sent is None else sent[i])
                for i, item in enumerate(items)
            ],
            total_cost=_float(_get(doc, "total_cost", what), "plan total_cost"),
            remaining=_float(_get(doc, "remaining", what), "plan remaining"),
            fits=fits,
            unreachable=_int(_get(doc, "unreachable", what), "plan unreachable"),
            raw=dict(doc),
        )
