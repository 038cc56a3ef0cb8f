"""Planning for accuracy without the data: what `plan` sends (`PlanItem`, `Target`) and reads.

A plan describes the releases one intends to make by their shape and a **public** total, and the
service answers which mechanism and ε each would get, its cost, calibrated parameters and
worst-case forecast, and whether the whole list fits what the caller may still spend. No
counts are sent and nothing is charged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _json as j
from ._counts import to_jsonable
from ._errors import BadResponse
from ._mechanisms import MechanismInfo, Mechanisms

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
# The members of a plan item that are not a mechanism's own fields.
ITEM_MEMBERS = ("d", "n", "n_lower_bound", "rows", "mechanism", "epsilon", "target")


# --------------------------------------------------------------------------- what is sent


@dataclass(frozen=True)
class Target:
    """The accuracy a planned release must reach: at least one of `l2`, `cell_sd` and `kl`.

    Which targets a mechanism can be planned for is in its listing
    (`MechanismInfo.targets`); ``"auto"`` weighs those that can.

    Attributes:
        l2: an upper bound on the ℓ2 error ‖y − x/n‖₂ of the released distribution, met with
            probability at least `confidence` for every count vector of the total.
        confidence: the probability of `l2` and `kl` (strictly between 0 and 1; the service's
            default, 0.95, when None). Only with `l2` or `kl`.
        cell_sd: an upper bound on every output cell's root-mean-square deviation from the
            truth, √E[(yᵢ − xᵢ/n)²].
        kl: an upper bound on the Kullback–Leibler divergence D_KL(x/n ‖ y) of the released
            distribution y from the truth, met with probability at least `confidence` for
            every count vector of the total (per row, for a table). The Dirichlet mechanism's
            own utility metric.

    """

    l2: Optional[float] = None
    confidence: Optional[float] = None
    cell_sd: Optional[float] = None
    kl: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        """The request's form (the members that are set)."""
        return {
            name: to_jsonable(value, f"target.{name}")
            for name, value in (
                ("l2", self.l2),
                ("confidence", self.confidence),
                ("cell_sd", self.cell_sd),
                ("kl", self.kl),
            )
            if value is not None
        }


@dataclass(frozen=True)
class PlanItem:
    """One release to plan, described by public figures only.

    Give exactly one of `n` and `n_lower_bound`, and exactly one of `epsilon` and `target`
    (neither when the mechanism's own fields fix it, such as ``explicit``'s `r` and `alpha`).
    The service checks every value and refuses a bad one with `InvalidRequest`, whose `field`
    names it (``items[2].target.l2``).

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
        prior, r, alpha: three mechanisms' fields by name, for short: the same as giving them
            in `params`.
        params: the mechanisms' own fields, by name, as a release takes them (a number, a list,
            an array or a Series): ``{"prior_shape": [1, 2, 3]}``, ``{"smoothing": 0.5}``.
            `Client.mechanisms` lists which mechanism takes which. Under ``"auto"`` each
            mechanism reads those it takes.

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
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The request's form: the members that are set, in plain JSON values."""
        doc: Dict[str, Any] = {"d": to_jsonable(self.d, "d"), "mechanism": self.mechanism}
        for name in ("rows", "n", "n_lower_bound", "epsilon", "prior", "r", "alpha"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = to_jsonable(value, name)
        for name, value in self.params.items():
            if name in ITEM_MEMBERS:
                raise ValueError(f"params: {name} is a member of the plan item, not a field")
            if name in doc:
                raise ValueError(f"params: {name} is given twice (as an attribute and in params)")
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


@dataclass(frozen=True)
class AccuracyForecast:
    """A worst-case forecast, for every count vector of the item's total (per row of a table).

    ‖y − x/n‖₂ ≤ `l2` with probability at least `confidence`, and every output cell's
    root-mean-square deviation from the truth, √E[(yᵢ − xᵢ/n)²], is at most `cell_sd`. `kl`,
    when the mechanism has a proven bound on it, bounds D_KL(x/n ‖ y) with probability at least
    `confidence` (None otherwise). With `n_lower_bound` it holds for every total at least that
    large.
    """

    l2: float
    confidence: float
    cell_sd: float
    kl: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Any) -> AccuracyForecast:
        """Read the service's JSON."""
        what = "forecast"
        doc = j.obj(doc, what)
        return cls(
            l2=j.number(j.get(doc, "l2", what), "forecast l2"),
            confidence=j.number(j.get(doc, "confidence", what), "forecast confidence"),
            cell_sd=j.number(j.get(doc, "cell_sd", what), "forecast cell_sd"),
            kl=j.opt_number(doc, "kl", what),
        )


@dataclass(frozen=True)
class Shortfall:
    """Why a target is out of reach for a mechanism, and what would reach it.

    `max_epsilon` is the largest ε the mechanism is planned at (the ledger's maximum, 8192, or
    less where more ε stops buying accuracy); `best` the forecast there; `min_n` the smallest
    public total at which `max_epsilon` meets the target (None when no total up to 2⁵³ does,
    or the mechanism cannot tell).
    """

    max_epsilon: float
    best: AccuracyForecast
    min_n: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Any) -> Shortfall:
        """Read the service's JSON."""
        what = "shortfall"
        doc = j.obj(doc, what)
        return cls(
            max_epsilon=j.number(j.get(doc, "max_epsilon", what), "shortfall max_epsilon"),
            best=AccuracyForecast.from_json(j.get(doc, "best", what)),
            min_n=j.opt_number(doc, "min_n", what),
        )


Parameter = Union[float, List[float]]
"""One calibrated parameter: a number, or one number per cell."""


class PlanParameters(Mapping[str, Parameter]):
    """The parameters a release at the planned ε runs with, named by the chosen mechanism's draw.

    A read-only mapping from each name to a number or a list of numbers (one per cell):
    ``parameters["r"]`` and ``parameters["alpha"]`` for the Dirichlet family,
    ``parameters["sigma"]`` for ``gaussian``, and so on; which names a mechanism's draw has is
    the service's to say, and a release made with `PlannedItem.release_kwargs` records the same
    values in its `mechanism`. Equal to a dict with the same items.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Optional[Mapping[str, Parameter]] = None) -> None:
        self._values: Dict[str, Parameter] = dict(values or {})

    @classmethod
    def from_json(cls, doc: Any) -> PlanParameters:
        """Read the service's JSON: each member a finite number or a list of them."""
        doc = j.obj(doc, "parameters")
        return cls(
            {
                str(name): j.number_or_numbers(value, f"parameters {name}")
                for name, value in doc.items()
            }
        )

    def __getitem__(self, name: str) -> Parameter:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"PlanParameters({self._values!r})"


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
        doc = j.obj(doc, what)
        forecast, shortfall, reason = doc.get("forecast"), doc.get("shortfall"), doc.get("reason")
        return cls(
            mechanism=j.string(j.get(doc, "mechanism", what), "candidate mechanism"),
            status=j.one_of(j.get(doc, "status", what), CANDIDATE_STATUSES, "candidate status"),
            estimated_cost=j.opt_number(doc, "estimated_cost", what),
            forecast=None if forecast is None else AccuracyForecast.from_json(forecast),
            shortfall=None if shortfall is None else Shortfall.from_json(shortfall),
            reason=None if reason is None else j.string(reason, "candidate reason"),
        )


@dataclass(frozen=True)
class PlannedItem:
    """The plan for one item, in the order the items were sent.

    A ``"planned"`` item has the `mechanism` chosen, the `epsilon` to release at (a ledger-grid
    value; None for a mechanism whose own fields fix it, such as ``explicit``), the `cost` the
    release will be charged at the dataset's order, the calibrated `parameters` and the
    worst-case `forecast`. An ``"unreachable"`` item has, when some mechanism came close, that
    `mechanism` and its `shortfall` (what it can do, and the total that would reach the
    target). `candidates` lists every mechanism considered, in the planner's tie-break order.

    `sent` is the item as the request carried it (its JSON form), and `mechanism_info` the
    chosen mechanism as the service lists it (None when the plan was read without the listing):
    `release_kwargs` reads both.
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
    mechanism_info: Optional[MechanismInfo] = field(default=None, repr=False, compare=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(
        cls,
        doc: Any,
        *,
        sent: Optional[Mapping[str, Any]] = None,
        mechanisms: Optional[Mechanisms] = None,
    ) -> PlannedItem:
        """Read the service's JSON; `sent` is the request's item it answers.

        `mechanisms` is the service's listing (`Client.mechanisms`), which `release_kwargs`
        needs; `Client.plan` passes it.
        """
        what = "planned item"
        doc = j.obj(doc, what)
        status = j.one_of(j.get(doc, "status", what), ITEM_STATUSES, "planned item status")
        candidates = j.get(doc, "candidates", what)
        if not isinstance(candidates, list):
            raise BadResponse("planned item candidates: expected a list")
        mechanism = doc.get("mechanism")
        mechanism = None if mechanism is None else j.string(mechanism, "planned item mechanism")
        info = None
        if mechanisms is not None and mechanism is not None:
            info = mechanisms.get(mechanism)
            if info is None:
                raise BadResponse("planned item mechanism: one the service does not list")
        parameters, forecast, shortfall = (
            doc.get("parameters"),
            doc.get("forecast"),
            doc.get("shortfall"),
        )
        item = cls(
            status=status,
            candidates=[PlanCandidate.from_json(c) for c in candidates],
            mechanism=mechanism,
            epsilon=j.opt_number(doc, "epsilon", what),
            cost=j.opt_number(doc, "cost", what),
            parameters=None if parameters is None else PlanParameters.from_json(parameters),
            forecast=None if forecast is None else AccuracyForecast.from_json(forecast),
            shortfall=None if shortfall is None else Shortfall.from_json(shortfall),
            sent=dict(sent or {}),
            mechanism_info=info,
            raw=dict(doc),
        )
        if status == "planned":
            # What a release needs: the mechanism, its price and what it will run with.
            for name in ("mechanism", "cost", "parameters", "forecast"):
                if getattr(item, name) is None:
                    raise BadResponse(f"a planned item without `{name}`")
            # An ε, unless the mechanism runs with the parameters the item gave.
            given = info is None or sent is None or info.runs_given(item.sent)
            if item.epsilon is None and not given:
                raise BadResponse("a planned item without `epsilon`")
        return item

    @property
    def planned(self) -> bool:
        """True when the item can be released as planned (its status is ``"planned"``)."""
        return self.status == "planned"

    def release_kwargs(self) -> Dict[str, Any]:
        """The arguments that release exactly what was planned, at exactly its `cost`.

        ``client.release(dataset_id, counts, **item.release_kwargs())`` sends the chosen
        `mechanism`, the planned `epsilon` (none when the mechanism runs with the parameters
        given) and the mechanism's own fields, so the service calibrates it as the plan did.
        Which fields are the mechanism's comes from the service's listing
        (`mechanism_info.fields`): those the item was planned with, then any the planner chose
        and reports in `parameters` (a field that fixes the noise excepted when the release is
        calibrated to ε: it is drawn from ε again). The counts must be of the planned shape;
        the forecast holds when their total is the planned `n` (or at least `n_lower_bound`).

        Raises:
            ValueError: the item is unreachable (nothing to release at; see `shortfall`), or it
                was read without the service's listing of mechanisms.

        """
        if not self.planned or self.mechanism is None:
            raise ValueError(
                "this item is unreachable: no mechanism meets its target (see `shortfall` "
                "for the best it can do and the total that would reach it)"
            )
        info = self.mechanism_info
        if info is None:
            raise ValueError(
                "this plan was read without the service's list of mechanisms, so which fields "
                f"{self.mechanism} takes is unknown: plan through Client.plan, or pass "
                "mechanisms=client.mechanisms() to Plan.from_json"
            )
        kwargs: Dict[str, Any] = {"mechanism": self.mechanism}
        if self.epsilon is not None:
            kwargs["epsilon"] = self.epsilon
        own = info.own_fields(self.sent)
        chosen = info.own_fields(self.parameters or {})
        if self.epsilon is not None and info.noise_field is not None:
            chosen.pop(info.noise_field, None)
        kwargs.update({name: value for name, value in chosen.items() if name not in own})
        kwargs.update(own)
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
    def from_json(
        cls,
        doc: Any,
        *,
        sent: Optional[Sequence[Mapping[str, Any]]] = None,
        mechanisms: Optional[Mechanisms] = None,
    ) -> Plan:
        """Read the service's JSON; `sent` are the request's items, in order.

        `mechanisms` is the service's listing, which each item's `release_kwargs` needs.
        """
        what = "plan"
        doc = j.obj(doc, what)
        items = j.get(doc, "items", what)
        if not isinstance(items, list):
            raise BadResponse("plan items: expected a list")
        if sent is not None and len(sent) != len(items):
            raise BadResponse(f"a plan of {len(items)} items for {len(sent)} sent")
        return cls(
            order=j.number(j.get(doc, "order", what), "plan order"),
            items=[
                PlannedItem.from_json(
                    item, sent=None if sent is None else sent[i], mechanisms=mechanisms
                )
                for i, item in enumerate(items)
            ],
            total_cost=j.number(j.get(doc, "total_cost", what), "plan total_cost"),
            remaining=j.number(j.get(doc, "remaining", what), "plan remaining"),
            fits=j.boolean(j.get(doc, "fits", what), "plan fits"),
            unreachable=j.integer(j.get(doc, "unreachable", what), "plan unreachable"),
            raw=dict(doc),
        )
