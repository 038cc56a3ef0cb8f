"""`Client` (blocking) and `AsyncClient` (asyncio): the same methods, the same retry rule."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
)

import httpx

from ._base import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    BaseClient,
    Call,
    TokenSource,
    problem_error,
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
from ._plan import Plan, PlanItem

__all__ = ["AsyncClient", "Client"]

T = TypeVar("T")
_Self = TypeVar("_Self", bound="Client")
_ASelf = TypeVar("_ASelf", bound="AsyncClient")


class Client(BaseClient):
    """A blocking client of a dirichlet-release service.

    >>> with Client("http://127.0.0.1:8080", token) as client:          # doctest: +SKIP
    ...     dataset = client.create_dataset("visits", epsilon=1.0, order=2)
    ...     release = client.release(dataset.id, [120, 45, 3, 0, 17, 9], epsilon=0.4)

    Args:
        base_url: the service's address, e.g. ``http://127.0.0.1:8080``.
        token: the admin token, an analyst token ``dra_…``, or a function without arguments
            returning the current bearer token (for example an OpenID provider's access token,
            refreshed by the function as it nears expiry): called before every request and
            every retry, never cached by the client.
        timeout: seconds to wait for each attempt's answer.
        retries: how many times a failed call is sent again (0: never). Reads, previews,
            plans, releases (under their Idempotency-Key) and revocations are retried on a lost
            connection, a 503 (after its ``Retry-After``) and a 504 ``commit-outcome-unknown``;
            creating a dataset or a token only when the connection could not be opened. A 4xx
            is never retried.
        backoff: the first wait between attempts, in seconds; it doubles on each retry.
        max_backoff: the longest wait between attempts (a longer ``Retry-After`` still wins,
            up to 60 s).
        http_client: an `httpx.Client` to send with (its own base URL is not used); the caller
            closes it.

    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(timeout=timeout)

    @classmethod
    def from_env(cls: Type[_Self], **options: Any) -> _Self:
        """A client for ``$DIRICHLET_URL`` with the token ``$DIRICHLET_TOKEN``."""
        url, token = cls._env()
        return cls(url, token, **options)

    def close(self) -> None:
        """Close the connections (only those of an `httpx.Client` this client made)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    self.base_url + call.path,
                    content=call.body,
                    params=call.params,
                    headers=self._request_headers(call),
                    timeout=self.timeout,
                )
            except httpx.TransportError as error:
                delay = self._delay_after_error(call, error, attempt)
                if delay is None:
                    raise self._connection_error(call, error) from error
            else:
                if response.is_success:
                    return call.parse(response)
                delay = self._delay_after_status(call, response, attempt)
                if delay is None:
                    raise problem_error(response, call.idempotency_key)
            time.sleep(delay)
            attempt += 1

    def create_dataset(
        self,
        name: str,
        *,
        epsilon: float,
        order: Optional[float] = None,
        delta: Optional[float] = None,
        neighbouring: Optional[str] = None,
        sensitivity: Union[Sensitivity, Mapping[str, float], None] = None,
        cells: Optional[Iterable[str]] = None,
        population: Optional[str] = None,
        period: Optional[str] = None,
    ) -> Dataset:
        """Register a dataset and its privacy budget (admin only).

        Without `delta` the budget is `epsilon` of Rényi DP at `order` (the ledger order λ₀,
        required then); with `delta` it is an (ε, δ)-DP target converted to RDP at `order`
        (chosen by the service when None). `neighbouring` is ``"replace_one"`` (the default)
        or ``"add_remove_one"``; `sensitivity` (``{"l2_squared": …, "linf": …}``) sets custom
        sensitivities instead.

        `cells` (a list of at least 2 distinct strings, or a pandas Index) names the cells,
        publicly: every release must then have that many cells, a pandas input is aligned to
        them by name, and outputs come back labelled with them. They must be a public list
        fixed in advance (every diagnosis code, every age band), never the values that happen
        to occur in the data. The service stores names (and the dataset's name, labels and row
        names) trimmed and in Unicode NFC, and refuses blank ones and ones holding control or
        invisible format characters (`InvalidRequest`); pandas labels are matched to the cells
        in that form.

        `population` (a population's id) puts the dataset in that population from the start:
        its releases are then charged to the population and its ancestors too. The
        population's order must be the dataset's (`InvalidRequest` otherwise, and for an
        unknown population).

        `period` (``"hour"``, ``"day"``, ``"week"`` or ``"month"``, UTC) splits the dataset into
        blocks over time: each record belongs to the block of its event's time, `epsilon` is
        then the cap of each block, and every release and charge names the blocks it reads
        (``blocks=("2026-12-01", "2026-12-07")`` or ``block="2026-12-05"``) and is charged on
        each of them.
        """
        return self._run(
            self._create_dataset(
                name,
                epsilon=epsilon,
                order=order,
                delta=delta,
                neighbouring=neighbouring,
                sensitivity=sensitivity,
                cells=cells,
                population=population,
                period=period,
            )
        )

    def get_dataset(self, dataset_id: str) -> Dataset:
        """One dataset (`NotFound` if it does not exist or the token may not see it)."""
        return self._run(self._get_dataset(dataset_id))

    def list_datasets(self) -> List[Dataset]:
        """Every dataset the token may see, oldest first."""
        return self._run(self._list_datasets())

    def budget(self, dataset_id: str) -> Budget:
        """The dataset's ledger now: `order`, `total`, `spent`, `remaining`, `releases`, `dp`."""
        return self._run(self._budget(dataset_id))

    def blocks(self, dataset_id: str, start: str, end: str) -> List[Block]:
        """Every block from `start` to `end` (keys, inclusive) of a dataset split into blocks.

        In order, each with its cap, spend and what is left (a block never charged has spent 0).
        """
        return self._run(self._blocks(dataset_id, start, end))

    def preview(
        self,
        dataset_id: str,
        counts: Any,
        *,
        epsilon: Optional[float] = None,
        mechanism: str = "dirichlet",
        label: Optional[str] = None,
        row_names: Union[bool, Iterable[str], None] = None,
        **params: Any,
    ) -> Preview:
        """Price a release and forecast its utility; nothing is drawn and nothing is spent.

        Takes the same arguments as `release` (without the key). For an analyst with an
        allocation, `admissible` needs room in both, and `allocation_after` shows it.
        """
        self._load_cells(dataset_id, counts)
        return self._run(
            self._preview(dataset_id, counts, epsilon, mechanism, label, row_names, params)
        )

    def release(
        self,
        dataset_id: str,
        counts: Any,
        *,
        epsilon: Optional[float] = None,
        mechanism: str = "dirichlet",
        label: Optional[str] = None,
        row_names: Union[bool, Iterable[str], None] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Release:
        """Calibrate, charge and draw one private release.

        Args:
            dataset_id: the dataset to charge.
            counts: a list of counts, a 1-D numpy array or a `pandas.Series` (one vector; the
                Series' index names the cells), or a list of lists, a 2-D array or a
                `pandas.DataFrame` (a table: one row per disjoint group of records, one column
                per cell, released for one charge). When the dataset has `cells`, a Series'
                index or a DataFrame's columns are aligned to them by name (sent in the
                dataset's order; a missing or extra name raises `CellsMismatch` before anything
                is sent), and the output is labelled with them.
            epsilon: the privacy cost to calibrate to (a cap for fully specified mechanisms:
                how each mechanism reads it is its `MechanismInfo.epsilon`).
            mechanism: a mechanism's name; `mechanisms` lists those the service runs.
            label: free text stored with the release.
            row_names: public names of a table's rows, stored with the release; sent only when
                given: a list, or True to send the DataFrame's index. Only ever name rows from
                a public list: a `pandas.crosstab` lists only the groups that occur in the
                data, so reindex it to the public list of groups (``fill_value=0``) first.
                A DataFrame output is indexed by the release's row names.
            idempotency_key: the retry handle; a fresh UUID when None. Every retry of this call
                sends the same key and the same body, so the service charges at most once and a
                retried call returns the stored release (``replayed`` is then True).
            **params: the mechanism's own fields (`mechanisms` lists each mechanism's, with
                their types, defaults and meaning), and ``order``, the calibration order, for
                a mechanism that takes one. Arrays and Series are accepted. The service checks
                them: a field the mechanism does not take is an `InvalidRequest` naming it.
                On a dataset split into blocks, ``blocks=(first, last)`` (block keys, inclusive)
                or ``block=key`` names the blocks the counts cover; the release is charged on
                every one of them (`BudgetExhausted` naming the first full block otherwise).

        Raises:
            BudgetExhausted: the release would overspend the dataset's budget, or (as its
                subclass `AllocationExhausted`) the calling analyst's allocation; nothing
                charged.
            CellsMismatch: a pandas input's labels are not the dataset's cells (nothing sent).
            InvalidRequest: the request cannot be carried out (see its subclasses).
            APIConnectionError: no answer after every retry; the outcome is unknown, retry with
                the same key (kept on the exception).

        """
        self._load_cells(dataset_id, counts)
        return self._run(
            self._release(
                dataset_id, counts, epsilon, mechanism, label, row_names, idempotency_key, params
            )
        )

    def _load_cells(self, dataset_id: str, counts: Any) -> None:
        # A pandas input is aligned to the dataset's cells: read them once per dataset.
        if self._needs_cells(dataset_id, counts):
            self.get_dataset(dataset_id)

    def releases(self, dataset_id: str, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[Release]:
        """Every stored release of the dataset, newest first, fetching page after page."""
        before: Optional[int] = None
        while True:
            items, before = self._run(self._release_page(dataset_id, before, page_size))
            yield from items
            if before is None:
                return

    def get_release(self, dataset_id: str, release_id: str) -> Release:
        """One stored release (its `budget` is None: read `budget()` for the ledger now)."""
        return self._run(self._get_release(dataset_id, release_id))

    def create_token(self, datasets: Sequence[str], *, expires_at: Optional[Any] = None) -> Token:
        """An analyst token confined to `datasets` (admin only).

        `expires_at` (a `datetime` or an RFC 3339 string) ends it; the secret (`Token.token`)
        is returned only this once.
        """
        return self._run(self._create_token(datasets, expires_at))

    def list_tokens(self) -> List[TokenInfo]:
        """Every analyst token, revoked and expired ones included, never their secrets (admin)."""
        return self._run(self._list_tokens())

    def revoke_token(self, token_id: str) -> None:
        """Revoke an analyst token by its public id (admin only); revoking twice is a no-op."""
        self._run(self._revoke_token(token_id))

    def set_allocation(self, dataset_id: str, token_id: str, epsilon: float) -> Allocation:
        """Give an analyst token an allocation of the dataset's budget (admin only).

        `epsilon` is RDP at the dataset's order (rounded down to the ledger grid); 0 blocks
        the token's releases. The token's releases on the dataset must then fit both the
        allocation and the dataset's budget (`AllocationExhausted` otherwise). Allocations may
        add up to more than the dataset's budget, which still binds. What the token spent
        before counts against it; setting it below that blocks the token and loses nothing.
        Setting it again replaces it. `NotFound` when the token may not use the dataset.
        """
        return self._run(self._set_allocation(dataset_id, token_id, epsilon))

    def remove_allocation(self, dataset_id: str, token_id: str) -> None:
        """Remove an analyst token's allocation (admin only): it draws on the dataset as before.

        `NotFound` when the token has no allocation on the dataset.
        """
        self._run(self._remove_allocation(dataset_id, token_id))

    def allocations(self, dataset_id: str) -> Allocations:
        """The dataset's allocations with spent and remaining, and the audit trail of changes.

        The admin sees every allocation; an analyst token only its own.
        """
        return self._run(self._allocations(dataset_id))

    def plan(self, dataset_id: str, items: Sequence[Union[PlanItem, Mapping[str, Any]]]) -> Plan:
        """Plan releases for accuracy before spending: no counts are sent, nothing is charged.

        Each item describes one intended release by its shape and a public total (a
        `PlanItem`, or a dict of the same members, sent as it is), with a mechanism or
        ``"auto"`` and either ``epsilon`` or an accuracy `Target`. The answer says, per item,
        which mechanism to run, the cheapest ε on the ledger grid that meets the target (or
        why none does, and what would), its cost, calibrated parameters and worst-case
        forecast; and for the list, the total cost and whether it `fits` what the caller may
        still spend (the dataset's remaining budget, or less under the calling analyst's
        allocation). Release a planned item with
        ``release(dataset_id, counts, **plan.items[i].release_kwargs())``: it is charged
        exactly the planned `cost`.

        The totals must be public (a published sample size, a lower bound known in advance),
        never computed from the counts: choosing ε by looking at private counts would itself
        leak. The client deliberately offers no way to plan from counts.

        Raises:
            InvalidRequest: an item cannot be planned as sent; `field` names it
                (``items[2].target.confidence``).
            NotFound: no such dataset, or one the token may not see.

        """
        sent = self._plan_items(items)
        return self._run(self._plan(dataset_id, sent, self.mechanisms()))

    def mechanisms(self) -> Mechanisms:
        """Every mechanism the service runs, with its fields and what it supports.

        `Mechanisms`: iterate over it, or look one up by name (``client.mechanisms()["laplace"]``);
        each `MechanismInfo` has the mechanism's `fields` (name, type, whether required, default,
        meaning), how it reads `epsilon`, whether it takes an `order`, releases tables, takes a
        `lower_bound`, which plan `targets` it meets, whether ``"auto"`` considers it and what a
        preview forecasts. Read from the service (``GET /v1/mechanisms``, no token needed) the
        first time it is needed and kept for the client's life; `plan` reads it to know which
        fields each mechanism takes.
        """
        if self._mechanisms is None:
            return self._run(self._list_mechanisms())
        return self._mechanisms

    # ------------------------------------------------------------------ populations

    def create_population(
        self,
        name: str,
        budget: Union[BudgetSpec, Mapping[str, float]],
        parent: Optional[str] = None,
        children: str = "shared",
    ) -> Population:
        """Create a population: a budget shared by the datasets and populations under it (admin).

        Args:
            name: its name (the same rules as a dataset's: trimmed, NFC, 1 to 200 characters).
            budget: ``{"epsilon": ε, "order": λ₀}`` (RDP at λ₀), ``{"epsilon": ε, "delta": δ}``
                (an (ε, δ) target, converted at ``"order"`` when given), or a `BudgetSpec`.
            parent: the enclosing population's id; None makes a root. The order must be the
                parent's.
            children: ``"shared"`` (its children may hold the same people: their charges add
                up here) or ``"disjoint"`` (each person is in at most one child: only the
                largest child's charge counts here, by parallel composition).

        Raises:
            InvalidRequest: a bad name or budget, an unknown parent, or an order that is not
                the parent's.

        """
        return self._run(self._create_population(name, budget, parent, children))

    def list_populations(self) -> List[Population]:
        """Every population (admin)."""
        return self._run(self._list_populations())

    def get_population(self, population_id: str) -> Population:
        """One population (`NotFound` if there is none with that id)."""
        return self._run(self._get_population(population_id))

    def population_budget(self, population_id: str) -> PopulationBudget:
        """A population's ledger now, and its path (itself, then its ancestors to the root)."""
        return self._run(self._population_budget(population_id))

    def set_dataset_population(self, dataset_id: str, population_id: Optional[str]) -> Dataset:
        """Put a dataset in a population, move it to another, or take it out (None) (admin).

        Attaching charges what the dataset has spent so far to every population on the new
        path, so it is admitted only if that fits each (`PopulationBudgetExhausted`
        otherwise). Moving or detaching never gives budget back to the old path. The
        population's order must be the dataset's (`InvalidRequest`). A lost answer is not
        resent (`APIConnectionError`): read the dataset to see whether it was attached.
        """
        return self._run(self._set_dataset_population(dataset_id, population_id))

    def move_population(self, population_id: str, parent: Optional[str]) -> Population:
        """Move a population under another (`parent`), or make it a root (None) (admin).

        Admitted only if what was spent under it fits every new ancestor (then charged to
        them; `PopulationBudgetExhausted` otherwise); the old ancestors keep what they were
        charged. A parent that is the population itself or under it is `InvalidRequest`, as
        is a parent of another order. A lost answer is not resent.
        """
        return self._run(self._move_population(population_id, parent))

    # ------------------------------------------------------------------ external charges

    def record_charge(
        self,
        dataset_id: str,
        mechanism: str,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Charge:
        """Record privacy spent outside the service on the dataset's ledger (an external charge).

        The service prices the description at the ledger order and charges it like a release
        (to the dataset, the calling analyst's allocation and every population on the dataset's
        path), with no output. `mechanism` and its `params`:

        - ``"gaussian"``: ``sigma``, ``sensitivity`` (ℓ2); costs λΔ²/(2σ²).
        - ``"laplace"``: ``scale``, ``sensitivity`` (ℓ1); the exact Rényi DP of Laplace noise.
        - ``"pure"``: ``epsilon`` (pure ε-DP).
        - ``"zcdp"``: ``rho`` (ρ-zCDP); costs λρ.
        - ``"rdp"``: ``epsilon``, RDP at the ledger order, as given.
        - ``"composed"``: ``events``, a list of the above (as dicts with ``"mechanism"``).

        Each but ``"composed"`` takes ``count`` (applied that many times; default 1).

        Args:
            dataset_id: the dataset to charge.
            mechanism: the mechanism's name, as above.
            label: free text stored with the charge.
            idempotency_key: the retry handle; a fresh UUID when None. A retry sends the same
                key and body, and the service charges at most once (``replayed`` is then True).
            **params: the mechanism's parameters, as above.

        Raises:
            BudgetExhausted: it would overspend the dataset (or, as `AllocationExhausted`, the
                caller's allocation; as `PopulationBudgetExhausted`, a population on the path);
                nothing charged.
            InvalidRequest: an unknown mechanism, or a parameter that is missing, negative or
                not finite.

        """
        body = self._charge_body(mechanism, params)
        return self._run(self._record_charge(dataset_id, body, label, idempotency_key))

    def record_dp_event(
        self,
        dataset_id: str,
        event: Any,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Charge:
        """Record a Google `dp_accounting` `DpEvent` as an external charge (see `record_charge`).

        ``GaussianDpEvent``, ``LaplaceDpEvent``, ``ZCDpEvent`` (ξ = 0) and their
        ``SelfComposedDpEvent`` and ``ComposedDpEvent`` compositions, nested, are read (by
        class name and attributes: `dp_accounting` need not be installed for the client).
        The noise multipliers are noise over sensitivity, sent with sensitivity 1.

        Raises:
            ValueError: an event of another type (it is named), or one costing nothing;
                nothing is sent.

        """
        body = self._dp_event_body(event)
        return self._run(self._record_charge(dataset_id, body, label, idempotency_key))

    def whoami(self) -> WhoAmI:
        """The presented token's role (and an analyst token's id and datasets)."""
        return self._run(self._whoami())


class AsyncClient(BaseClient):
    """The asyncio client: the methods of `Client`, as coroutines.

    >>> async with AsyncClient("http://127.0.0.1:8080", token) as client:  # doctest: +SKIP
    ...     release = await client.release(dataset_id, counts, epsilon=0.4)

    The arguments are those of `Client`; `http_client` is an `httpx.AsyncClient`.
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient(timeout=timeout)

    @classmethod
    def from_env(cls: Type[_ASelf], **options: Any) -> _ASelf:
        """A client for ``$DIRICHLET_URL`` with the token ``$DIRICHLET_TOKEN``."""
        url, token = cls._env()
        return cls(url, token, **options)

    async def close(self) -> None:
        """Close the connections (only those of an `httpx.AsyncClient` this client made)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self: _ASelf) -> _ASelf:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    self.base_url + call.path,
                    content=call.body,
                    params=call.params,
                    headers=self._request_headers(call),
                    timeout=self.timeout,
                )
            except httpx.TransportError as error:
                delay = self._delay_after_error(call, error, attempt)
                if delay is None:
                    raise self._connection_error(call, error) from error
            else:
                if response.is_success:
                    return call.parse(response)
                delay = self._delay_after_status(call, response, attempt)
                if delay is None:
                    raise problem_error(response, call.idempotency_key)
            await asyncio.sleep(delay)
            attempt += 1

    async def create_dataset(
        self,
        name: str,
        *,
        epsilon: float,
        order: Optional[float] = None,
        delta: Optional[float] = None,
        neighbouring: Optional[str] = None,
        sensitivity: Union[Sensitivity, Mapping[str, float], None] = None,
        cells: Optional[Iterable[str]] = None,
        population: Optional[str] = None,
        period: Optional[str] = None,
    ) -> Dataset:
        """Register a dataset and its privacy budget (admin only); see `Client.create_dataset`."""
        return await self._run(
            self._create_dataset(
                name,
                epsilon=epsilon,
                order=order,
                delta=delta,
                neighbouring=neighbouring,
                sensitivity=sensitivity,
                cells=cells,
                population=population,
                period=period,
            )
        )

    async def get_dataset(self, dataset_id: str) -> Dataset:
        """One dataset (`NotFound` if it does not exist or the token may not see it)."""
        return await self._run(self._get_dataset(dataset_id))

    async def list_datasets(self) -> List[Dataset]:
        """Every dataset the token may see, oldest first."""
        return await self._run(self._list_datasets())

    async def budget(self, dataset_id: str) -> Budget:
        """The dataset's ledger now: `order`, `total`, `spent`, `remaining`, `releases`, `dp`."""
        return await self._run(self._budget(dataset_id))

    async def blocks(self, dataset_id: str, start: str, end: str) -> List[Block]:
        """Every block from `start` to `end` (keys, inclusive) of a dataset split into blocks.

        In order, each with its cap, spend and what is left (a block never charged has spent 0).
        """
        return await self._run(self._blocks(dataset_id, start, end))

    async def preview(
        self,
        dataset_id: str,
        counts: Any,
        *,
        epsilon: Optional[float] = None,
        mechanism: str = "dirichlet",
        label: Optional[str] = None,
        row_names: Union[bool, Iterable[str], None] = None,
        **params: Any,
    ) -> Preview:
        """Price a release and forecast it, nothing spent; see `Client.preview`."""
        await self._load_cells(dataset_id, counts)
        return await self._run(
            self._preview(dataset_id, counts, epsilon, mechanism, label, row_names, params)
        )

    async def release(
        self,
        dataset_id: str,
        counts: Any,
        *,
        epsilon: Optional[float] = None,
        mechanism: str = "dirichlet",
        label: Optional[str] = None,
        row_names: Union[bool, Iterable[str], None] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Release:
        """Calibrate, charge and draw one private release; see `Client.release`."""
        await self._load_cells(dataset_id, counts)
        return await self._run(
            self._release(
                dataset_id, counts, epsilon, mechanism, label, row_names, idempotency_key, params
            )
        )

    async def _load_cells(self, dataset_id: str, counts: Any) -> None:
        # A pandas input is aligned to the dataset's cells: read them once per dataset.
        if self._needs_cells(dataset_id, counts):
            await self.get_dataset(dataset_id)

    async def releases(
        self, dataset_id: str, *, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[Release]:
        """Every stored release of the dataset, newest first (``async for``)."""
        before: Optional[int] = None
        while True:
            items, before = await self._run(self._release_page(dataset_id, before, page_size))
            for item in items:
                yield item
            if before is None:
                return

    async def get_release(self, dataset_id: str, release_id: str) -> Release:
        """One stored release (its `budget` is None)."""
        return await self._run(self._get_release(dataset_id, release_id))

    async def create_token(
        self, datasets: Sequence[str], *, expires_at: Optional[Any] = None
    ) -> Token:
        """An analyst token confined to `datasets` (admin only); see `Client.create_token`."""
        return await self._run(self._create_token(datasets, expires_at))

    async def list_tokens(self) -> List[TokenInfo]:
        """Every analyst token, never their secrets (admin only)."""
        return await self._run(self._list_tokens())

    async def revoke_token(self, token_id: str) -> None:
        """Revoke an analyst token by its public id (admin only)."""
        await self._run(self._revoke_token(token_id))

    async def set_allocation(self, dataset_id: str, token_id: str, epsilon: float) -> Allocation:
        """Give an analyst token an allocation (admin only); see `Client.set_allocation`."""
        return await self._run(self._set_allocation(dataset_id, token_id, epsilon))

    async def remove_allocation(self, dataset_id: str, token_id: str) -> None:
        """Remove an analyst token's allocation (admin only); `NotFound` when it has none."""
        await self._run(self._remove_allocation(dataset_id, token_id))

    async def allocations(self, dataset_id: str) -> Allocations:
        """The dataset's allocations and their audit trail; see `Client.allocations`."""
        return await self._run(self._allocations(dataset_id))

    async def plan(
        self, dataset_id: str, items: Sequence[Union[PlanItem, Mapping[str, Any]]]
    ) -> Plan:
        """Plan releases for accuracy, nothing sent of the data or charged; see `Client.plan`."""
        sent = self._plan_items(items)
        return await self._run(self._plan(dataset_id, sent, await self.mechanisms()))

    async def mechanisms(self) -> Mechanisms:
        """Every mechanism the service runs, read once and kept; see `Client.mechanisms`."""
        if self._mechanisms is None:
            return await self._run(self._list_mechanisms())
        return self._mechanisms

    async def create_population(
        self,
        name: str,
        budget: Union[BudgetSpec, Mapping[str, float]],
        parent: Optional[str] = None,
        children: str = "shared",
    ) -> Population:
        """Create a population (admin only); see `Client.create_population`."""
        return await self._run(self._create_population(name, budget, parent, children))

    async def list_populations(self) -> List[Population]:
        """Every population (admin)."""
        return await self._run(self._list_populations())

    async def get_population(self, population_id: str) -> Population:
        """One population (`NotFound` if there is none with that id)."""
        return await self._run(self._get_population(population_id))

    async def population_budget(self, population_id: str) -> PopulationBudget:
        """A population's ledger now and its path; see `Client.population_budget`."""
        return await self._run(self._population_budget(population_id))

    async def set_dataset_population(
        self, dataset_id: str, population_id: Optional[str]
    ) -> Dataset:
        """Attach, move or detach a dataset (admin); see `Client.set_dataset_population`."""
        return await self._run(self._set_dataset_population(dataset_id, population_id))

    async def move_population(self, population_id: str, parent: Optional[str]) -> Population:
        """Move a population (admin only); see `Client.move_population`."""
        return await self._run(self._move_population(population_id, parent))

    async def record_charge(
        self,
        dataset_id: str,
        mechanism: str,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Charge:
        """Record an external charge on the dataset's ledger; see `Client.record_charge`."""
        body = self._charge_body(mechanism, params)
        return await self._run(self._record_charge(dataset_id, body, label, idempotency_key))

    async def record_dp_event(
        self,
        dataset_id: str,
        event: Any,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Charge:
        """Record a `dp_accounting` event as an external charge; see `Client.record_dp_event`."""
        body = self._dp_event_body(event)
        return await self._run(self._record_charge(dataset_id, body, label, idempotency_key))

    async def whoami(self) -> WhoAmI:
        """The presented token's role (and an analyst token's id and datasets)."""
        return await self._run(self._whoami())
