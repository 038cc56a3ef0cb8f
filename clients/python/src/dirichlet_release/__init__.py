"""Python client for dirichlet-release: differentially private distributions from counts.

`Client` (blocking) and `AsyncClient` (asyncio) speak the service's HTTP API. A release always
carries an Idempotency-Key and every retry reuses it, so a retried release is charged once;
every problem+json answer is raised as a typed `ProblemError`. Counts may be lists, numpy arrays
or pandas objects, and come back with their labels.
"""

from ._client import AsyncClient, Client
from ._exceptions import (
    APIConnectionError,
    APITimeoutError,
    BadResponse,
    BeyondPrecision,
    BudgetExhausted,
    CalibrationInfeasible,
    CommitOutcomeUnknown,
    Conflict,
    CostExceedsEpsilon,
    DirichletError,
    Forbidden,
    IdempotencyKeyReused,
    InternalServerError,
    InvalidRequest,
    NoGuarantee,
    NotFound,
    OutputQuotaExceeded,
    ProblemError,
    ServerError,
    ServiceUnavailable,
    Unauthorized,
)
from ._models import (
    Budget,
    BudgetSpec,
    Cost,
    Dataset,
    DpView,
    Mechanism,
    Preview,
    Release,
    Sensitivity,
    Token,
    TokenInfo,
    WhoAmI,
)
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "AsyncClient",
    "BadResponse",
    "BeyondPrecision",
    "Budget",
    "BudgetExhausted",
    "BudgetSpec",
    "CalibrationInfeasible",
    "Client",
    "CommitOutcomeUnknown",
    "Conflict",
    "Cost",
    "CostExceedsEpsilon",
    "Dataset",
    "DirichletError",
    "DpView",
    "Forbidden",
    "IdempotencyKeyReused",
    "InternalServerError",
    "InvalidRequest",
    "Mechanism",
    "NoGuarantee",
    "NotFound",
    "OutputQuotaExceeded",
    "Preview",
    "ProblemError",
    "Release",
    "Sensitivity",
    "ServerError",
    "ServiceUnavailable",
    "Token",
    "TokenInfo",
    "Unauthorized",
    "WhoAmI",
    "__version__",
]
