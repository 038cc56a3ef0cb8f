"""Populations and external charges through the client, on SQLite and on PostgreSQL.

The ledger amounts are recorded as ``rdp`` charges; the service charges them rounded up on its
2⁻⁴⁰ grid (a quantum above a dyadic amount), so ledger figures are compared to within 1e-9.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import uuid
from typing import Any, Mapping

import pytest

import dirichlet_release as dr
from dirichlet_release import AsyncClient, Client

from .conftest import Server

COUNTS = [30, 12, 5, 0]
BUDGET = {"epsilon": 1.0, "order": 2}


def near(x: float) -> Any:
    """`x` as the ledger holds it: charges are rounded up on the 2⁻⁴⁰ grid."""
    return pytest.approx(x, abs=1e-9)


def covers(model: Any, doc: Mapping[str, Any], where: str) -> None:
    """Every member of the service's JSON is a field of the typed model."""
    names = {f.name for f in dataclasses.fields(model)}
    missing = sorted(set(doc) - names)
    assert not missing, f"{where}: not modelled: {missing}"


def charge(client: Client, dataset_id: str, epsilon: float) -> dr.Charge:
    return client.record_charge(dataset_id, "rdp", epsilon=epsilon)


def laplace_rdp(order: float, b: float) -> float:
    """The RDP of Laplace noise of scale b over sensitivity 1 (Mironov 2017, Prop. 6)."""
    lam = order
    return math.log(
        lam / (2 * lam - 1) * math.exp((lam - 1) / b)
        + (lam - 1) / (2 * lam - 1) * math.exp(-lam / b)
    ) / (lam - 1)


def test_create_list_get_and_the_budget_path(client: Client) -> None:
    root = client.create_population("hospital patients", BUDGET)
    assert isinstance(root, dr.Population)
    assert (root.name, root.parent, root.children, root.spent) == (
        "hospital patients",
        None,
        "shared",
        0.0,
    )
    assert root.budget == dr.BudgetSpec(epsilon=1.0, order=2.0)
    assert root.created_at.tzinfo is not None
    covers(root, root.raw, "population")
    regions = client.create_population(
        "patients by region", dr.BudgetSpec(epsilon=1.0, order=2.0), root.id, "disjoint"
    )
    assert (regions.parent, regions.children) == (root.id, "disjoint")
    assert client.get_population(regions.id) == regions
    listed = {p.id: p for p in client.list_populations()}
    assert listed[root.id] == root and listed[regions.id] == regions

    north = client.create_dataset("north", epsilon=1.0, order=2, population=regions.id)
    assert north.population == regions.id
    assert client.get_dataset(north.id).population == regions.id
    alone = client.create_dataset("in no population", epsilon=1.0, order=2)
    assert alone.population is None

    budget = client.budget(north.id)
    assert budget.path is not None
    assert [(n.kind, n.id, n.name) for n in budget.path] == [
        ("dataset", north.id, "north"),
        ("population", regions.id, "patients by region"),
        ("population", root.id, "hospital patients"),
    ]
    for node in budget.path:
        covers(node, budget.raw["path"][0], "path node")
        assert isinstance(node, dr.PathNode)
        assert (node.total, node.spent, node.remaining) == (1.0, 0.0, 1.0)
    assert budget.binding in {n.id for n in budget.path if n.binding}
    alone_path = client.budget(alone.id).path
    assert alone_path is not None and [n.id for n in alone_path] == [alone.id]

    ledger = client.population_budget(regions.id)
    assert isinstance(ledger, dr.PopulationBudget)
    assert (ledger.order, ledger.total, ledger.spent, ledger.remaining) == (2.0, 1.0, 0.0, 1.0)
    assert [n.id for n in ledger.path] == [regions.id, root.id]
    covers(ledger, ledger.raw, "population budget")

    with pytest.raises(dr.NotFound):
        client.get_population(str(uuid.uuid4()))
    with pytest.raises(dr.NotFound):
        client.population_budget(str(uuid.uuid4()))


def test_shared_sums_and_disjoint_takes_the_largest_child(client: Client) -> None:
    root = client.create_population("all", BUDGET)
    regions = client.create_population("regions", BUDGET, root.id, "disjoint")
    north = client.create_dataset("north", epsilon=1.0, order=2, population=regions.id).id
    south = client.create_dataset("south", epsilon=1.0, order=2, population=regions.id).id
    clinic = client.create_dataset("clinic", epsilon=1.0, order=2, population=root.id).id

    charge(client, north, 0.25)
    assert client.population_budget(regions.id).spent == near(0.25)
    assert client.population_budget(root.id).spent == near(0.25)
    # Disjoint children: south's 0.25 is the same people-budget as north's, nothing added.
    charge(client, south, 0.25)
    assert client.population_budget(regions.id).spent == near(0.25)
    assert client.population_budget(root.id).spent == near(0.25)
    charge(client, south, 0.5)
    assert client.population_budget(regions.id).spent == near(0.75)
    assert client.population_budget(root.id).spent == near(0.75)
    # Shared children: the clinic's spend adds to the regions'.
    charge(client, clinic, 0.125)
    ledger = client.population_budget(root.id)
    assert (ledger.spent, ledger.remaining) == (near(0.875), near(0.125))

    # A real release is charged up the path too.
    release = client.release(clinic, COUNTS, epsilon=0.0625)
    assert client.population_budget(root.id).spent == near(0.875 + release.cost.epsilon)
    path = client.budget(clinic).path
    assert path is not None and path[-1].id == root.id
    binding = [n for n in path if n.binding]
    assert [n.id for n in binding] == [root.id]
    assert client.budget(clinic).binding == root.id


def test_a_population_refuses_what_its_datasets_could_still_pay(client: Client) -> None:
    root = client.create_population("small root", {"epsilon": 0.5, "order": 2})
    dataset = client.create_dataset("roomy", epsilon=1.0, order=2, population=root.id).id
    charge(client, dataset, 0.375)
    before = client.budget(dataset)
    with pytest.raises(dr.PopulationBudgetExhausted) as caught:
        charge(client, dataset, 0.25)
    error = caught.value
    assert isinstance(error, dr.BudgetExhausted) and isinstance(error, dr.Conflict)
    assert (error.status, error.slug) == (409, "population-budget-exhausted")
    assert error.population == root.id
    ledger = error.population_budget
    assert ledger is not None and (ledger.order, ledger.total) == (2.0, 0.5)
    assert (ledger.spent, ledger.remaining) == (near(0.375), near(0.125)) and ledger.path == []
    assert error.remaining == ledger.remaining and error.budget is None
    # A release is refused the same way, and nothing was charged by either.
    with pytest.raises(dr.BudgetExhausted) as release:
        client.release(dataset, COUNTS, epsilon=0.25)
    assert isinstance(release.value, dr.PopulationBudgetExhausted)
    after = client.budget(dataset)
    assert (after.spent, after.releases) == (before.spent, before.releases)
    assert client.population_budget(root.id).spent == near(0.375)


def test_attach_move_and_detach_a_dataset(client: Client) -> None:
    big = client.create_population("big", BUDGET)
    tiny = client.create_population("tiny", {"epsilon": 0.125, "order": 2})
    dataset = client.create_dataset("moving", epsilon=1.0, order=2).id
    charge(client, dataset, 0.25)

    with pytest.raises(dr.PopulationBudgetExhausted) as refused:
        client.set_dataset_population(dataset, tiny.id)
    assert refused.value.population == tiny.id
    assert client.get_dataset(dataset).population is None
    assert client.population_budget(tiny.id).spent == near(0.0)

    attached = client.set_dataset_population(dataset, big.id)
    assert isinstance(attached, dr.Dataset) and attached.population == big.id
    # What the dataset spent before is charged to its new path.
    assert client.population_budget(big.id).spent == near(0.25)

    detached = client.set_dataset_population(dataset, None)
    assert detached.population is None
    # Never given back.
    assert client.population_budget(big.id).spent == near(0.25)
    path = client.budget(dataset).path
    assert path is not None and [n.id for n in path] == [dataset]

    other_order = client.create_dataset("order 4", epsilon=1.0, order=4).id
    with pytest.raises(dr.InvalidRequest):
        client.set_dataset_population(other_order, big.id)
    with pytest.raises(dr.InvalidRequest):
        client.create_dataset("order 4 too", epsilon=1.0, order=4, population=big.id)
    with pytest.raises(dr.InvalidRequest):
        client.create_dataset("unknown", epsilon=1.0, order=2, population=str(uuid.uuid4()))


def test_move_a_population(client: Client) -> None:
    root = client.create_population("root", BUDGET)
    branch = client.create_population("branch", BUDGET, root.id)
    leaf = client.create_population("leaf", BUDGET, branch.id)
    dataset = client.create_dataset("under leaf", epsilon=1.0, order=2, population=leaf.id).id
    charge(client, dataset, 0.5)

    # A cycle: the root under its own descendant.
    with pytest.raises(dr.InvalidRequest):
        client.move_population(root.id, leaf.id)
    with pytest.raises(dr.InvalidRequest):
        client.move_population(root.id, root.id)
    with pytest.raises(dr.InvalidRequest):
        client.create_population("order 4", {"epsilon": 1.0, "order": 4}, root.id)
    with pytest.raises(dr.InvalidRequest):
        client.create_population("orphan", BUDGET, str(uuid.uuid4()))
    with pytest.raises(ValueError, match="shared"):
        client.create_population("bad children", BUDGET, None, "overlapping")

    narrow = client.create_population("narrow", {"epsilon": 0.25, "order": 2})
    with pytest.raises(dr.PopulationBudgetExhausted) as refused:
        client.move_population(leaf.id, narrow.id)
    assert refused.value.population == narrow.id
    assert client.get_population(leaf.id).parent == branch.id

    wide = client.create_population("wide", BUDGET)
    moved = client.move_population(leaf.id, wide.id)
    assert moved.parent == wide.id
    assert client.population_budget(wide.id).spent == near(0.5)
    assert client.population_budget(root.id).spent == near(0.5)  # kept by the old ancestors
    path = client.budget(dataset).path
    assert path is not None and [n.id for n in path] == [dataset, leaf.id, wide.id]
    assert client.move_population(leaf.id, None).parent is None


def test_record_charge_replays_and_is_listed(client: Client, dataset_id: str) -> None:
    key = f"dp-sgd-run-{uuid.uuid4()}"
    first = client.record_charge(
        dataset_id, "gaussian", sigma=2.0, sensitivity=1.0, label="dp-sgd run", idempotency_key=key
    )
    assert isinstance(first, dr.Charge)
    assert first.kind == "external" and first.idempotency_key == key and not first.replayed
    assert first.dataset_id == dataset_id and first.label == "dp-sgd run"
    assert first.mechanism["mechanism"] == "gaussian" and first.mechanism["sigma"] == 2.0
    # λΔ²/(2σ²) at λ₀ = 2: 2/8, rounded up to the ledger grid (never below).
    assert first.cost.order == 2.0 and 0.25 <= first.cost.epsilon < 0.25 + 1e-9
    again = client.record_charge(
        dataset_id, "gaussian", sigma=2.0, sensitivity=1.0, label="dp-sgd run", idempotency_key=key
    )
    assert again.replayed and again.id == first.id
    assert client.budget(dataset_id).spent == first.cost.epsilon
    with pytest.raises(dr.IdempotencyKeyReused):
        client.record_charge(
            dataset_id, "gaussian", sigma=4.0, sensitivity=1.0, idempotency_key=key
        )

    auto = client.record_charge(dataset_id, "zcdp", rho=0.0625, count=2)
    assert auto.idempotency_key is not None
    uuid.UUID(auto.idempotency_key)
    assert 0.25 <= auto.cost.epsilon < 0.25 + 1e-9  # λρ, twice

    release = client.release(dataset_id, COUNTS, epsilon=0.125)
    listed = list(client.releases(dataset_id))
    assert [r.kind for r in listed] == ["release", "external", "external"]
    external = listed[2]
    assert external.id == first.id and external.distribution is None
    assert external.distributions is None
    assert external.mechanism.kind == "gaussian" and external.mechanism["sigma"] == 2.0
    assert external.cost == first.cost and external.label == "dp-sgd run"
    assert listed[0].id == release.id and listed[0].distribution is not None

    with pytest.raises(dr.InvalidRequest):
        client.record_charge(dataset_id, "exponential", epsilon=1.0)
    with pytest.raises(dr.InvalidRequest):
        client.record_charge(dataset_id, "gaussian", sigma=-1.0, sensitivity=1.0)
    with pytest.raises(dr.BudgetExhausted) as exhausted:
        client.record_charge(dataset_id, "pure", epsilon=8.0)
    assert type(exhausted.value) is dr.BudgetExhausted


def test_record_dp_event_with_dp_accounting(client: Client, dataset_id: str) -> None:
    dp_accounting = pytest.importorskip("dp_accounting")
    event = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.GaussianDpEvent(noise_multiplier=4.0),
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.LaplaceDpEvent(noise_multiplier=4.0), 3
            ),
            dp_accounting.NoOpDpEvent(),
        ]
    )
    recorded = client.record_dp_event(dataset_id, event, label="dp_accounting")
    assert recorded.mechanism["mechanism"] == "composed"
    expected = 2.0 / (2 * 16.0) + 3 * laplace_rdp(2.0, 4.0)
    # Priced on the ledger grid, rounded up: never below the true RDP.
    assert expected <= recorded.cost.epsilon <= expected + 1e-9
    assert client.budget(dataset_id).spent == recorded.cost.epsilon

    spent = client.budget(dataset_id).spent
    sampled = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    with pytest.raises(ValueError, match="PoissonSampledDpEvent"):
        client.record_dp_event(dataset_id, sampled)
    with pytest.raises(ValueError, match="costs nothing"):
        client.record_dp_event(dataset_id, dp_accounting.NoOpDpEvent())
    assert client.budget(dataset_id).spent == spent


def test_a_charge_under_a_population_is_refused_there(client: Client) -> None:
    root = client.create_population("charged", {"epsilon": 0.25, "order": 2})
    dataset = client.create_dataset("charged", epsilon=2.0, order=2, population=root.id).id
    with pytest.raises(dr.PopulationBudgetExhausted) as caught:
        client.record_charge(dataset, "gaussian", sigma=1.0, sensitivity=1.0)  # costs 1
    assert caught.value.population == root.id and caught.value.remaining == near(0.25)
    assert client.budget(dataset).spent == near(0.0)


def test_analysts_may_charge_but_not_place(client: Client, server: Server) -> None:
    root = client.create_population("analysts", BUDGET)
    dataset = client.create_dataset("analysts", epsilon=1.0, order=2, population=root.id).id
    token = client.create_token([dataset])
    with Client(server.base, token.token) as analyst:
        recorded = analyst.record_charge(dataset, "pure", epsilon=0.125)
        assert recorded.created_by == token.id
        with pytest.raises(dr.Forbidden):
            analyst.create_population("not allowed", BUDGET)
        with pytest.raises(dr.Forbidden):
            analyst.set_dataset_population(dataset, None)
    assert client.population_budget(root.id).spent == recorded.cost.epsilon


def test_the_async_client(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.base, server.admin) as client:
            root = await client.create_population("async root", BUDGET)
            child = await client.create_population("async child", BUDGET, root.id, "disjoint")
            assert (await client.get_population(child.id)) == child
            assert child.id in [p.id for p in await client.list_populations()]
            dataset = await client.create_dataset("async", epsilon=1.0, order=2)
            placed = await client.set_dataset_population(dataset.id, child.id)
            assert placed.population == child.id
            charged = await client.record_charge(dataset.id, "rdp", epsilon=0.5)
            assert charged.cost.epsilon == near(0.5)
            ledger = await client.population_budget(root.id)
            assert ledger.spent == near(0.5) and [n.id for n in ledger.path] == [root.id]
            moved = await client.move_population(child.id, None)
            assert moved.parent is None

            @dataclasses.dataclass(frozen=True)
            class GaussianDpEvent:
                noise_multiplier: float

            event = await client.record_dp_event(dataset.id, GaussianDpEvent(2.0))
            assert 0.25 <= event.cost.epsilon < 0.25 + 1e-9

    asyncio.run(scenario())
