"""Typed views of the service's JSON (standard-library dataclasses, no pydantic).

Each model keeps the document it was read from in `raw`, so a field this version does not model
is still at hand. Timestamps are timezone-aware `datetime`s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from ._exceptions import BadResponse

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Allocation",
    "AllocationChange",
    "Allocations",
    "Budget",
    "BudgetSpec",
    "Cost",
    "Dataset",
    "DpView",
    "Mechanism",
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
    """

    order: float
    total: float
    spent: float
    remaining: float
    releases: int
    dp: Optional[DpView] = None
    allocation: Optional[Allocation] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Budget:
        """Read the service's JSON."""
        dp = doc.get("dp")
        allocation = doc.get("allocation")
        return cls(
            order=_float(_get(doc, "order", "budget")),
            total=_float(_get(doc, "total", "budget")),
            spent=_float(_get(doc, "spent", "budget")),
            remaining=_float(_get(doc, "remaining", "budget")),
            releases=int(_get(doc, "releases", "budget")),
            dp=DpView.from_json(dp) if isinstance(dp, dict) else None,
            allocation=Allocation.from_json(allocation) if isinstance(allocation, dict) else None,
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
    then has that many cells, in that order); None otherwise.
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
        rest = {k: v for k, v in doc.items() if k not in ("kind", "pricing")}
        return cls(
            kind=str(_get(doc, "kind", "mechanism")),
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
    """

    id: str
    dataset_id: str
    seq: int
    created_at: datetime
    created_by: str
    mechanism: Mechanism
    cost: Cost
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
        label = doc.get("label")
        return cls(
            id=str(_get(doc, "id", "release")),
            dataset_id=str(_get(doc, "dataset_id", "release")),
            seq=int(_get(doc, "seq", "release")),
            created_at=parse_time(_get(doc, "created_at", "release")),
            created_by=str(_get(doc, "created_by", "release")),
            mechanism=Mechanism.from_json(_get(doc, "mechanism", "release")),
            cost=Cost.from_json(_get(doc, "cost", "release")),
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
