"""Every problem the service returns becomes the typed exception callers branch on."""

from __future__ import annotations

import uuid

import pytest

import dirichlet_release as dr
from dirichlet_release import Client

from .conftest import FaultProxy, Server

COUNTS = [120, 45, 3, 0, 17, 9]


def test_budget_exhausted_carries_the_remaining_budget(client: Client, dataset_id: str) -> None:
    client.release(dataset_id, COUNTS, epsilon=0.4)
    client.release(dataset_id, COUNTS, epsilon=0.4)
    with pytest.raises(dr.BudgetExhausted) as caught:
        client.release(dataset_id, COUNTS, epsilon=0.4)
    error = caught.value
    assert isinstance(error, dr.Conflict) and isinstance(error, dr.ProblemError)
    assert (error.status, error.type) == (409, "/problems/budget-exhausted")
    assert error.title and error.detail and error.slug == "budget-exhausted"
    assert error.budget is not None and error.budget.releases == 2
    assert error.remaining == pytest.approx(0.2, abs=1e-9)
    assert error.remaining == client.budget(dataset_id).remaining
    assert error.body["budget"]["remaining"] == error.remaining
    # The refusal charged nothing.
    assert client.budget(dataset_id).releases == 2


def test_invalid_request_names_the_field(client: Client, dataset_id: str) -> None:
    with pytest.raises(dr.InvalidRequest) as caught:
        client.release(dataset_id, COUNTS, epsilon=-1.0)
    assert caught.value.status == 422 and caught.value.type == "/problems/invalid-request"
    assert caught.value.field == "epsilon"
    with pytest.raises(dr.InvalidRequest) as unknown:
        client.preview(dataset_id, COUNTS, epsilon=0.4, no_such_parameter=1)
    assert unknown.value.status == 422
    with pytest.raises(dr.InvalidRequest) as dataset:
        client.create_dataset("", epsilon=1.0, order=2)
    assert dataset.value.field == "name"


def test_the_mechanism_refusals_are_invalid_requests(client: Client, dataset_id: str) -> None:
    with pytest.raises(dr.CostExceedsEpsilon) as cap:
        client.release(dataset_id, COUNTS, mechanism="explicit", r=0.5, alpha=2.0, epsilon=1e-6)
    assert isinstance(cap.value, dr.InvalidRequest)
    assert cap.value.type == "/problems/cost-exceeds-epsilon"
    # r·Δ∞ = 5 against α = 1: the Rényi curve is finite only below order 1.2, not at λ₀ = 2.
    with pytest.raises(dr.NoGuarantee) as none:
        client.release(dataset_id, COUNTS, mechanism="explicit", r=5.0, alpha=1.0)
    assert none.value.status == 422 and "order" in none.value.detail
    with pytest.raises(dr.CalibrationInfeasible) as infeasible:
        client.preview(dataset_id, COUNTS, epsilon=1e-300)  # below the ledger's grid
    assert infeasible.value.type == "/problems/calibration-infeasible"
    # A Gamma shape r·count + α above 2⁵⁰: the f64 sampler is not exact there.
    with pytest.raises(dr.BeyondPrecision) as precision:
        client.preview(dataset_id, [1e15, 1], mechanism="explicit", r=2.0, alpha=10.0)
    assert precision.value.type == "/problems/beyond-precision"
    assert client.budget(dataset_id).releases == 0


def test_output_quota_exceeded(small_quota_server: Server) -> None:
    with Client(small_quota_server.base, small_quota_server.admin) as client:
        dataset = client.create_dataset("quota", epsilon=1.0, order=2).id
        client.release(dataset, COUNTS, epsilon=0.1)
        client.release(dataset, COUNTS, epsilon=0.1)  # 12 cells stored: the quota
        with pytest.raises(dr.OutputQuotaExceeded) as caught:
            client.release(dataset, COUNTS, epsilon=0.1)
        assert isinstance(caught.value, dr.Conflict) and caught.value.status == 409
        assert client.budget(dataset).releases == 2


def test_idempotency_key_reused_with_another_body(client: Client, dataset_id: str) -> None:
    key = f"reused-{uuid.uuid4()}"
    client.release(dataset_id, COUNTS, epsilon=0.2, idempotency_key=key)
    with pytest.raises(dr.IdempotencyKeyReused) as caught:
        client.release(dataset_id, [1, 2, 3, 4, 5, 6], epsilon=0.2, idempotency_key=key)
    error = caught.value
    assert isinstance(error, dr.Conflict) and isinstance(error, dr.InvalidRequest)
    assert error.type == "/problems/idempotency-key-reused"
    assert error.idempotency_key == key
    assert client.budget(dataset_id).releases == 1


def test_not_found_unauthorized_forbidden(client: Client, server: Server, dataset_id: str) -> None:
    missing = str(uuid.uuid4())
    for call in (
        lambda: client.get_dataset(missing),
        lambda: client.budget(missing),
        lambda: client.release(missing, COUNTS, epsilon=0.1),
        lambda: client.get_release(dataset_id, missing),
        lambda: client.revoke_token("0123456789abcdef"),
    ):
        with pytest.raises(dr.NotFound) as caught:
            call()
        assert caught.value.status == 404
    stranger = Client(server.base, "not-a-valid-token-at-all")
    with stranger, pytest.raises(dr.Unauthorized) as unauthorized:
        stranger.list_datasets()
    assert unauthorized.value.status == 401
    assert unauthorized.value.headers.get("www-authenticate") == "Bearer"
    token = client.create_token([dataset_id])
    with Client(server.base, token.token) as analyst:
        with pytest.raises(dr.Forbidden):
            analyst.create_token([dataset_id])
        with pytest.raises(dr.Forbidden):
            analyst.list_tokens()


def test_service_unavailable_after_the_retries(server: Server, proxy: FaultProxy) -> None:
    proxy.plan["release"] = ["503", "503", "503"]
    proxy.retry_after = "0"
    with Client(proxy.base, server.admin, retries=2, backoff=0.01) as client:
        dataset = client.create_dataset("503", epsilon=1.0, order=2).id
        with pytest.raises(dr.ServiceUnavailable) as caught:
            client.release(dataset, COUNTS, epsilon=0.1)
        assert caught.value.status == 503 and caught.value.retry_after == 0
        keys = {s.idempotency_key for s in proxy.requests("release")}
        assert len(proxy.requests("release")) == 3 and keys == {caught.value.idempotency_key}
        assert client.budget(dataset).releases == 0


def test_commit_outcome_unknown_after_the_retries(server: Server, proxy: FaultProxy) -> None:
    # Every attempt reaches the service and is answered 504 on the way back: the first is
    # charged, the retries replay it, and the client, seeing only 504s, raises.
    proxy.plan["release"] = ["504", "504"]
    with Client(proxy.base, server.admin, retries=1, backoff=0.01) as client:
        dataset = client.create_dataset("504", epsilon=1.0, order=2).id
        with pytest.raises(dr.CommitOutcomeUnknown) as caught:
            client.release(dataset, COUNTS, epsilon=0.1)
        assert isinstance(caught.value, dr.ServerError) and caught.value.status == 504
        # The key on the exception tells the outcome without paying twice.
        again = client.release(
            dataset, COUNTS, epsilon=0.1, idempotency_key=caught.value.idempotency_key
        )
        assert again.replayed
        assert client.budget(dataset).releases == 1


def test_connection_error_when_nothing_listens() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", "x" * 20, retries=1, backoff=0.01)
    with client, pytest.raises(dr.APIConnectionError) as caught:
        client.release(str(uuid.uuid4()), COUNTS, epsilon=0.1, idempotency_key="k-1")
    assert caught.value.idempotency_key == "k-1"
    assert "idempotency_key='k-1'" in str(caught.value)


def test_internal_server_error_is_raised_at_once(server: Server, proxy: FaultProxy) -> None:
    proxy.plan["budget"] = ["500"]
    with Client(proxy.base, server.admin, backoff=0.01) as client:
        dataset = client.create_dataset("500", epsilon=1.0, order=2).id
        with pytest.raises(dr.InternalServerError) as caught:
            client.budget(dataset)
        assert caught.value.status == 500 and caught.value.type == "/problems/internal"
        assert client.budget(dataset).releases == 0
    assert len(proxy.requests("budget")) == 2


def test_an_unreadable_answer_is_bad_response(server: Server, proxy: FaultProxy) -> None:
    proxy.plan["budget"] = ["garbage"]
    with Client(proxy.base, server.admin) as client:
        dataset = client.create_dataset("garbage", epsilon=1.0, order=2).id
        with pytest.raises(dr.BadResponse):
            client.budget(dataset)


def test_the_clients_timeout_is_api_timeout_error(server: Server, proxy: FaultProxy) -> None:
    proxy.plan["budget"] = ["hang", "hang"]
    proxy.hang_seconds = 1.0
    with Client(proxy.base, server.admin, timeout=0.3, retries=1, backoff=0.01) as client:
        dataset = client.create_dataset("timeout", epsilon=1.0, order=2).id
        with pytest.raises(dr.APITimeoutError) as caught:
            client.budget(dataset)
        assert isinstance(caught.value, dr.APIConnectionError)
        assert caught.value.idempotency_key is None
    assert len(proxy.requests("budget")) == 2
