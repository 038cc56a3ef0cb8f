"""What the sync and async clients share: building requests, the retry rule, reading answers.

Each public method is described once here as a `Call` (the request, how it may be retried, and
how its answer is read); `Client` and `AsyncClient` only send it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    TypeVar,
    Union,
)
from urllib.parse import quote, urlencode

import httpx

from ._counts import (
    Shape,
    has_labels,
    prepare_counts,
    prepare_row_names,
    shape_distribution,
    shape_distributions,
    shape_forecasts,
    to_jsonable,
)
from ._dp_events import dp_event_charge
from ._exceptions import (
    APIConnectionError,
    APITimeoutError,
    BadResponse,
    ProblemError,
    parse_retry_after,
    problem_class,
)
from ._mechanisms import Mechanisms
from ._models import (
    Allocation,
    Allocations,
    Block,
    Budget,
    BudgetSpec,
    Charge,
    Dataset,
    Population,
    PopulationBudget,
    Preview,
    Release,
    Sensitivity,
    Token,
    TokenInfo,
    WhoAmI,
)
from ._plan import Plan, PlanItem, plan_item_json
from ._version import __version__

log = logging.getLogger("dirichlet_release")

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF = 0.5
DEFAULT_MAX_BACKOFF = 8.0
# A Retry-After longer than this is cut to it: the caller asked for bounded retries.
MAX_RETRY_AFTER = 60.0
DEFAULT_PAGE_SIZE = 100


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call: the request, its retry rule and how to read a successful answer.

    `resend` is True when sending the request twice has the effect of sending it once (reads, a
    preview, a release under its Idempotency-Key, a revocation): then any lost connection, 503 or
    504 ``commit-outcome-unknown`` is retried. Otherwise only failures that prove the request
    never reached the service (the connection could not be opened) are.
    """

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: Optional[bytes] = None
    params: Optional[Dict[str, Union[str, int]]] = None
    headers: Dict[str, str] = field(default_factory=dict)
    resend: bool = True
    idempotency_key: Optional[str] = None


def _encode(body: Mapping[str, Any]) -> bytes:
    # Serialised once per call, so every retry sends the same bytes under the same key.
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise BadResponse(f"HTTP {response.status_code}: the answer is not JSON") from None


def _object(response: httpx.Response) -> Dict[str, Any]:
    doc = _json(response)
    if not isinstance(doc, dict):
        raise BadResponse(f"HTTP {response.status_code}: expected a JSON object")
    return doc


def _segment(value: str) -> str:
    return quote(str(value), safe="")


#: The request fields that name the blocks a release or charge reads, on a dataset split into
#: blocks: ``blocks=("2026-12-01", "2026-12-07")`` (first and last, inclusive) or
#: ``block="2026-12-05"``.
BLOCK_FIELDS = ("blocks", "block")


def _block_field(name: str, value: Any) -> Any:
    """A block field as the service takes it.

    `blocks` becomes ``{"from", "to"}`` from a pair of keys (a mapping is sent as it is);
    `block` is its key.
    """
    if name == "block":
        return str(value)
    if isinstance(value, Mapping):
        return {"from": str(value["from"]), "to": str(value["to"])}
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError("blocks must be a pair of block keys: (first, last)")
    return {"from": str(value[0]), "to": str(value[1])}


def _budget_request(budget: Union[BudgetSpec, Mapping[str, float]]) -> Dict[str, float]:
    """A population's budget for the request: a `BudgetSpec`, or a dict sent as it is."""
    if isinstance(budget, BudgetSpec):
        out: Dict[str, float] = {"epsilon": budget.epsilon, "order": budget.order}
        if budget.delta is not None:
            out["delta"] = budget.delta
        return out
    if not isinstance(budget, Mapping):
        raise TypeError(
            'budget must be a dict such as {"epsilon": 1.0, "order": 2} '
            '(or {"epsilon": …, "delta": …}), or a BudgetSpec'
        )
    return dict(budget)


def _cell_names(cells: Any) -> List[str]:
    """A dataset's `cells` for the request: a list (or a pandas Index) of strings."""
    if isinstance(cells, (str, bytes)):
        raise TypeError("cells must be a list of names, not one string")
    names = list(cells)
    if not all(isinstance(name, str) for name in names):
        raise TypeError("cells must be names (strings)")
    return names


def _problem_type(response: httpx.Response) -> Optional[str]:
    if "json" not in response.headers.get("content-type", ""):
        return None
    try:
        doc = response.json()
    except ValueError:
        return None
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None


def problem_error(response: httpx.Response, idempotency_key: Optional[str]) -> ProblemError:
    """The typed exception for an error answer (a problem document, or a bare error page)."""
    body: Dict[str, Any]
    doc: Any = None
    if "json" in response.headers.get("content-type", ""):
        try:
            doc = response.json()
        except ValueError:
            doc = None
    if isinstance(doc, dict):
        body = doc
    else:
        # Not from the service (a proxy's page, say): keep the status, the reason and a little
        # of the text.
        body = {
            "type": "about:blank",
            "title": response.reason_phrase or f"HTTP {response.status_code}",
            "status": response.status_code,
            "detail": response.text[:200],
        }
    kind = body.get("type")
    cls = problem_class(response.status_code, kind if isinstance(kind, str) else None)
    return cls(
        response.status_code,
        body,
        headers={k.lower(): v for k, v in response.headers.items()},
        idempotency_key=idempotency_key,
    )


class TokenProvider(Protocol):
    """A function without arguments returning the current bearer token.

    A client given one instead of a token calls it before every request and every retry, so
    that an OpenID provider's short-lived access token can be refreshed as it nears expiry.
    """

    def __call__(self) -> str: ...


TokenSource = Union[str, TokenProvider]


_RESENDABLE_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
# Failures that prove the request never reached the service.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class BaseClient:
    """Configuration, request building and the retry rule shared by both clients."""

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required (e.g. http://127.0.0.1:8080)")
        if not token:
            raise ValueError(
                "token is required (the admin token, an analyst token dra_…, or a function "
                "returning an OpenID provider's access token)"
            )
        if not isinstance(token, str) and not callable(token):
            raise TypeError("token must be a string or a function returning one")
        if retries < 0:
            raise ValueError("retries must be ≥ 0")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._token = token
        self._headers = {
            "Accept": "application/json, application/problem+json",
            "User-Agent": f"dirichlet-release-python/{__version__}",
        }
        # Each dataset's cell names (None: it has none), by id. A dataset's cells are fixed at
        # registration, so what was read once stays true.
        self._cells: Dict[str, Optional[List[str]]] = {}
        # The service's mechanisms, read the first time they are needed and kept: they change
        # only with the service's version.
        self._mechanisms: Optional[Mechanisms] = None

    @staticmethod
    def _env() -> tuple[str, str]:
        url = os.environ.get("DIRICHLET_URL")
        token = os.environ.get("DIRICHLET_TOKEN")
        if not url or not token:
            raise ValueError("set DIRICHLET_URL and DIRICHLET_TOKEN to use from_env()")
        return url, token

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    # ------------------------------------------------------------------ the retry rule

    def _backoff(self, attempt: int) -> float:
        # Capped exponential backoff with jitter, so retrying clients do not arrive together.
        cap = min(self.max_backoff, self.backoff * (2.0**attempt))
        return cap * (0.5 + random.random() / 2.0)  # timing jitter, not a secret

    def _delay_after_error(
        self, call: Call[Any], error: Exception, attempt: int
    ) -> Optional[float]:
        """Seconds to wait before resending after `error`, or None to give up."""
        if attempt >= self.retries:
            return None
        retry = isinstance(error, _UNSENT_ERRORS) or (
            call.resend and isinstance(error, _RESENDABLE_ERRORS)
        )
        if not retry:
            return None
        delay = self._backoff(attempt)
        log.info(
            "%s %s: %s; retry %d of %d in %.2f s%s",
            call.method,
            call.path,
            type(error).__name__,
            attempt + 1,
            self.retries,
            delay,
            f" with Idempotency-Key {call.idempotency_key}" if call.idempotency_key else "",
        )
        return delay

    def _delay_after_status(
        self, call: Call[Any], response: httpx.Response, attempt: int
    ) -> Optional[float]:
        """Seconds to wait before resending after an error answer, or None to raise it."""
        if attempt >= self.retries or not call.resend:
            return None
        status = response.status_code
        if status == 503:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            delay = self._backoff(attempt)
            if retry_after is not None:
                delay = max(delay, min(retry_after, MAX_RETRY_AFTER))
        elif status == 504 and _problem_type(response) == "/problems/commit-outcome-unknown":
            delay = self._backoff(attempt)
        else:
            return None
        log.info(
            "%s %s: HTTP %d; retry %d of %d in %.2f s%s",
            call.method,
            call.path,
            status,
            attempt + 1,
            self.retries,
            delay,
            f" with Idempotency-Key {call.idempotency_key}" if call.idempotency_key else "",
        )
        return delay

    def _connection_error(self, call: Call[Any], error: Exception) -> APIConnectionError:
        cls = APITimeoutError if isinstance(error, httpx.TimeoutException) else APIConnectionError
        tries = "once" if self.retries == 0 else f"{self.retries + 1} times"
        message = f"{call.method} {call.path}: {type(error).__name__}: {error} (tried {tries})"
        if call.idempotency_key:
            message += (
                f"; the release may or may not have been charged: call release again with "
                f"idempotency_key={call.idempotency_key!r} to find out without paying twice"
            )
        return cls(message, idempotency_key=call.idempotency_key)

    # ------------------------------------------------------------------ the dataset's cells

    def _remember(self, dataset: Dataset) -> Dataset:
        self._cells[dataset.id] = dataset.cells
        return dataset

    def _read_dataset(self, response: httpx.Response) -> Dataset:
        return self._remember(Dataset.from_json(_object(response)))

    def _needs_cells(self, dataset_id: str, counts: Any) -> bool:
        """True when `counts` is aligned by name and the dataset's cells are not known yet."""
        return has_labels(counts) and str(dataset_id) not in self._cells

    def _known_cells(self, dataset_id: str, counts: Any) -> Optional[List[str]]:
        """The cells to align `counts` to: the dataset's, for pandas input; None otherwise."""
        return self._cells.get(str(dataset_id)) if has_labels(counts) else None

    # ------------------------------------------------------------------ the calls

    def _create_dataset(
        self,
        name: str,
        *,
        epsilon: float,
        order: Optional[float],
        delta: Optional[float],
        neighbouring: Optional[str],
        sensitivity: Union[Sensitivity, Mapping[str, float], None],
        cells: Optional[Any],
        population: Optional[str] = None,
        period: Optional[str] = None,
    ) -> Call[Dataset]:
        budget: Dict[str, Any] = {"epsilon": epsilon}
        if order is not None:
            budget["order"] = order
        if delta is not None:
            budget["delta"] = delta
        body: Dict[str, Any] = {"name": name, "budget": budget}
        if neighbouring is not None:
            body["neighbouring"] = neighbouring
        if sensitivity is not None:
            body["sensitivity"] = (
                sensitivity.to_json() if isinstance(sensitivity, Sensitivity) else dict(sensitivity)
            )
        if cells is not None:
            body["cells"] = _cell_names(cells)
        if population is not None:
            body["population"] = str(population)
        if period is not None:
            body["blocks"] = {"period": period}
        return Call(
            "POST",
            "/v1/datasets",
            self._read_dataset,
            body=_encode(body),
            resend=False,
        )

    def _get_dataset(self, dataset_id: str) -> Call[Dataset]:
        def parse(response: httpx.Response) -> Dataset:
            dataset = self._read_dataset(response)
            # Also under the id as the caller spelt it, which a later release will use.
            self._cells[str(dataset_id)] = dataset.cells
            return dataset

        return Call("GET", f"/v1/datasets/{_segment(dataset_id)}", parse)

    def _list_datasets(self) -> Call[List[Dataset]]:
        return Call(
            "GET",
            "/v1/datasets",
            lambda r: [self._remember(Dataset.from_json(d)) for d in _object(r).get("items", [])],
        )

    def _blocks(self, dataset_id: str, start: str, end: str) -> Call[List[Block]]:
        query = urlencode({"from": start, "to": end})
        return Call(
            "GET",
            f"/v1/datasets/{_segment(dataset_id)}/blocks?{query}",
            lambda r: [Block.from_json(b) for b in _object(r).get("items", [])],
        )

    def _budget(self, dataset_id: str) -> Call[Budget]:
        return Call(
            "GET",
            f"/v1/datasets/{_segment(dataset_id)}/budget",
            lambda r: Budget.from_json(_object(r)),
        )

    def _release_body(
        self,
        dataset_id: str,
        counts: Any,
        epsilon: Optional[float],
        mechanism: str,
        label: Optional[str],
        row_names: Any,
        params: Mapping[str, Any],
    ) -> tuple[Dict[str, Any], Shape]:
        member, value, shape = prepare_counts(counts, self._known_cells(dataset_id, counts))
        names = prepare_row_names(row_names, counts)
        body: Dict[str, Any] = {member: value, "mechanism": mechanism}
        if epsilon is not None:
            body["epsilon"] = epsilon
        if label is not None:
            body["label"] = label
        if names is not None:
            body["row_names"] = names
        for name, param in params.items():
            if param is not None:
                body[name] = (
                    _block_field(name, param) if name in BLOCK_FIELDS else to_jsonable(param, name)
                )
        return body, shape

    def _preview(
        self,
        dataset_id: str,
        counts: Any,
        epsilon: Optional[float],
        mechanism: str,
        label: Optional[str],
        row_names: Any,
        params: Mapping[str, Any],
    ) -> Call[Preview]:
        body, shape = self._release_body(
            dataset_id, counts, epsilon, mechanism, label, row_names, params
        )

        def parse(response: httpx.Response) -> Preview:
            doc = _object(response)
            raw = doc.get("forecasts")
            forecasts = shape_forecasts(raw if isinstance(raw, list) else None, shape)
            return Preview.from_json(doc, forecasts=forecasts)

        return Call(
            "POST",
            f"/v1/datasets/{_segment(dataset_id)}/releases/preview",
            parse,
            body=_encode(body),
        )

    def _release(
        self,
        dataset_id: str,
        counts: Any,
        epsilon: Optional[float],
        mechanism: str,
        label: Optional[str],
        row_names: Any,
        idempotency_key: Optional[str],
        params: Mapping[str, Any],
    ) -> Call[Release]:
        body, shape = self._release_body(
            dataset_id, counts, epsilon, mechanism, label, row_names, params
        )
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())

        def parse(response: httpx.Response) -> Release:
            doc = _object(response)
            release = Release.from_json(
                doc,
                replayed=response.headers.get("idempotent-replayed", "").lower() == "true",
                idempotency_key=key,
            )
            # Labelled as the dataset and the release name them, else as the input was.
            distribution = distributions = None
            if isinstance(release.distribution, list):
                distribution = shape_distribution(release.distribution, shape, release.cells)
            if isinstance(release.distributions, list):
                distributions = shape_distributions(
                    release.distributions, shape, release.cells, release.row_names
                )
            return dataclasses.replace(
                release, distribution=distribution, distributions=distributions
            )

        return Call(
            "POST",
            f"/v1/datasets/{_segment(dataset_id)}/releases",
            parse,
            body=_encode(body),
            headers={"Idempotency-Key": key},
            idempotency_key=key,
        )

    def _release_page(
        self, dataset_id: str, before: Optional[int], page_size: int
    ) -> Call[tuple[List[Release], Optional[int]]]:
        params: Dict[str, Union[str, int]] = {"limit": page_size}
        if before is not None:
            params["before"] = before

        def parse(response: httpx.Response) -> tuple[List[Release], Optional[int]]:
            doc = _object(response)
            # A page names the dataset's cells once, for all its releases.
            cells = doc.get("cells")
            names = [str(c) for c in cells] if isinstance(cells, list) else None
            items = [Release.from_json(item, cells=names) for item in doc.get("items", [])]
            next_before = doc.get("next_before")
            return items, int(next_before) if next_before is not None else None

        return Call("GET", f"/v1/datasets/{_segment(dataset_id)}/releases", parse, params=params)

    def _get_release(self, dataset_id: str, release_id: str) -> Call[Release]:
        return Call(
            "GET",
            f"/v1/datasets/{_segment(dataset_id)}/releases/{_segment(release_id)}",
            lambda r: Release.from_json(_object(r)),
        )

    def _create_token(self, datasets: Sequence[str], expires_at: Optional[Any]) -> Call[Token]:
        if isinstance(datasets, str):
            raise TypeError("datasets must be a list of dataset ids, not one string")
        body: Dict[str, Any] = {"datasets": [str(d) for d in datasets]}
        if expires_at is not None:
            body["expires_at"] = (
                expires_at if isinstance(expires_at, str) else expires_at.isoformat()
            )
        return Call(
            "POST",
            "/v1/tokens",
            lambda r: Token.from_json(_object(r)),
            body=_encode(body),
            resend=False,
        )

    def _list_tokens(self) -> Call[List[TokenInfo]]:
        return Call(
            "GET",
            "/v1/tokens",
            lambda r: [TokenInfo.from_json(t) for t in _object(r).get("items", [])],
        )

    def _revoke_token(self, token_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/tokens/{_segment(token_id)}", lambda r: None)

    def _set_allocation(self, dataset_id: str, token_id: str, epsilon: float) -> Call[Allocation]:
        # Setting the same allocation twice leaves it as setting it once (the service records
        # only real changes in the audit trail), so a lost answer is resent.
        return Call(
            "PUT",
            f"/v1/datasets/{_segment(dataset_id)}/allocations/{_segment(token_id)}",
            lambda r: Allocation.from_json(_object(r)),
            body=_encode({"epsilon": epsilon}),
        )

    def _remove_allocation(self, dataset_id: str, token_id: str) -> Call[None]:
        # Not resent after a lost answer: a second removal is 404, which would hide that the
        # first one worked.
        return Call(
            "DELETE",
            f"/v1/datasets/{_segment(dataset_id)}/allocations/{_segment(token_id)}",
            lambda r: None,
            resend=False,
        )

    def _allocations(self, dataset_id: str) -> Call[Allocations]:
        return Call(
            "GET",
            f"/v1/datasets/{_segment(dataset_id)}/allocations",
            lambda r: Allocations.from_json(_object(r)),
        )

    def _list_mechanisms(self) -> Call[Mechanisms]:
        def parse(response: httpx.Response) -> Mechanisms:
            self._mechanisms = Mechanisms.from_json(_json(response))
            return self._mechanisms

        return Call("GET", "/v1/mechanisms", parse)

    @staticmethod
    def _plan_items(items: Sequence[Union[PlanItem, Mapping[str, Any]]]) -> List[Dict[str, Any]]:
        """The request's items, checked before anything is sent."""
        if isinstance(items, (PlanItem, Mapping, str)):
            raise TypeError("items must be a list of PlanItem (or dicts), not one item")
        return [plan_item_json(item, i) for i, item in enumerate(items)]

    def _plan(
        self, dataset_id: str, sent: List[Dict[str, Any]], mechanisms: Mechanisms
    ) -> Call[Plan]:
        # Side-effect free (nothing is charged or stored), so resent like a read.
        return Call(
            "POST",
            f"/v1/datasets/{_segment(dataset_id)}/plan",
            lambda r: Plan.from_json(_object(r), sent=sent, mechanisms=mechanisms),
            body=_encode({"items": sent}),
        )

    # ------------------------------------------------------------------ populations

    def _create_population(
        self,
        name: str,
        budget: Union[BudgetSpec, Mapping[str, float]],
        parent: Optional[str],
        children: str,
    ) -> Call[Population]:
        if children not in ("shared", "disjoint"):
            raise ValueError('children must be "shared" or "disjoint"')
        body: Dict[str, Any] = {"name": name, "budget": _budget_request(budget)}
        if parent is not None:
            body["parent"] = str(parent)
        body["children"] = children
        return Call(
            "POST",
            "/v1/populations",
            lambda r: Population.from_json(_object(r)),
            body=_encode(body),
            resend=False,
        )

    def _list_populations(self) -> Call[List[Population]]:
        def parse(response: httpx.Response) -> List[Population]:
            doc = _object(response)
            items = doc.get("populations", doc.get("items"))
            if not isinstance(items, list):
                raise BadResponse("populations: the service's answer has no `populations` list")
            return [Population.from_json(p) for p in items]

        return Call("GET", "/v1/populations", parse)

    def _get_population(self, population_id: str) -> Call[Population]:
        return Call(
            "GET",
            f"/v1/populations/{_segment(population_id)}",
            lambda r: Population.from_json(_object(r)),
        )

    def _population_budget(self, population_id: str) -> Call[PopulationBudget]:
        return Call(
            "GET",
            f"/v1/populations/{_segment(population_id)}/budget",
            lambda r: PopulationBudget.from_json(_object(r)),
        )

    def _set_dataset_population(
        self, dataset_id: str, population_id: Optional[str]
    ) -> Call[Dataset]:
        # Not resent after a lost answer: an attach charges the dataset's spend to the new path,
        # and whether a second one would is the service's to say, not the client's to assume.
        return Call(
            "PUT",
            f"/v1/datasets/{_segment(dataset_id)}/population",
            self._read_dataset,
            body=_encode({"population": None if population_id is None else str(population_id)}),
            resend=False,
        )

    def _move_population(self, population_id: str, parent: Optional[str]) -> Call[Population]:
        # Not resent after a lost answer, for the same reason as an attach: a move charges the
        # subtree's spend to the new ancestors.
        return Call(
            "PUT",
            f"/v1/populations/{_segment(population_id)}/parent",
            lambda r: Population.from_json(_object(r)),
            body=_encode({"parent": None if parent is None else str(parent)}),
            resend=False,
        )

    def _record_charge(
        self,
        dataset_id: str,
        charge: Mapping[str, Any],
        label: Optional[str],
        idempotency_key: Optional[str],
    ) -> Call[Charge]:
        body: Dict[str, Any] = {}
        for name, value in charge.items():
            if value is not None:
                if name in BLOCK_FIELDS:
                    body[name] = _block_field(name, value)
                else:
                    body[name] = value if name == "events" else to_jsonable(value, name)
        if label is not None:
            body["label"] = label
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())

        def parse(response: httpx.Response) -> Charge:
            return Charge.from_json(
                _object(response),
                replayed=response.headers.get("idempotent-replayed", "").lower() == "true",
                idempotency_key=key,
            )

        # Sent under an Idempotency-Key like a release, so a retry never charges twice.
        return Call(
            "POST",
            f"/v1/datasets/{_segment(dataset_id)}/charges",
            parse,
            body=_encode(body),
            headers={"Idempotency-Key": key},
            idempotency_key=key,
        )

    @staticmethod
    def _charge_body(mechanism: str, params: Mapping[str, Any]) -> Dict[str, Any]:
        if not isinstance(mechanism, str):
            raise TypeError("mechanism must be a string such as 'gaussian'")
        body: Dict[str, Any] = {"mechanism": mechanism}
        body.update(params)
        return body

    @staticmethod
    def _dp_event_body(event: Any) -> Dict[str, Any]:
        return dp_event_charge(event)

    def _whoami(self) -> Call[WhoAmI]:
        return Call("GET", "/v1/whoami", lambda r: WhoAmI.from_json(_object(r)))

    def _bearer(self) -> str:
        if isinstance(self._token, str):
            return self._token
        token = self._token()
        if not isinstance(token, str) or not token:
            raise TypeError("the token function must return a non-empty string")
        return token

    def _request_headers(self, call: Call[Any]) -> Dict[str, str]:
        headers = dict(self._headers)
        headers["Authorization"] = f"Bearer {self._bearer()}"
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        headers.update(call.headers)
        return headers
