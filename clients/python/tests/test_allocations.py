"""Allocations through the client, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import dirichlet_release as dr
from dirichlet_release import Client

from .conftest import Server

COUNTS = [30, 12, 5, 0]
# Dyadic amounts: exact on the ledger's 2⁻⁴⁰ grid, so they compare with ==.
A_SHARE, B_SHARE, LOWERED = 0.375, 0.75, 0.125


def test_set_list_lower_and_remove_allocations(
    client: Client, server: Server, dataset_id: str
) -> None:
    started = datetime.now(timezone.utc) - timedelta(seconds=5)
    a = client.create_token([dataset_id])
    b = client.create_token([dataset_id])
    with Client(server.base, a.token) as analyst:
        # What A spends before any allocation counts against the allocation set later.
        analyst.release(dataset_id, COUNTS, epsilon=0.25)
        set_a = client.set_allocation(dataset_id, a.id, A_SHARE)
        assert set_a == dr.Allocation(token_id=a.id, epsilon=A_SHARE, spent=0.25, remaining=0.125)
        # Allocations may add up to more than the dataset's budget of 1.
        assert client.set_allocation(dataset_id, b.id, B_SHARE).remaining == B_SHARE

        # A's budget carries A's allocation; the admin's carries none.
        own = analyst.budget(dataset_id)
        assert own.allocation == set_a
        assert (own.total, own.spent) == (1.0, 0.25)
        assert client.budget(dataset_id).allocation is None

        # Lowering A's allocation below what A spent blocks A and loses nothing.
        lowered = client.set_allocation(dataset_id, a.id, LOWERED)
        assert lowered == dr.Allocation(a.id, LOWERED, spent=0.25, remaining=0.0)
        assert client.budget(dataset_id).spent == 0.25

        listed = client.allocations(dataset_id)
        assert isinstance(listed, dr.Allocations) and listed.order == 2.0
        assert {x.token_id for x in listed.allocations} == {a.id, b.id}
        assert listed.get(a.id) == lowered and listed.get(b.id) == dr.Allocation(
            b.id, B_SHARE, 0.0, B_SHARE
        )
        assert listed.get("nobody") is None
        trail = [(c.token_id, c.old_epsilon, c.new_epsilon) for c in listed.changes]
        assert trail == [(a.id, None, A_SHARE), (b.id, None, B_SHARE), (a.id, A_SHARE, LOWERED)]
        assert all(isinstance(c, dr.AllocationChange) for c in listed.changes)
        assert all(c.changed_by == "admin" for c in listed.changes)
        times = [c.changed_at for c in listed.changes]
        assert all(t.tzinfo is not None and started <= t for t in times)
        assert times == sorted(times)
        assert listed.raw["changes"][0]["token_id"] == a.id

        # An analyst lists only their own allocation and its changes.
        mine = analyst.allocations(dataset_id)
        assert [x.token_id for x in mine.allocations] == [a.id]
        assert [c.token_id for c in mine.changes] == [a.id, a.id]

        # Removing it: gone, recorded, and A draws on the dataset as before.
        client.remove_allocation(dataset_id, a.id)
        with pytest.raises(dr.NotFound):
            client.remove_allocation(dataset_id, a.id)
        after = client.allocations(dataset_id)
        assert [x.token_id for x in after.allocations] == [b.id]
        last = after.changes[-1]
        assert (last.token_id, last.old_epsilon, last.new_epsilon) == (a.id, LOWERED, None)
        assert analyst.budget(dataset_id).allocation is None
        assert analyst.release(dataset_id, COUNTS, epsilon=0.25).cost.epsilon == 0.25


def test_only_the_admin_sets_allocations(client: Client, server: Server, dataset_id: str) -> None:
    other = client.create_dataset("another", epsilon=1.0, order=2).id
    token = client.create_token([dataset_id])
    with Client(server.base, token.token) as analyst:
        with pytest.raises(dr.Forbidden):
            analyst.set_allocation(dataset_id, token.id, 0.5)
        with pytest.raises(dr.Forbidden):
            analyst.remove_allocation(dataset_id, token.id)
    # A token that may not use the dataset, or none at all, has no allocation to set.
    with pytest.raises(dr.NotFound):
        client.set_allocation(other, token.id, 0.5)
    with pytest.raises(dr.NotFound):
        client.set_allocation(dataset_id, "0123456789abcdef", 0.5)
    with pytest.raises(dr.InvalidRequest) as negative:
        client.set_allocation(dataset_id, token.id, -1.0)
    assert negative.value.field == "epsilon"
    assert client.allocations(dataset_id).changes == []


def test_allocation_exhausted_is_a_budget_exhausted_with_the_allocation(
    client: Client, server: Server, dataset_id: str
) -> None:
    token = client.create_token([dataset_id])
    client.set_allocation(dataset_id, token.id, A_SHARE)
    with Client(server.base, token.token) as analyst:
        analyst.release(dataset_id, COUNTS, epsilon=0.25)

        # The preview already says no, and shows the allocation it would leave.
        preview = analyst.preview(dataset_id, COUNTS, epsilon=0.25)
        assert not preview.admissible
        assert preview.allocation_after == dr.Allocation(token.id, A_SHARE, 0.25, 0.125)
        fits = analyst.preview(dataset_id, COUNTS, epsilon=0.125)
        assert fits.admissible
        assert fits.allocation_after == dr.Allocation(token.id, A_SHARE, A_SHARE, 0.0)
        assert client.preview(dataset_id, COUNTS, epsilon=0.25).allocation_after is None

        # Callers that catch BudgetExhausted catch the allocation's refusal too.
        with pytest.raises(dr.BudgetExhausted) as caught:
            analyst.release(dataset_id, COUNTS, epsilon=0.25)
        error = caught.value
        assert type(error) is dr.AllocationExhausted
        assert isinstance(error, dr.Conflict)
        assert (error.status, error.type, error.slug) == (
            409,
            "/problems/allocation-exhausted",
            "allocation-exhausted",
        )
        assert error.allocation == dr.Allocation(token.id, A_SHARE, spent=0.25, remaining=0.125)
        assert error.remaining == 0.125
        # The dataset had room (0.75): it was the allocation that refused.
        assert error.budget is not None
        assert (error.budget.spent, error.budget.remaining) == (0.25, 0.75)
        assert error.detail and error.idempotency_key is not None
        # Nothing charged.
        budget = analyst.budget(dataset_id)
        assert (budget.spent, budget.releases) == (0.25, 1)
        assert budget.allocation == error.allocation
        # What is left of the allocation fits exactly.
        assert analyst.release(dataset_id, COUNTS, epsilon=0.125).cost.epsilon == 0.125
        with pytest.raises(dr.AllocationExhausted) as spent:
            analyst.release(dataset_id, COUNTS, epsilon=0.125)
        assert spent.value.remaining == 0.0
    # The dataset's own refusal stays a plain BudgetExhausted.
    client.release(dataset_id, COUNTS, epsilon=0.5)
    with pytest.raises(dr.BudgetExhausted) as dataset_refusal:
        client.release(dataset_id, COUNTS, epsilon=0.25)
    assert type(dataset_refusal.value) is dr.BudgetExhausted
    assert dataset_refusal.value.remaining == 0.125
