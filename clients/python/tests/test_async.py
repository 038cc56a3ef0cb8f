"""`AsyncClient` has the methods of `Client`; every one of them against the real service."""

from __future__ import annotations

import asyncio
import inspect

import pandas as pd
import pytest

import dirichlet_release as dr
from dirichlet_release import AsyncClient, Client

from .conftest import Server

COUNTS = [120, 45, 3, 0, 17, 9]


def test_the_two_clients_have_the_same_methods() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if not name.startswith("_") and callable(member)
        }

    sync, coroutines = public(Client), public(AsyncClient)
    assert sync.keys() == coroutines.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(coroutines[name].parameters), name


def test_every_async_method(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.base, server.admin) as client:
            dataset = await client.create_dataset("async", epsilon=1.0, order=2)
            assert (await client.get_dataset(dataset.id)) == dataset
            assert dataset.id in [d.id for d in await client.list_datasets()]
            preview = await client.preview(dataset.id, COUNTS, epsilon=0.4)
            assert preview.admissible
            series = pd.Series(COUNTS, index=list("abcdef"))
            release = await client.release(dataset.id, series, epsilon=0.4, label="async")
            assert isinstance(release.distribution, pd.Series)
            assert list(release.distribution.index) == list("abcdef")
            stored = await client.get_release(dataset.id, release.id)
            assert stored.label == "async"
            assert [r.id async for r in client.releases(dataset.id)] == [release.id]
            budget = await client.budget(dataset.id)
            assert budget.releases == 1
            token = await client.create_token([dataset.id])
            assert token.id in [t.id for t in await client.list_tokens()]
            async with AsyncClient(server.base, token.token) as analyst:
                assert (await analyst.whoami()).role == "analyst"
                await client.revoke_token(token.id)
                with pytest.raises(dr.Unauthorized):
                    await analyst.whoami()
            assert (await client.whoami()).role == "admin"
            with pytest.raises(dr.BudgetExhausted) as caught:
                await client.release(dataset.id, COUNTS, epsilon=0.8)
            assert caught.value.remaining == budget.remaining

            # Allocations and named cells, as on the blocking client.
            cells = ["flu", "asthma", "measles", "scurvy", "sprain", "other"]
            shared = await client.create_dataset("async teams", epsilon=1.0, order=2, cells=cells)
            assert shared.cells == cells
            member = await client.create_token([shared.id])
            allocation = await client.set_allocation(shared.id, member.id, 0.25)
            assert allocation == dr.Allocation(member.id, 0.25, 0.0, 0.25)
            async with AsyncClient(server.base, member.token) as analyst:
                shuffled = pd.Series(COUNTS, index=cells).iloc[::-1]
                preview = await analyst.preview(shared.id, shuffled, epsilon=0.125)
                assert preview.allocation_after == dr.Allocation(member.id, 0.25, 0.125, 0.125)
                named = await analyst.release(shared.id, shuffled, epsilon=0.125)
                assert isinstance(named.distribution, pd.Series)
                assert list(named.distribution.index) == cells
                with pytest.raises(dr.AllocationExhausted) as refused:
                    await analyst.release(shared.id, COUNTS, epsilon=0.25)
                assert refused.value.remaining == 0.125
                assert (await analyst.budget(shared.id)).allocation == refused.value.allocation
                table = pd.DataFrame([COUNTS, COUNTS], index=["a", "b"], columns=cells)
                rows = await analyst.release(shared.id, table, epsilon=0.125, row_names=True)
                assert rows.row_names == ["a", "b"]
            listed = await client.allocations(shared.id)
            assert [c.new_epsilon for c in listed.changes] == [0.25]
            await client.remove_allocation(shared.id, member.id)
            with pytest.raises(dr.NotFound):
                await client.remove_allocation(shared.id, member.id)
            assert (await client.allocations(shared.id)).allocations == []

            # Planning charges nothing; a planned item releases at its planned cost.
            planning = (await client.create_dataset("async plan", epsilon=1.0, order=2)).id
            plan = await client.plan(
                planning,
                [
                    dr.PlanItem(d=6, n=194, mechanism="posterior", r=2.0, epsilon=0.125),
                    {"d": 40, "n": 10, "mechanism": "dirichlet", "target": {"l2": 0.001}},
                ],
            )
            assert (plan.remaining, plan.unreachable, plan.fits) == (1.0, 1, False)
            assert (await client.budget(planning)).spent == 0.0
            planned = plan.items[0]
            assert planned.release_kwargs() == {
                "mechanism": "posterior",
                "epsilon": planned.epsilon,
                "r": 2.0,
            }
            release = await client.release(planning, COUNTS, **planned.release_kwargs())
            assert release.cost.epsilon == planned.cost == plan.total_cost
            with pytest.raises(dr.InvalidRequest) as invalid:
                await client.plan(planning, [dr.PlanItem(d=6, n=194)])
            assert invalid.value.field == "items[0].target"

    asyncio.run(scenario())
