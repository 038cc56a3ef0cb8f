"""Every error the client raises.

An HTTP error from the service is an RFC 9457 problem document; it becomes a `ProblemError`
of the subclass callers branch on, chosen by the problem's `type` (then by status for a type
this version does not know). A request that never got an HTTP answer is an `APIConnectionError`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Type

from ._errors import BadResponse, DirichletError
from ._models import Allocation, Budget, PopulationBudget

__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "AllocationExhausted",
    "BadResponse",
    "BeyondPrecision",
    "BudgetExhausted",
    "CalibrationInfeasible",
    "CellsMismatch",
    "CommitOutcomeUnknown",
    "Conflict",
    "CostExceedsEpsilon",
    "DirichletError",
    "Forbidden",
    "IdempotencyKeyReused",
    "InternalServerError",
    "InvalidRequest",
    "NoGuarantee",
    "NotFound",
    "OutputQuotaExceeded",
    "PopulationBudgetExhausted",
    "ProblemError",
    "ServerError",
    "ServiceUnavailable",
    "Unauthorized",
]


class CellsMismatch(DirichletError, ValueError):
    """A pandas input's labels are not the dataset's cells; raised before anything is sent.

    The dataset was registered with `cells`, so a `pandas.Series` (its index) or a
    `pandas.DataFrame` (its columns) is aligned to them by name. Every cell must be there
    once, and nothing else: a cell with no records must be present with 0, which is what
    ``counts.reindex(dataset.cells, fill_value=0)`` (or ``reindex(columns=…)``) does.

    The names are in `missing` (cells the input lacks) and `extra` (labels that are not
    cells), not in the message: which names a table built from the data lacks tells which
    groups are empty, and messages end up in logs.
    """

    def __init__(self, what: str, missing: List[str], extra: List[str]) -> None:
        self.missing = missing
        self.extra = extra
        problems = []
        if missing:
            problems.append("some of the dataset's cells are missing")
        if extra:
            problems.append("some labels are not among the dataset's cells")
        super().__init__(
            f"{what} must name exactly the dataset's cells: {' and '.join(problems)}; "
            "nothing was sent (reindex to the dataset's cells with fill_value=0; the names are "
            "in .missing and .extra)"
        )


class APIConnectionError(DirichletError):
    """No HTTP answer: the connection failed or dropped, on every attempt the retries allowed.

    For a `release` this does not say whether the release was charged: call `release` again with
    the same `idempotency_key` (kept on this exception) to get the stored release if it was, or a
    fresh one charged once if it was not.
    """

    def __init__(self, message: str, *, idempotency_key: Optional[str] = None) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key


class APITimeoutError(APIConnectionError):
    """The client's own timeout passed before the service answered (every attempt)."""


class ProblemError(DirichletError):
    """An `application/problem+json` answer (RFC 9457).

    Attributes:
        status: the HTTP status.
        type: the problem type, e.g. ``/problems/budget-exhausted``.
        title: its short, fixed summary.
        detail: the explanation for this occurrence (never echoes counts).
        field: for an invalid request, the offending field when there is one.
        body: the whole problem document as received (extension members included).
        idempotency_key: the key a `release` was sent with, to retry it safely.

    """

    def __init__(
        self,
        status: int,
        body: Mapping[str, Any],
        *,
        headers: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
    ) -> None:
        self.status = status
        self.body: Dict[str, Any] = dict(body)
        self.type: str = str(body.get("type", "about:blank"))
        self.title: str = str(body.get("title", ""))
        self.detail: str = str(body.get("detail", ""))
        field = body.get("field")
        self.field: Optional[str] = field if isinstance(field, str) else None
        self.headers: Dict[str, str] = dict(headers or {})
        self.idempotency_key = idempotency_key
        where = f" (field {self.field})" if self.field else ""
        super().__init__(f"HTTP {status} {self.type}: {self.detail or self.title}{where}")

    @property
    def slug(self) -> str:
        """The last path segment of `type`, e.g. ``budget-exhausted``."""
        return self.type.rsplit("/", 1)[-1]


class InvalidRequest(ProblemError):
    """The request cannot be carried out as sent (400, 413, 415, 422, 431).

    Retrying it unchanged gives the same answer. Subclasses name the 422s a release can meet.
    """


class CalibrationInfeasible(InvalidRequest):
    """422 ``calibration-infeasible``: no mechanism parameters reach the asked ε."""


class NoGuarantee(InvalidRequest):
    """422 ``no-guarantee``: the mechanism's RDP cost at the ledger order is infinite."""


class CostExceedsEpsilon(InvalidRequest):
    """422 ``cost-exceeds-epsilon``: fully specified parameters cost more than the `epsilon` cap."""


class BeyondPrecision(InvalidRequest):
    """422 ``beyond-precision``: f64 arithmetic cannot carry the shift the price assumes."""


class Unauthorized(ProblemError):
    """401: no valid bearer token (missing, wrong, revoked or expired)."""


class Forbidden(ProblemError):
    """403: the token may not do this.

    An analyst token on an admin-only route; or, on any route, a single sign-on token whose role
    claim the service does not know.
    """


class NotFound(ProblemError):
    """404: no such dataset, release or token — or one outside an analyst token's datasets."""


class Conflict(ProblemError):
    """The request conflicts with what the service holds; nothing was charged or drawn.

    Raised as one of its subclasses: `BudgetExhausted` (and its `AllocationExhausted` and
    `PopulationBudgetExhausted`),
    `OutputQuotaExceeded` (all 409) or `IdempotencyKeyReused` (422).
    """


class BudgetExhausted(Conflict):
    """409 ``budget-exhausted``: the release would overspend the dataset's budget.

    Nothing was charged and nothing was drawn. `budget` is the ledger that refused it and
    `remaining` its remaining budget at the ledger order. A refusal by an analyst's allocation
    rather than the dataset's budget is the subclass `AllocationExhausted`.
    """

    @property
    def budget(self) -> Optional[Budget]:
        """The ledger in the problem's ``budget`` member (None if the body had none)."""
        raw = self.body.get("budget")
        return Budget.from_json(raw) if isinstance(raw, dict) else None

    @property
    def remaining(self) -> Optional[float]:
        """The dataset's remaining budget at the ledger order, from the problem body."""
        budget = self.budget
        return budget.remaining if budget is not None else None


class AllocationExhausted(BudgetExhausted):
    """409 ``allocation-exhausted``: the release would overspend the token's allocation.

    The admin gave the calling analyst token an allocation on the dataset (`set_allocation`),
    and the release fits the dataset's budget but not what is left of that allocation. Nothing
    was charged and nothing was drawn.

    A subclass of `BudgetExhausted`: code that catches `BudgetExhausted` catches this too, and
    there `remaining` is what the caller may still spend — here the allocation's remaining,
    the limit that refused the release. `allocation` is the token's allocation as the refusing
    commit read it; `budget` is the dataset's ledger at the refusal (`budget.remaining` is the
    dataset's).
    """

    @property
    def allocation(self) -> Optional[Allocation]:
        """The allocation in the problem's ``allocation`` member (None if the body had none)."""
        raw = self.body.get("allocation")
        return Allocation.from_json(raw) if isinstance(raw, dict) else None

    @property
    def remaining(self) -> Optional[float]:
        """The allocation's remaining amount at the ledger order, from the problem body."""
        allocation = self.allocation
        return allocation.remaining if allocation is not None else None


class PopulationBudgetExhausted(BudgetExhausted):
    """409 ``population-budget-exhausted``: a population on the dataset's path would overspend.

    The dataset is in a population (`set_dataset_population`), and the release or charge fits
    the dataset's own budget but not that of a population on its path (the dataset's
    population or one of its ancestors); or an attach or a move would put spend under a
    population that cannot hold it. Nothing was charged and nothing was drawn.

    A subclass of `BudgetExhausted`: ``except BudgetExhausted`` catches it too, and there
    `remaining` is the refusing population's remaining, the limit that refused. `population` is
    that population's id and `population_budget` its ledger (`order`, `total`, `spent`,
    `remaining`) as the refusing commit read it. `budget` is None: the problem's ``budget``
    member is the population's ledger, not a dataset's (read it as `population_budget`).
    """

    @property
    def population(self) -> Optional[str]:
        """The id of the population that refused (None if the body had none)."""
        raw = self.body.get("population")
        return str(raw) if raw is not None else None

    @property
    def population_budget(self) -> Optional[PopulationBudget]:
        """The refusing population's ledger, from the problem's ``budget`` member."""
        raw = self.body.get("budget")
        return PopulationBudget.from_json(raw) if isinstance(raw, dict) else None

    @property
    def budget(self) -> Optional[Budget]:
        """None: the ``budget`` member is a population's ledger, see `population_budget`."""
        return None

    @property
    def remaining(self) -> Optional[float]:
        """The refusing population's remaining budget at the ledger order."""
        budget = self.population_budget
        return budget.remaining if budget is not None else None


class OutputQuotaExceeded(Conflict):
    """409 ``output-quota-exceeded``: the dataset's stored outputs would pass the cell quota."""


class IdempotencyKeyReused(Conflict, InvalidRequest):
    """422 ``idempotency-key-reused``: the key was used for another body, or by another token.

    The service refuses rather than replaying, so a key never tells one caller about another's
    request. Use a fresh key for a new request.
    """


class ServerError(ProblemError):
    """A 5xx answer."""


class InternalServerError(ServerError):
    """500 ``internal``: an unexpected error (no details are given)."""


class ServiceUnavailable(ServerError):
    """503 ``service-unavailable`` or ``timeout``: nothing was charged; retry later.

    `retry_after` is the service's ``Retry-After`` in seconds. Raised only once the client's
    own retries are used up.
    """

    @property
    def retry_after(self) -> Optional[float]:
        """Seconds the service asked the client to wait, if it said."""
        return parse_retry_after(self.headers.get("retry-after"))


class CommitOutcomeUnknown(ServerError):
    """504 ``commit-outcome-unknown``: the release may or may not have been charged.

    Raised only once the client's retries are used up; calling `release` again with the same
    `idempotency_key` returns the stored release if it was charged.
    """


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds (the service sends delta-seconds); None when absent or odd."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds == seconds else None


_BY_TYPE: Dict[str, Type[ProblemError]] = {
    "invalid-request": InvalidRequest,
    "malformed-request": InvalidRequest,
    "unsupported-media-type": InvalidRequest,
    "payload-too-large": InvalidRequest,
    "headers-too-large": InvalidRequest,
    "calibration-infeasible": CalibrationInfeasible,
    "no-guarantee": NoGuarantee,
    "cost-exceeds-epsilon": CostExceedsEpsilon,
    "beyond-precision": BeyondPrecision,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "budget-exhausted": BudgetExhausted,
    "allocation-exhausted": AllocationExhausted,
    "population-budget-exhausted": PopulationBudgetExhausted,
    "output-quota-exceeded": OutputQuotaExceeded,
    "idempotency-key-reused": IdempotencyKeyReused,
    "service-unavailable": ServiceUnavailable,
    "timeout": ServiceUnavailable,
    "commit-outcome-unknown": CommitOutcomeUnknown,
    "internal": InternalServerError,
}

_BY_STATUS: Dict[int, Type[ProblemError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    431: InvalidRequest,
    500: InternalServerError,
    503: ServiceUnavailable,
    504: CommitOutcomeUnknown,
}


def problem_class(status: int, problem_type: Optional[str]) -> Type[ProblemError]:
    """The exception class for a problem's type, else its status, else the nearest base."""
    if problem_type and problem_type.startswith("/problems/"):
        by_type = _BY_TYPE.get(problem_type[len("/problems/") :])
        if by_type is not None:
            return by_type
    by_status = _BY_STATUS.get(status)
    if by_status is not None:
        return by_status
    return ServerError if status >= 500 else ProblemError
