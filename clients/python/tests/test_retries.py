"""Retries that never pay twice, against the real service behind a fault-injecting proxy."""

from __future__ import annotations

import asyncio
import time

import pytest

import dirichlet_release as dr
from dirichlet_release import AsyncClient, Client

from .conftest import FaultProxy, Server, record

COUNTS = [120, 45, 3, 0, 17, 9]


def test_a_dropped_release_is_retried_and_charged_once(server: Server, proxy: FaultProxy) -> None:
    """The proxy forwards the release, then drops the connection unanswered."""
    with Client(server.base, server.admin) as direct:
        dataset = direct.create_dataset("retry proxy", epsilon=1.0, order=2).id
    proxy.plan["release"] = ["drop"]
    with Client(proxy.base, server.admin, backoff=0.05) as client:
        release = client.release(dataset, COUNTS, epsilon=0.4)
    sent = proxy.requests("release")
    assert [s.action for s in sent] == ["drop", "forward"]
    assert sent[0].idempotency_key == sent[1].idempotency_key == release.idempotency_key
    assert release.replayed  # the second answer is the stored release
    with Client(server.base, server.admin) as direct:
        budget = direct.budget(dataset)
        stored = list(direct.releases(dataset))
    assert budget.releases == 1
    assert budget.spent == release.cost.epsilon
    assert [r.id for r in stored] == [release.id]
    assert stored[0].distribution == release.distribution
    record(
        f"[{server.backend}] retry proxy (connection dropped after forwarding): release "
        f"requests sent {len(sent)} (same Idempotency-Key), releases charged {budget.releases}, "
        f"spent {budget.spent:.6f} = one cost {release.cost.epsilon:.6f}; client returned "
        f"release {release.id} (replayed={release.replayed}), the one stored"
    )


def test_a_release_dropped_before_its_answer_is_charged_once(
    server: Server, proxy: FaultProxy
) -> None:
    # The retry may arrive while the first request is still drawing or committing: whichever
    # commits first wins, the other gets the stored release, and exactly one is charged.
    with Client(server.base, server.admin) as direct:
        dataset = direct.create_dataset("early drop", epsilon=1.0, order=2).id
    proxy.plan["release"] = ["drop-early"]
    with Client(proxy.base, server.admin, backoff=0.01, max_backoff=0.01) as client:
        release = client.release(dataset, COUNTS, epsilon=0.4)
    with Client(server.base, server.admin) as direct:
        budget = direct.budget(dataset)
        stored = list(direct.releases(dataset))
    assert [s.action for s in proxy.requests("release")] == ["drop-early", "forward"]
    assert budget.releases == 1 and [r.id for r in stored] == [release.id]
    assert stored[0].distribution == release.distribution


def test_an_async_dropped_release_is_charged_once(server: Server, proxy: FaultProxy) -> None:
    async def scenario() -> None:
        async with AsyncClient(proxy.base, server.admin, backoff=0.05) as client:
            dataset = (await client.create_dataset("async retry", epsilon=1.0, order=2)).id
            proxy.plan["release"] = ["drop"]
            release = await client.release(dataset, COUNTS, epsilon=0.4)
            assert release.replayed
            budget = await client.budget(dataset)
            assert (budget.releases, budget.spent) == (1, release.cost.epsilon)
            ids = [r.id async for r in client.releases(dataset)]
            assert ids == [release.id]
            sent = proxy.requests("release")
            assert len(sent) == 2 and len({s.idempotency_key for s in sent}) == 1
            record(
                f"[{server.backend}] async retry proxy: release requests sent {len(sent)}, "
                f"releases charged {budget.releases}"
            )

    asyncio.run(scenario())


def test_503_is_retried_after_retry_after(server: Server, proxy: FaultProxy) -> None:
    proxy.plan["release"] = ["503"]
    proxy.retry_after = "1"
    with Client(proxy.base, server.admin, backoff=0.01, max_backoff=0.01) as client:
        dataset = client.create_dataset("503 once", epsilon=1.0, order=2).id
        started = time.monotonic()
        release = client.release(dataset, COUNTS, epsilon=0.4)
        waited = time.monotonic() - started
        assert waited >= 1.0  # Retry-After: 1 wins over the 0.01 s backoff
        assert not release.replayed  # the 503 was never forwarded: this is the one charge
        assert client.budget(dataset).releases == 1
    assert [s.action for s in proxy.requests("release")] == ["503", "forward"]


def test_504_commit_outcome_unknown_is_retried_into_the_replay(
    server: Server, proxy: FaultProxy
) -> None:
    proxy.plan["release"] = ["504"]
    with Client(proxy.base, server.admin, backoff=0.01) as client:
        dataset = client.create_dataset("504 once", epsilon=1.0, order=2).id
        release = client.release(dataset, COUNTS, epsilon=0.4)
        assert release.replayed  # the first attempt was charged; the retry got it back
        assert client.budget(dataset).releases == 1


def test_a_4xx_is_never_retried(server: Server, proxy: FaultProxy) -> None:
    with Client(proxy.base, server.admin, backoff=0.01) as client:
        dataset = client.create_dataset("4xx", epsilon=0.5, order=2).id
        client.release(dataset, COUNTS, epsilon=0.4)
        with pytest.raises(dr.BudgetExhausted):
            client.release(dataset, COUNTS, epsilon=0.4)
        with pytest.raises(dr.InvalidRequest):
            client.release(dataset, COUNTS, epsilon=-1.0)
    assert len(proxy.requests("release")) == 3


def test_creating_a_dataset_is_not_resent_after_a_drop(server: Server, proxy: FaultProxy) -> None:
    # POST /v1/datasets has no idempotency key: resending it after a lost answer could register
    # the dataset twice, so the client raises instead, and exactly one was created.
    with Client(server.base, server.admin) as direct:
        before = len(direct.list_datasets())
    proxy.plan["create_dataset"] = ["drop"]
    with Client(proxy.base, server.admin, backoff=0.01) as client:
        with pytest.raises(dr.APIConnectionError) as caught:
            client.create_dataset("dropped", epsilon=1.0, order=2)
        assert caught.value.idempotency_key is None
        assert len(client.list_datasets()) == before + 1
    assert len(proxy.requests("create_dataset")) == 1


def test_retries_zero_raises_at_once(server: Server, proxy: FaultProxy) -> None:
    with Client(server.base, server.admin) as direct:
        dataset = direct.create_dataset("no retries", epsilon=1.0, order=2).id
    proxy.plan["release"] = ["drop"]
    with Client(proxy.base, server.admin, retries=0) as client:
        with pytest.raises(dr.APIConnectionError) as caught:
            client.release(dataset, COUNTS, epsilon=0.4)
        # The drop came after the charge: the key on the exception recovers the release.
        key = caught.value.idempotency_key
        assert key is not None
        recovered = client.release(dataset, COUNTS, epsilon=0.4, idempotency_key=key)
        assert recovered.replayed and client.budget(dataset).releases == 1
