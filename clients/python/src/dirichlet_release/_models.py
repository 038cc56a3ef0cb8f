"""Typed views of the service's JSON (standard-library dataclasses, no pydantic).

Each model keeps the document it was read from in `raw`, so a field this version does not model
is still at hand. Timestamps are timezone-aware `datetime`s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from ._errors import BadResponse

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Allocation",
    "AllocationChange",
    "Allocations",
    "Budget",
    "BudgetSpec",
    "Charge",
    "Cost",
    "Dataset",
    "DpView",
    "Mechanism",
    "PathNode",
    "Population",
    "PopulationBudget",
    "Preview",
    "Release",
    "Sensitivity",
    "Token",
    "TokenInfo",
    "WhoAmI",
]

Distribution = Union[List[float], "pd.Series[float]"]
"""One released point of the simplex: a list, or a `pandas.Series` when a Series went in."""

Distributions = Union[List[List[float]], "pd.DataFrame"]
"""A table's released rows: a list of lists, or a `pandas.DataFrame` when a DataFrame went in."""


def _get(doc: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return doc[key]
    except KeyError:
        raise BadResponse(f"{what}: the service's answer has no `{key}`") from None


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadResponse(f"expected a number, got {type(value).__name__}")
    return float(value)


def _opt_float(value: Any) -> Optional[float]:
    return None if value is None else _float(value)


_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Any) -> datetime:
    """An RFC 3339 timestamp as an aware `datetime` (Python 3.9's `fromisoformat` needs help)."""
    if not isinstance(value, str):
        raise BadResponse(f"expected an RFC 3339 time, got {type(value).__name__}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # fromisoformat before 3.11 takes 3 or 6 fractional digits only; the service may send 9.
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise BadResponse("an RFC 3339 time the client cannot read") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _opt_time(value: Any) -> Optional[datetime]:
    return None if value is None else parse_time(value)


def _opt_id(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _path(value: Any) -> List[PathNode]:
    if not isinstance(value, list):
        raise BadResponse(f"budget path: expected a list, got {type(value).__name__}")
    return [PathNode.from_json(node) for node in value]


def _names(value: Any, what: str) -> Optional[List[str]]:
    """Public names (a dataset's `cells`, a table's `row_names`) as a list, None when absent."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise BadResponse(f"{what}: expected a list of names")
    return list(value)


@dataclass(frozen=True)
class Allocation:
    """An analyst token's allocation on a dataset: RDP at the dataset's order.

    A release by the token must fit both `remaining` here and the dataset's remaining budget.
    `spent` counts everything the token released from the dataset, including what it released
    before the allocation was set; an allocation lowered below `spent` has `remaining` 0.
    """

    token_id: str
    epsilon: float
    spent: float
    remaining: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Allocation:
        """Read the service's JSON."""
        return cls(
            token_id=str(_get(doc, "token_id", "allocation")),
            epsilon=_float(_get(doc, "epsilon", "allocation")),
            spent=_float(_get(doc, "spent", "allocation")),
            remaining=_float(_get(doc, "remaining", "allocation")),
        )


@dataclass(frozen=True)
class AllocationChange:
    """One entry of the allocations' audit trail: who changed whose allocation, when, how.

    `old_epsilon` is None when the token had no allocation before (it was set), `new_epsilon`
    None when it was removed.
    """

    token_id: str
    changed_at: datetime
    changed_by: str
    old_epsilon: Optional[float]
    new_epsilon: Optional[float]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AllocationChange:
        """Read the service's JSON."""
        return cls(
            token_id=str(_get(doc, "token_id", "allocation change")),
            changed_at=parse_time(_get(doc, "changed_at", "allocation change")),
            changed_by=str(_get(doc, "changed_by", "allocation change")),
            old_epsilon=_opt_float(_get(doc, "old_epsilon", "allocation change")),
            new_epsilon=_opt_float(_get(doc, "new_epsilon", "allocation change")),
        )


@dataclass(frozen=True)
class Allocations:
    """A dataset's allocations (the admin sees all, an analyst their own) and their history.

    `order` is the dataset's order λ₀, at which every amount is RDP; `changes` is the audit
    trail of the allocations listed, oldest first.
    """

    order: float
    allocations: List[Allocation]
    changes: List[AllocationChange]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Allocations:
        """Read the service's JSON."""
        return cls(
            order=_float(_get(doc, "order", "allocations")),
            allocations=[Allocation.from_json(a) for a in _get(doc, "allocations", "allocations")],
            changes=[AllocationChange.from_json(c) for c in _get(doc, "changes", "allocations")],
            raw=dict(doc),
        )

    def get(self, token_id: str) -> Optional[Allocation]:
        """The allocation of `token_id`, or None when it has none (or it is not listed)."""
        return next((a for a in self.allocations if a.token_id == token_id), None)


@dataclass(frozen=True)
class Block:
    """One block of a dataset split into blocks over time.

    Its key (``2026-12-05`` for a day), its cap, what the releases that read it were charged,
    and what is left.
    """

    key: str
    total: float
    spent: float
    remaining: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Block:
        """Read the service's JSON."""
        return cls(
            key=str(_get(doc, "key", "block")),
            total=_float(_get(doc, "total", "block")),
            spent=_float(_get(doc, "spent", "block")),
            remaining=_float(_get(doc, "remaining", "block")),
        )


@dataclass(frozen=True)
class DpView:
    """The (ε, δ) view of a ledger, for datasets registered with an (ε, δ) target."""

    delta: float
    total_epsilon: float
    spent_epsilon: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DpView:
        """Read the service's JSON."""
        return cls(
            delta=_float(_get(doc, "delta", "dp")),
            total_epsilon=_float(_get(doc, "total_epsilon", "dp")),
            spent_epsilon=_float(_get(doc, "spent_epsilon", "dp")),
        )


@dataclass(frozen=True)
class Budget:
    """A dataset's ledger at one instant, at its order λ₀ (RDP amounts on the 2⁻⁴⁰ grid).

    `allocation` is the calling analyst's own allocation on the dataset, when the admin set one
    (None for the admin and for an analyst without one): the analyst's releases must fit both
    it and `remaining`.

    `path` is the budget path: the dataset itself first, then the population it is in and that
    population's ancestors up to the root (`PathNode`s; a dataset in no population has only
    itself). A release must fit every node on it; `binding` is the id of the node with the
    least remaining, the one that limits the next release. None from a service without
    populations.
    """

    order: float
    total: float
    spent: float
    remaining: float
    releases: int
    dp: Optional[DpView] = None
    allocation: Optional[Allocation] = None
    path: Optional[List[PathNode]] = None
    binding: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Budget:
        """Read the service's JSON."""
        dp = doc.get("dp")
        allocation = doc.get("allocation")
        path = doc.get("path")
        binding = doc.get("binding")
        return cls(
            order=_float(_get(doc, "order", "budget")),
            total=_float(_get(doc, "total", "budget")),
            spent=_float(_get(doc, "spent", "budget")),
            remaining=_float(_get(doc, "remaining", "budget")),
            releases=int(_get(doc, "releases", "budget")),
            dp=DpView.from_json(dp) if isinstance(dp, dict) else None,
            allocation=Allocation.from_json(allocation) if isinstance(allocation, dict) else None,
            path=_path(path) if path is not None else None,
            binding=str(binding) if binding is not None else None,
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Sensitivity:
    """Neighbour sensitivities: Δ2² (`l2_squared`) and Δ∞ (`linf`)."""

    l2_squared: float
    linf: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Sensitivity:
        """Read the service's JSON."""
        return cls(
            l2_squared=_float(_get(doc, "l2_squared", "sensitivity")),
            linf=_float(_get(doc, "linf", "sensitivity")),
        )

    def to_json(self) -> Dict[str, float]:
        """The request body's form."""
        return {"l2_squared": self.l2_squared, "linf": self.linf}


@dataclass(frozen=True)
class BudgetSpec:
    """A budget as registered: RDP `epsilon` at `order`, or an (ε, δ) target.

    For an (ε, δ) target, `delta` is set and `rdp_epsilon` is the RDP budget at `order` it
    converts to; for an RDP budget both are None.
    """

    epsilon: float
    order: float
    delta: Optional[float] = None
    rdp_epsilon: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BudgetSpec:
        """Read the service's JSON."""
        return cls(
            epsilon=_float(_get(doc, "epsilon", "budget")),
            order=_float(_get(doc, "order", "budget")),
            delta=_opt_float(doc.get("delta")),
            rdp_epsilon=_opt_float(doc.get("rdp_epsilon")),
        )


@dataclass(frozen=True)
class Dataset:
    """A registered dataset: its name, neighbouring relation, budget and what it has spent.

    `cells` are the public names of its cells, when it was registered with them (every release
    then has that many cells, in that order); None otherwise. `population` is the id of the
    population it is in (its releases are charged to it and its ancestors too), or None.
    """

    id: str
    name: str
    neighbouring: str
    sensitivity: Sensitivity
    budget: BudgetSpec
    spent: float
    releases: int
    created_at: datetime
    cells: Optional[List[str]] = None
    population: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Dataset:
        """Read the service's JSON."""
        return cls(
            id=str(_get(doc, "id", "dataset")),
            name=str(_get(doc, "name", "dataset")),
            neighbouring=str(_get(doc, "neighbouring", "dataset")),
            sensitivity=Sensitivity.from_json(_get(doc, "sensitivity", "dataset")),
            budget=BudgetSpec.from_json(_get(doc, "budget", "dataset")),
            spent=_float(_get(doc, "spent", "dataset")),
            releases=int(_get(doc, "releases", "dataset")),
            created_at=parse_time(_get(doc, "created_at", "dataset")),
            cells=_names(doc.get("cells"), "dataset cells"),
            population=_opt_id(doc.get("population")),
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Cost:
    """A release's RDP cost `epsilon` at the ledger order `order` (rounded to the ledger grid)."""

    order: float
    epsilon: float

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Cost:
        """Read the service's JSON."""
        return cls(
            order=_float(_get(doc, "order", "cost")),
            epsilon=_float(_get(doc, "epsilon", "cost")),
        )


@dataclass(frozen=True)
class Mechanism:
    """The mechanism as carried out: its `kind`, how it was priced, and the parameters it used.

    `parameters` holds every other member of the record (``r``, ``alpha``, ``prior``,
    ``calibration``, ``sigma``, ``scale``, ``lower_bound``, …), as the service sent them;
    ``mechanism["r"]`` reads one.
    """

    kind: str
    pricing: str
    parameters: Dict[str, Any]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Mechanism:
        """Read the service's JSON."""
        # An external charge's record is its description with `kind: external`: the mechanism
        # it names ("gaussian", "composed", …) is its kind here.
        external = doc.get("kind") == "external" and "mechanism" in doc
        key = "mechanism" if external else "kind"
        rest = {
            k: v
            for k, v in doc.items()
            if k not in ("kind", "mechanism" if external else "", "pricing")
        }
        return cls(
            kind=str(_get(doc, key, "mechanism")),
            pricing=str(doc.get("pricing", "")),
            parameters=rest,
        )

    def __getitem__(self, name: str) -> Any:
        """A parameter by name (``kind`` and ``pricing`` included)."""
        if name == "kind":
            return self.kind
        if name == "pricing":
            return self.pricing
        return self.parameters[name]


@dataclass(frozen=True)
class Release:
    """One private release.

    A vector release has `distribution` (a list, or a `pandas.Series` when a Series went in); a
    table release has `distributions` (a list of rows, or a `pandas.DataFrame` when a DataFrame
    went in). A pandas output is labelled with the dataset's `cells` when it has them (in the
    dataset's order), else with the input's labels; a DataFrame's rows are labelled with
    `row_names` when the release has them, else with the input's index.

    `cells` are the dataset's cell names (None when it has none); `row_names` the table's row
    names, when the release was made with them.

    `budget` is the dataset's ledger right after the charge (for a replay: at the time of the
    replay); None on a stored release read back with `get_release` or `releases`. `replayed` is
    True when the service answered a retry with the stored release (no new charge), and
    `idempotency_key` is the key the release was sent with (None on stored releases).

    `kind` is ``"release"``, or ``"external"`` for a charge recorded with `record_charge` or
    `record_dp_event` as the listing returns it: no output (`distribution` and `distributions`
    are None), its `mechanism` is the charge's description (``mechanism.kind`` is
    ``"gaussian"``, ``"composed"``, …) and its `cost` what the ledger was charged.
    """

    id: str
    dataset_id: str
    seq: int
    created_at: datetime
    created_by: str
    mechanism: Mechanism
    cost: Cost
    kind: str = "release"
    budget: Optional[Budget] = None
    distribution: Optional[Distribution] = None
    distributions: Optional[Distributions] = None
    label: Optional[str] = None
    cells: Optional[List[str]] = None
    row_names: Optional[List[str]] = None
    replayed: bool = False
    idempotency_key: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(
        cls,
        doc: Mapping[str, Any],
        *,
        replayed: bool = False,
        idempotency_key: Optional[str] = None,
        distribution: Optional[Distribution] = None,
        distributions: Optional[Distributions] = None,
        cells: Optional[List[str]] = None,
    ) -> Release:
        """Read the service's JSON; `distribution`/`distributions` replace the JSON's lists.

        `cells` stands in for a release listed in a page, which names the dataset's cells once
        for the page rather than in every item.
        """
        budget = doc.get("budget")
        if distribution is None and "distribution" in doc:
            distribution = [float(p) for p in doc["distribution"]]
        if distributions is None and "distributions" in doc:
            distributions = [[float(p) for p in row] for row in doc["distributions"]]
        if doc.get("kind") == "external":
            # An external charge has no output, whatever empty list the record carries.
            distribution = distribution or None
            distributions = distributions or None
        label = doc.get("label")
        return cls(
            id=str(_get(doc, "id", "release")),
            dataset_id=str(
                doc["dataset_id"] if "dataset_id" in doc else _get(doc, "dataset", "release")
            ),
            seq=int(_get(doc, "seq", "release")),
            created_at=parse_time(_get(doc, "created_at", "release")),
            created_by=str(_get(doc, "created_by", "release")),
            mechanism=Mechanism.from_json(_get(doc, "mechanism", "release")),
            cost=Cost.from_json(_get(doc, "cost", "release")),
            kind=str(doc.get("kind", "release")),
            budget=Budget.from_json(budget) if isinstance(budget, dict) else None,
            distribution=distribution,
            distributions=distributions,
            label=label if isinstance(label, str) else None,
            cells=_names(doc["cells"], "release cells") if "cells" in doc else cells,
            row_names=_names(doc.get("row_names"), "release row_names"),
            replayed=replayed,
            idempotency_key=idempotency_key,
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Preview:
    """A release priced and forecast, nothing drawn and nothing spent.

    `admissible` says whether the ledger would admit it now (for an analyst with an allocation:
    both the dataset's budget and the allocation); `budget_after` is the dataset's ledger as it
    would be after it, and `allocation_after` the calling analyst's allocation (None for the
    admin and for an analyst without one). A vector gets `forecast` (None for the Gaussian and
    Laplace baselines), a table `forecasts`, one per row (a list, or a `pandas.Series` indexed
    like the DataFrame's rows when a DataFrame went in). `cells` are the dataset's cell names.
    """

    mechanism: Mechanism
    cost: Cost
    admissible: bool
    budget_after: Budget
    allocation_after: Optional[Allocation] = None
    cells: Optional[List[str]] = None
    forecast: Optional[Dict[str, Any]] = None
    forecasts: Optional[Union[List[Optional[Dict[str, Any]]], pd.Series[Any]]] = None
    without_bound: Optional[Dict[str, Any]] = None
    gohari: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(
        cls,
        doc: Mapping[str, Any],
        *,
        forecasts: Optional[Union[List[Optional[Dict[str, Any]]], pd.Series[Any]]] = None,
    ) -> Preview:
        """Read the service's JSON; `forecasts` replaces the JSON's list."""
        if forecasts is None and isinstance(doc.get("forecasts"), list):
            forecasts = list(doc["forecasts"])
        allocation = doc.get("allocation_after")
        return cls(
            mechanism=Mechanism.from_json(_get(doc, "mechanism", "preview")),
            cost=Cost.from_json(_get(doc, "cost", "preview")),
            admissible=bool(_get(doc, "admissible", "preview")),
            budget_after=Budget.from_json(_get(doc, "budget_after", "preview")),
            allocation_after=(
                Allocation.from_json(allocation) if isinstance(allocation, dict) else None
            ),
            cells=_names(doc.get("cells"), "preview cells"),
            forecast=doc.get("forecast"),
            forecasts=forecasts,
            without_bound=doc.get("without_bound"),
            gohari=doc.get("gohari"),
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Token:
    """A new analyst token. `token` is the bearer secret ``dra_<id>_<secret>``, shown only once."""

    id: str
    token: str = field(repr=False)
    role: str
    datasets: List[str]
    created_at: datetime
    expires_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Token:
        """Read the service's JSON."""
        return cls(
            id=str(_get(doc, "id", "token")),
            token=str(_get(doc, "token", "token")),
            role=str(_get(doc, "role", "token")),
            datasets=[str(d) for d in _get(doc, "datasets", "token")],
            created_at=parse_time(_get(doc, "created_at", "token")),
            expires_at=_opt_time(doc.get("expires_at")),
        )


@dataclass(frozen=True)
class TokenInfo:
    """An analyst token as listed (never its secret)."""

    id: str
    role: str
    datasets: List[str]
    created_at: datetime
    expires_at: Optional[datetime] = None
    last_used_at: Optional[datetime] = None
    revoked_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TokenInfo:
        """Read the service's JSON."""
        return cls(
            id=str(_get(doc, "id", "token")),
            role=str(_get(doc, "role", "token")),
            datasets=[str(d) for d in _get(doc, "datasets", "token")],
            created_at=parse_time(_get(doc, "created_at", "token")),
            expires_at=_opt_time(doc.get("expires_at")),
            last_used_at=_opt_time(doc.get("last_used_at")),
            revoked_at=_opt_time(doc.get("revoked_at")),
        )


@dataclass(frozen=True)
class WhoAmI:
    """The presented token's role; for an analyst token its id and datasets."""

    role: str
    token_id: Optional[str] = None
    datasets: Optional[List[str]] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WhoAmI:
        """Read the service's JSON."""
        datasets = doc.get("datasets")
        token_id = doc.get("token_id")
        return cls(
            role=str(_get(doc, "role", "whoami")),
            token_id=token_id if isinstance(token_id, str) else None,
            datasets=[str(d) for d in datasets] if isinstance(datasets, list) else None,
        )


@dataclass(frozen=True)
class PathNode:
    """One node of a budget path: a dataset or a population, with its ledger at the path's order.

    `binding` is True for the node (or nodes, on a tie) with the least `remaining` on the path:
    the one that limits the next release or charge.
    """

    kind: str
    id: str
    name: str
    total: float
    spent: float
    remaining: float
    binding: bool

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PathNode:
        """Read the service's JSON."""
        binding = _get(doc, "binding", "path node")
        if not isinstance(binding, bool):
            raise BadResponse("path node: `binding` is not true or false")
        return cls(
            kind=str(_get(doc, "kind", "path node")),
            id=str(_get(doc, "id", "path node")),
            name=str(_get(doc, "name", "path node")),
            total=_float(_get(doc, "total", "path node")),
            spent=_float(_get(doc, "spent", "path node")),
            remaining=_float(_get(doc, "remaining", "path node")),
            binding=binding,
        )


@dataclass(frozen=True)
class Population:
    """A population: a budget shared by the datasets (and populations) under it.

    Every release or charge on a dataset in it is also charged here and to every ancestor up to
    the root, and must fit each. `children` says how its direct children's charges add up:
    ``"shared"`` (the children may hold the same people: their charges are summed) or
    ``"disjoint"`` (each person is in at most one child: the largest child's charge counts,
    parallel composition). `parent` is the enclosing population's id, None for a root. `spent`
    is RDP at the budget's order.
    """

    id: str
    name: str
    budget: BudgetSpec
    parent: Optional[str]
    children: str
    spent: float
    created_at: datetime
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Population:
        """Read the service's JSON."""
        return cls(
            id=str(_get(doc, "id", "population")),
            name=str(_get(doc, "name", "population")),
            budget=BudgetSpec.from_json(_get(doc, "budget", "population")),
            parent=_opt_id(doc.get("parent")),
            children=str(_get(doc, "children", "population")),
            spent=_float(_get(doc, "spent", "population")),
            created_at=parse_time(_get(doc, "created_at", "population")),
            raw=dict(doc),
        )


@dataclass(frozen=True)
class PopulationBudget:
    """A population's ledger at one instant, at its order λ₀, and its path to the root.

    `path` is this population first, then its ancestors up to the root; a charge under it must
    fit every node on the path. It is empty when read from a refusal (`PopulationBudgetExhausted`),
    which carries the refusing node's ledger only.
    """

    order: float
    total: float
    spent: float
    remaining: float
    path: List[PathNode] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PopulationBudget:
        """Read the service's JSON."""
        path = doc.get("path")
        return cls(
            order=_float(_get(doc, "order", "population budget")),
            total=_float(_get(doc, "total", "population budget")),
            spent=_float(_get(doc, "spent", "population budget")),
            remaining=_float(_get(doc, "remaining", "population budget")),
            path=_path(path) if path is not None else [],
            raw=dict(doc),
        )

    @property
    def binding(self) -> Optional[PathNode]:
        """The first node of the path with the least remaining (None for an empty path)."""
        return next((node for node in self.path if node.binding), None)


@dataclass(frozen=True)
class Charge:
    """An external charge: privacy spent outside the service, recorded on a dataset's ledger.

    `mechanism` is the charge's description as the service stored it, without the label
    (``{"mechanism": "gaussian", "sigma": …, "sensitivity": …, "count": …}``, or ``"composed"``
    with its ``events``); `cost` is what the ledger was charged at its order (and, for a
    dataset in a population, every population on its path too). It is listed among the
    dataset's releases with ``kind == "external"`` and no output, and the release log's hash
    chain covers it.

    `replayed` is True when the service answered a retry under the same Idempotency-Key with the
    stored charge (no second charge); `idempotency_key` is the key it was sent with.
    """

    id: str
    dataset_id: str
    kind: str
    mechanism: Dict[str, Any]
    cost: Cost
    created_at: datetime
    label: Optional[str] = None
    seq: Optional[int] = None
    created_by: Optional[str] = None
    budget: Optional[Budget] = None
    replayed: bool = False
    idempotency_key: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(
        cls,
        doc: Mapping[str, Any],
        *,
        replayed: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> Charge:
        """Read the service's JSON."""
        mechanism = _get(doc, "mechanism", "charge")
        if not isinstance(mechanism, dict):
            raise BadResponse("charge: `mechanism` is not an object")
        description = {k: v for k, v in mechanism.items() if k != "kind"}
        dataset = doc["dataset_id"] if "dataset_id" in doc else _get(doc, "dataset", "charge")
        seq = doc.get("seq", doc.get("sequence"))
        label = doc.get("label")
        created_by = doc.get("created_by")
        budget = doc.get("budget")
        return cls(
            id=str(_get(doc, "id", "charge")),
            dataset_id=str(dataset),
            kind=str(doc.get("kind", mechanism.get("kind", "external"))),
            mechanism=description,
            cost=Cost.from_json(_get(doc, "cost", "charge")),
            created_at=parse_time(_get(doc, "created_at", "charge")),
            label=label if isinstance(label, str) else None,
            seq=int(seq) if seq is not None else None,
            created_by=created_by if isinstance(created_by, str) else None,
            budget=Budget.from_json(budget) if isinstance(budget, dict) else None,
            replayed=replayed,
            idempotency_key=idempotency_key,
            raw=dict(doc),
        )
