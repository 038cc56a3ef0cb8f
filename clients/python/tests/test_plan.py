"""Planning through the client, on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Sequence

import numpy as np
import pytest

import dirichlet_release as dr
from dirichlet_release import Client, PlanItem, Target

from .conftest import FaultProxy, Server, mirrors, record

# The README's step 9: a 40-cell histogram of about 5,000 records to ±0.02 (95 %), any
# mechanism, and a 3-row table at a given ε.
HISTOGRAM = PlanItem(d=40, n_lower_bound=5000, target=Target(l2=0.02))
TABLE = PlanItem(d=6, rows=3, n_lower_bound=50, mechanism="dirichlet", epsilon=0.1)
# Ten records cannot give ±0.001 whatever is spent.
OUT_OF_REACH = PlanItem(d=40, n=10, mechanism="dirichlet", target=Target(l2=0.001))


def test_a_plan_parses_every_field(client: Client, dataset_id: str) -> None:
    plan = client.plan(dataset_id, [HISTOGRAM, TABLE, OUT_OF_REACH])
    assert isinstance(plan, dr.Plan)
    mirrors(plan, plan.raw)
    assert (plan.order, plan.remaining, plan.unreachable, plan.fits) == (2.0, 1.0, 1, False)
    histogram, table, short = plan.items
    assert all(isinstance(item, dr.PlannedItem) for item in plan.items)

    # "auto": the cheapest mechanism meeting the target, every mechanism listed with its status.
    assert histogram.planned and histogram.status == "planned"
    assert histogram.mechanism in ("dirichlet", "posterior", "gaussian", "laplace")
    assert histogram.epsilon is not None and histogram.cost is not None
    assert isinstance(histogram.forecast, dr.AccuracyForecast)
    assert histogram.forecast.l2 <= 0.02 and histogram.forecast.confidence == 0.95
    assert isinstance(histogram.parameters, dr.PlanParameters)
    candidates = {c.mechanism: c for c in histogram.candidates}
    assert all(isinstance(c, dr.PlanCandidate) for c in histogram.candidates)
    assert {"dirichlet", "posterior", "gaussian", "laplace", "exponential"} <= candidates.keys()
    chosen = [c for c in histogram.candidates if c.status == "chosen"]
    assert [c.mechanism for c in chosen] == [histogram.mechanism]
    assert chosen[0].forecast == histogram.forecast
    # No other candidate that reaches the target is estimated cheaper than the chosen cost.
    for c in histogram.candidates:
        if c.status == "planned" and c.estimated_cost is not None:
            assert c.estimated_cost >= histogram.cost * (1 - 1e-6), c
    # The exponential mechanism releases two cells only.
    assert candidates["exponential"].status == "not_applicable"
    assert candidates["exponential"].reason

    # A given ε: the Dirichlet mechanism calibrated to it, its r and α.
    assert (table.mechanism, table.status) == ("dirichlet", "planned")
    assert table.epsilon == table.cost == pytest.approx(0.1, rel=1e-9)
    # Named by the Dirichlet draw: its r and its prior α (one number: every cell alike).
    assert table.parameters is not None and set(table.parameters) == {"r", "alpha"}
    assert isinstance(table.parameters["r"], float) and isinstance(table.parameters["alpha"], float)
    assert table.parameters == table.raw["parameters"]

    assert short.status == "unreachable" and not short.planned
    assert histogram.cost is not None and table.cost is not None
    assert plan.total_cost == histogram.cost + table.cost
    # The items as sent ride along, for release_kwargs.
    assert table.sent == TABLE.to_json()


def test_dicts_plan_as_the_typed_items_do(client: Client, dataset_id: str) -> None:
    typed = client.plan(dataset_id, [HISTOGRAM, TABLE])
    as_dicts = client.plan(
        dataset_id,
        [
            {"d": 40, "n_lower_bound": 5000, "target": {"l2": 0.02}},
            {
                "d": np.int64(6),
                "rows": 3,
                "n_lower_bound": 50.0,
                "mechanism": "dirichlet",
                "epsilon": 0.1,
            },
        ],
    )
    assert as_dicts == typed
    assert as_dicts.raw == typed.raw


def test_an_unreachable_item_carries_its_shortfall(client: Client, dataset_id: str) -> None:
    plan = client.plan(dataset_id, [OUT_OF_REACH])
    (item,) = plan.items
    assert item.status == "unreachable"
    assert (item.epsilon, item.cost, item.forecast, item.parameters) == (None, None, None, None)
    assert item.mechanism == "dirichlet"
    shortfall = item.shortfall
    assert isinstance(shortfall, dr.Shortfall)
    assert isinstance(shortfall.best, dr.AccuracyForecast)
    assert shortfall.best.l2 > 0.001 and shortfall.max_epsilon == 8192.0
    # What would reach it: a larger public total.
    assert shortfall.min_n is not None and shortfall.min_n > 10
    assert item.candidates[0].status == "unreachable"
    assert item.candidates[0].shortfall == shortfall
    assert (plan.unreachable, plan.fits, plan.total_cost) == (1, False, 0.0)
    with pytest.raises(ValueError, match="unreachable"):
        item.release_kwargs()
    # At the total it names, the target is met.
    assert shortfall.min_n is not None
    enough = dataclasses.replace(OUT_OF_REACH, n=shortfall.min_n, mechanism="dirichlet")
    assert client.plan(dataset_id, [enough]).items[0].planned


@pytest.mark.parametrize(
    ("items", "field"),
    [
        ([], "items"),
        ([PlanItem(d=1, n=10, epsilon=1.0)], "items[0].d"),
        ([PlanItem(d=4, epsilon=1.0)], "items[0].n"),
        ([PlanItem(d=4, n=10, n_lower_bound=5, epsilon=1.0)], "items[0].n_lower_bound"),
        ([PlanItem(d=4, n=10)], "items[0].target"),
        ([PlanItem(d=4, n=10, epsilon=1.0, target=Target(l2=0.1))], "items[0].target"),
        (
            [TABLE, HISTOGRAM, PlanItem(d=4, n=10, target=Target(l2=0.1, confidence=1.5))],
            "items[2].target.confidence",
        ),
        ([TABLE, PlanItem(d=4, n=10, target=Target(cell_sd=-1.0))], "items[1].target.cell_sd"),
        ([PlanItem(d=4, rows=0, n=10, epsilon=1.0)], "items[0].rows"),
        ([PlanItem(d=4, n=10, mechanism="nope", epsilon=1.0)], "items[0].mechanism"),
        ([PlanItem(d=4, n=10, mechanism="gaussian", prior=1.0, epsilon=1.0)], "items[0].prior"),
        ([PlanItem(d=4, n=10, mechanism="diffuse", epsilon=1.0)], "items[0].alpha"),
        ([{"d": 4, "n": 10, "epsilon": 1.0, "bogus": 1}], "items[0]"),
    ],
)
def test_invalid_items_are_refused_naming_the_field(
    client: Client, dataset_id: str, items: Sequence[Any], field: str
) -> None:
    with pytest.raises(dr.InvalidRequest) as caught:
        client.plan(dataset_id, items)
    error = caught.value
    assert (error.status, error.type) == (422, "/problems/invalid-request")
    assert error.field == field, error.detail


def test_a_plan_against_named_cells_needs_their_number(client: Client) -> None:
    named = client.create_dataset("named", epsilon=1.0, order=2, cells=["a", "b", "c"])
    with pytest.raises(dr.InvalidRequest) as caught:
        client.plan(named.id, [PlanItem(d=4, n=100, epsilon=0.5)])
    assert caught.value.field == "items[0].d"
    assert client.plan(named.id, [PlanItem(d=3, n=100, epsilon=0.5)]).fits


def test_what_the_client_refuses_before_sending(client: Client, dataset_id: str) -> None:
    with pytest.raises(TypeError, match="list"):
        client.plan(dataset_id, HISTOGRAM)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="items\\[1\\]"):
        client.plan(dataset_id, [HISTOGRAM, 40])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="finite"):
        client.plan(dataset_id, [PlanItem(d=4, n=float("nan"), epsilon=1.0)])
    with pytest.raises(dr.NotFound):
        client.plan("00000000-0000-0000-0000-000000000000", [HISTOGRAM])


def test_planning_charges_nothing(client: Client, dataset_id: str) -> None:
    client.release(dataset_id, [30, 12, 5, 0], epsilon=0.25)
    before = client.budget(dataset_id)
    # Plans that fit, and one far beyond the budget.
    assert client.plan(dataset_id, [TABLE]).fits
    huge = client.plan(dataset_id, [PlanItem(d=4, n=100, mechanism="gaussian", epsilon=8.0)] * 3)
    assert not huge.fits and huge.total_cost == pytest.approx(24.0)
    after = client.budget(dataset_id)
    assert (after.spent, after.remaining, after.releases) == (
        before.spent,
        before.remaining,
        before.releases,
    )
    assert after.spent == 0.25 and [r.cost.epsilon for r in client.releases(dataset_id)] == [0.25]
    # The plan answers from what is left.
    assert client.plan(dataset_id, [TABLE]).remaining == before.remaining == 0.75


# One of each mechanism, with the mechanism's own fields where it takes them, and counts of the
# planned shape and total.
ROUND_TRIP: List[tuple[PlanItem, Any]] = [
    (HISTOGRAM, np.bincount(np.random.default_rng(7).integers(0, 40, 5_200), minlength=40)),
    (TABLE, [[20, 10, 10, 5, 3, 2], [30, 9, 6, 3, 1, 1], [10, 10, 10, 10, 5, 5]]),
    (PlanItem(d=4, n=100, prior=0.5, mechanism="dirichlet", target=Target(cell_sd=0.15)), None),
    (PlanItem(d=4, n=100, mechanism="posterior", r=2.0, epsilon=0.25), None),
    (PlanItem(d=4, n=100, mechanism="diffuse", alpha=[1, 2, 3, 4], target=Target(l2=0.3)), None),
    (PlanItem(d=4, n=100, mechanism="explicit", r=0.5, alpha=np.array([1.0, 2, 3, 4])), None),
    (PlanItem(d=4, n=100, mechanism="gaussian", target=Target(l2=0.2, confidence=0.8)), None),
    (PlanItem(d=4, n=100, mechanism="laplace", epsilon=0.5), None),
    (PlanItem(d=2, n=100, mechanism="exponential", prior=[2, 3], epsilon=0.5), [60, 40]),
]
FOUR = [50, 25, 15, 10]


def test_release_kwargs_release_exactly_what_was_planned(client: Client, server: Server) -> None:
    dataset = client.create_dataset("planned", epsilon=8.0, order=2).id
    plan = client.plan(dataset, [item for item, _ in ROUND_TRIP])
    assert plan.fits, plan
    mechanisms = []
    for (item, counts), planned in zip(ROUND_TRIP, plan.items):
        kwargs = planned.release_kwargs()
        assert kwargs["mechanism"] == planned.mechanism
        release = client.release(dataset, FOUR if counts is None else counts, **kwargs)
        # Charged exactly the planned cost, and run with the planned parameters.
        assert release.cost.epsilon == planned.cost, (item, kwargs)
        assert release.mechanism.kind == planned.mechanism
        assert planned.parameters is not None and len(planned.parameters) > 0
        for name, value in planned.parameters.items():
            assert release.mechanism[name] == value, (item.mechanism, name)
        mechanisms.append(release.mechanism.kind)
    assert sorted(set(mechanisms[2:])) == sorted(
        ["dirichlet", "posterior", "diffuse", "explicit", "gaussian", "laplace", "exponential"]
    )
    budget = client.budget(dataset)
    assert budget.spent == plan.total_cost
    assert budget.releases == len(ROUND_TRIP)
    record(
        f"[{server.backend}] plan → release_kwargs → release: {len(ROUND_TRIP)} releases "
        f"({', '.join(mechanisms)}), each charged its planned cost; spent {budget.spent:.6f} = "
        f"plan total_cost {plan.total_cost:.6f}"
    )


def test_auto_sends_only_the_chosen_mechanisms_own_fields(client: Client) -> None:
    # exponential's [α, β] prior and posterior's r under "auto": whichever mechanism wins, its
    # release gets only the fields the service lists for it (any other it would refuse).
    listing = client.mechanisms()
    dataset = client.create_dataset("auto fields", epsilon=2.0, order=2).id
    item = PlanItem(d=4, n=100, prior=[2, 3], r=2.0, target=Target(cell_sd=0.2))
    (planned,) = client.plan(dataset, [item]).items
    assert planned.mechanism is not None and planned.mechanism_info == listing[planned.mechanism]
    kwargs = planned.release_kwargs()
    assert kwargs["mechanism"] == planned.mechanism and kwargs["epsilon"] == planned.epsilon
    own = set(kwargs) - {"mechanism", "epsilon"}
    assert own <= set(listing[planned.mechanism].field_names), kwargs
    for other in ("prior", "r"):
        if not listing[planned.mechanism].takes(other):
            assert other not in kwargs
    release = client.release(dataset, FOUR, **kwargs)
    assert release.cost.epsilon == planned.cost
    assert planned.parameters is not None
    assert all(release.mechanism[k] == v for k, v in planned.parameters.items())


def test_an_analyst_plans_against_their_allocation(
    client: Client, server: Server, dataset_id: str
) -> None:
    token = client.create_token([dataset_id])
    client.set_allocation(dataset_id, token.id, 0.125)
    one = PlanItem(d=6, n=5000, mechanism="dirichlet", epsilon=0.25)
    fitting = dataclasses.replace(one, epsilon=0.125)
    with Client(server.base, token.token) as analyst:
        mine = analyst.plan(dataset_id, [one])
        assert (mine.remaining, mine.fits, mine.total_cost) == (0.125, False, 0.25)
        assert analyst.plan(dataset_id, [fitting]).fits
        # The admin plans against the dataset's whole remaining budget.
        assert client.plan(dataset_id, [one]).remaining == 1.0
        # What the analyst spends comes off the allocation the plan is checked against.
        planned = analyst.plan(dataset_id, [dataclasses.replace(one, epsilon=0.0625)]).items[0]
        analyst.release(dataset_id, [1, 2, 3, 4, 5, 6], **planned.release_kwargs())
        after = analyst.plan(dataset_id, [fitting])
        assert (after.remaining, after.fits) == (0.0625, False)
        # Another analyst's allocation is not theirs: a token without one plans on the dataset.
        other = client.create_token([dataset_id])
        with Client(server.base, other.token) as colleague:
            assert colleague.plan(dataset_id, [one]).remaining == 1.0 - 0.0625
        # A dataset the token may not see is not found.
        elsewhere = client.create_dataset("elsewhere", epsilon=1.0, order=2).id
        with pytest.raises(dr.NotFound):
            analyst.plan(elsewhere, [one])


def test_a_plan_is_resent_like_a_read(server: Server, proxy: FaultProxy) -> None:
    with Client(server.base, server.admin) as direct:
        dataset = direct.create_dataset("plan retries", epsilon=1.0, order=2).id
        expected = direct.plan(dataset, [HISTOGRAM])
    proxy.plan["plan"] = ["503", "drop"]
    with Client(proxy.base, server.admin, backoff=0.01, max_backoff=0.01) as client:
        proxy.retry_after = "0"
        assert client.plan(dataset, [HISTOGRAM]) == expected
    sent = proxy.requests("plan")
    assert [s.action for s in sent] == ["503", "drop", "forward"]
    assert sent[0].body == sent[1].body == sent[2].body
