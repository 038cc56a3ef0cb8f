"""Every method of `Client` against the real service, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

import dirichlet_release as dr
from dirichlet_release import Client

from .conftest import Server, record

COUNTS = [120, 45, 3, 0, 17, 9]


def test_datasets_create_get_list(client: Client) -> None:
    created = client.create_dataset("visits per diagnosis", epsilon=1.0, order=2)
    assert isinstance(created, dr.Dataset)
    assert created.name == "visits per diagnosis"
    assert created.neighbouring == "replace_one"
    assert created.sensitivity == dr.Sensitivity(l2_squared=2.0, linf=1.0)
    assert created.budget == dr.BudgetSpec(epsilon=1.0, order=2.0)
    assert (created.spent, created.releases) == (0.0, 0)
    assert created.created_at.tzinfo is not None
    assert client.get_dataset(created.id) == created
    assert created.id in [d.id for d in client.list_datasets()]


def test_dataset_options_and_the_dp_view(client: Client) -> None:
    dp = client.create_dataset("an (ε, δ) target", epsilon=1.0, delta=1e-6)
    assert dp.budget.delta == 1e-6 and dp.budget.rdp_epsilon is not None
    budget = client.budget(dp.id)
    assert budget.dp is not None and budget.dp.delta == 1e-6
    assert budget.dp.total_epsilon > 0 and budget.dp.spent_epsilon == 0
    added = client.create_dataset("add/remove", epsilon=1.0, order=2, neighbouring="add_remove_one")
    assert added.neighbouring == "add_remove_one"
    custom = client.create_dataset(
        "custom", epsilon=1.0, order=2, sensitivity=dr.Sensitivity(l2_squared=8.0, linf=2.0)
    )
    assert custom.neighbouring == "custom" and custom.sensitivity.linf == 2.0
    as_dict = client.create_dataset(
        "custom dict", epsilon=1.0, order=2, sensitivity={"l2_squared": 2.0, "linf": 1.0}
    )
    assert as_dict.neighbouring == "custom"


def test_preview_spends_nothing(client: Client, dataset_id: str) -> None:
    preview = client.preview(dataset_id, COUNTS, epsilon=0.4)
    assert isinstance(preview, dr.Preview)
    assert preview.admissible
    assert preview.mechanism.kind == "dirichlet" and preview.mechanism["r"] > 0
    assert preview.cost.order == 2.0 and 0.4 * (1 - 1e-9) <= preview.cost.epsilon <= 0.4
    assert preview.forecast is not None and "l2_bound" in preview.forecast
    assert preview.budget_after.spent == preview.cost.epsilon
    assert client.budget(dataset_id).spent == 0.0
    gaussian = client.preview(dataset_id, COUNTS, mechanism="gaussian", sigma=4.0)
    assert gaussian.mechanism.kind == "gaussian" and gaussian.forecast is None


def test_release_list_and_budget(client: Client, dataset_id: str) -> None:
    release = client.release(dataset_id, COUNTS, epsilon=0.4, label="visits 2026-11")
    assert isinstance(release.distribution, list) and len(release.distribution) == 6
    assert abs(sum(release.distribution) - 1) < 1e-9
    assert release.distributions is None
    assert release.label == "visits 2026-11" and release.created_by == "admin"
    assert release.mechanism.kind == "dirichlet" and not release.replayed
    assert release.idempotency_key is not None  # a fresh UUID, sent with the request
    uuid.UUID(release.idempotency_key)
    assert release.budget is not None and release.budget.releases == 1
    budget = client.budget(dataset_id)
    assert (budget.order, budget.total, budget.releases) == (2.0, 1.0, 1)
    assert budget.spent == release.cost.epsilon
    assert budget.remaining == budget.total - budget.spent
    assert budget.dp is None


def test_an_explicit_key_replays_without_a_second_charge(client: Client, dataset_id: str) -> None:
    first = client.release(dataset_id, COUNTS, epsilon=0.4, idempotency_key="visits-2026-11")
    again = client.release(dataset_id, COUNTS, epsilon=0.4, idempotency_key="visits-2026-11")
    assert again.replayed and not first.replayed
    assert (again.id, again.seq, again.distribution) == (first.id, first.seq, first.distribution)
    assert client.budget(dataset_id).releases == 1


def test_mechanism_parameters_and_arrays(client: Client) -> None:
    dataset = client.create_dataset("mechanisms", epsilon=8.0, order=2).id
    explicit = client.release(
        dataset, np.array(COUNTS), mechanism="explicit", r=0.5, alpha=np.full(6, 2.0)
    )
    assert explicit.mechanism.kind == "explicit" and explicit.mechanism["r"] == 0.5
    assert explicit.mechanism["alpha"] in (2.0, [2.0] * 6)
    laplace = client.release(dataset, COUNTS, mechanism="laplace", epsilon=0.5)
    assert laplace.mechanism.kind == "laplace" and laplace.mechanism["scale"] > 0
    prior = client.release(dataset, (3, 4, 5), epsilon=0.5, prior=2.0)
    assert prior.mechanism["prior"] == 2.0
    exponential = client.release(dataset, [30, 70], mechanism="exponential", epsilon=2.0)
    assert exponential.mechanism.kind == "exponential"
    table = client.release(dataset, np.array([[1, 2, 3], [4, 5, 6]]), epsilon=0.5)
    assert isinstance(table.distributions, list) and len(table.distributions) == 2


def test_pandas_series_round_trip(client: Client, dataset_id: str) -> None:
    visits = pd.Series(
        COUNTS, index=pd.Index(["flu", "asthma", "rare", "none", "sprain", "other"], name="dx")
    )
    release = client.release(dataset_id, visits, epsilon=0.4)
    assert isinstance(release.distribution, pd.Series)
    pd.testing.assert_index_equal(release.distribution.index, visits.index)
    assert abs(release.distribution.sum() - 1) < 1e-9
    stored = client.get_release(dataset_id, release.id)
    assert stored.distribution == release.distribution.tolist()


def test_pandas_crosstab_round_trip(client: Client, server: Server) -> None:
    records = pd.DataFrame(
        {
            "age": ["0-17"] * 5 + ["18-64"] * 7 + ["65+"] * 6,
            "dx": [
                "flu",
                "flu",
                "asthma",
                "sprain",
                "flu",
                "flu",
                "sprain",
                "sprain",
                "asthma",
                "flu",
                "other",
                "flu",
                "flu",
                "other",
                "other",
                "asthma",
                "flu",
                "flu",
            ],
        }
    )
    # A crosstab lists only the values that occur: reindexed to the public lists, so that the
    # table's shape and labels say nothing about which groups are empty ("measles" is).
    crosstab = pd.crosstab(records["age"], records["dx"])
    table = crosstab.reindex(
        index=["0-17", "18-64", "65+"],
        columns=["asthma", "flu", "measles", "other", "sprain"],
        fill_value=0,
    )
    assert table.shape == (3, 5) and table["measles"].sum() == 0
    dataset = client.create_dataset("visits by age", epsilon=1.0, order=2).id
    preview = client.preview(dataset, table, epsilon=0.5)
    assert isinstance(preview.forecasts, pd.Series)
    assert list(preview.forecasts.index) == list(table.index)
    release = client.release(dataset, table, epsilon=0.5, label="dx | age")
    out = release.distributions
    assert isinstance(out, pd.DataFrame)
    pd.testing.assert_index_equal(out.index, table.index)
    pd.testing.assert_index_equal(out.columns, table.columns)
    assert np.allclose(out.sum(axis=1), 1.0)
    assert release.budget is not None and release.budget.releases == 1
    record(
        f"[{server.backend}] pandas round trip: crosstab {table.shape[0]}×{table.shape[1]} "
        f"(index {table.index.name!r} {list(table.index)}, columns {table.columns.name!r} "
        f"{list(table.columns)}) -> distributions DataFrame of the same index and columns, "
        f"rows summing to {out.sum(axis=1).round(12).tolist()}, one charge of "
        f"{release.cost.epsilon:.6f}"
    )


def test_releases_iterates_every_page(client: Client) -> None:
    dataset = client.create_dataset("pages", epsilon=1.0, order=2).id
    made = [client.release(dataset, COUNTS, epsilon=0.1).id for _ in range(5)]
    listed = list(client.releases(dataset, page_size=2))
    assert [r.id for r in listed] == made[::-1]
    assert all(r.budget is None and r.distribution is not None for r in listed)
    assert [r.seq for r in listed] == [5, 4, 3, 2, 1]


def test_tokens_whoami_and_revocation(client: Client, server: Server, dataset_id: str) -> None:
    other = client.create_dataset("not the analyst's", epsilon=1.0, order=2).id
    assert client.whoami() == dr.WhoAmI(role="admin")
    expires = datetime.now(timezone.utc) + timedelta(days=1)
    token = client.create_token([dataset_id], expires_at=expires)
    assert token.role == "analyst" and token.datasets == [dataset_id]
    assert token.token.startswith("dra_") and token.token not in repr(token)
    assert token.expires_at is not None
    assert token.id in [t.id for t in client.list_tokens()]
    with Client(server.base, token.token) as analyst:
        me = analyst.whoami()
        assert (me.role, me.token_id, me.datasets) == ("analyst", token.id, [dataset_id])
        released = analyst.release(dataset_id, COUNTS, epsilon=0.2)
        assert released.created_by == token.id
        assert [d.id for d in analyst.list_datasets()] == [dataset_id]
        with pytest.raises(dr.NotFound):
            analyst.get_dataset(other)
        with pytest.raises(dr.Forbidden) as forbidden:
            analyst.create_dataset("nope", epsilon=1.0, order=2)
        assert forbidden.value.status == 403
        client.revoke_token(token.id)
        client.revoke_token(token.id)  # a no-op the second time
        with pytest.raises(dr.Unauthorized):
            analyst.whoami()
    revoked = [t for t in client.list_tokens() if t.id == token.id]
    assert revoked[0].revoked_at is not None


def test_from_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIRICHLET_URL", server.base + "/")
    monkeypatch.setenv("DIRICHLET_TOKEN", server.admin)
    with Client.from_env() as client:
        assert client.base_url == server.base
        assert client.whoami().role == "admin"
    monkeypatch.delenv("DIRICHLET_TOKEN")
    with pytest.raises(ValueError, match="DIRICHLET_TOKEN"):
        Client.from_env()
