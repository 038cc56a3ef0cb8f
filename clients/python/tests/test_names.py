"""Named cells and rows through the client, on SQLite and on PostgreSQL.

A pandas input is aligned to the dataset's cells by name before it is sent; a mismatch is
refused before anything reaches the service; row names go out only when asked for.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import dirichlet_release as dr
from dirichlet_release import Client

from .conftest import FaultProxy, Server, record

CELLS = ["flu", "asthma", "measles", "scurvy", "sprain", "other"]
COUNTS = [120, 45, 3, 0, 17, 9]
AGE_BANDS = ["0-17", "18-64", "65+"]


def named(client: Client, name: str = "named cells") -> dr.Dataset:
    return client.create_dataset(name, epsilon=4.0, order=2, cells=CELLS)


def test_datasets_carry_their_cells(client: Client) -> None:
    dataset = named(client)
    assert dataset.cells == CELLS
    assert client.get_dataset(dataset.id).cells == CELLS
    assert [d.cells for d in client.list_datasets() if d.id == dataset.id] == [CELLS]
    from_index = client.create_dataset(
        "cells from an Index", epsilon=1.0, order=2, cells=pd.Index(CELLS, name="diagnosis")
    )
    assert from_index.cells == CELLS
    assert client.create_dataset("plain", epsilon=1.0, order=2).cells is None
    for bad in (["flu"], ["flu", "flu"], ["flu", ""]):
        with pytest.raises(dr.InvalidRequest) as caught:
            client.create_dataset("bad cells", epsilon=1.0, order=2, cells=bad)
        assert caught.value.field is not None and caught.value.field.startswith("cells")
    with pytest.raises(TypeError):
        client.create_dataset("one string", epsilon=1.0, order=2, cells="flu")


def test_a_reordered_series_is_the_same_request(server: Server, proxy: FaultProxy) -> None:
    ordered = pd.Series(COUNTS, index=pd.Index(CELLS, name="diagnosis"))
    shuffled = ordered.iloc[[5, 2, 0, 4, 1, 3]]
    assert list(shuffled.index) != CELLS
    with Client(proxy.base, server.admin) as client:
        dataset = named(client).id
        first = client.release(dataset, shuffled, epsilon=0.25, idempotency_key="named-vector")
        # The same key with the ordered Series is the same request: a replay, not a refusal
        # (IdempotencyKeyReused) and not a second charge.
        again = client.release(dataset, ordered, epsilon=0.25, idempotency_key="named-vector")
        as_list = client.release(dataset, COUNTS, epsilon=0.25, idempotency_key="named-vector")
        assert again.replayed and as_list.replayed and not first.replayed
        assert client.budget(dataset).releases == 1
    bodies = [seen.body for seen in proxy.requests("release")]
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]
    assert json.loads(bodies[0])["counts"] == COUNTS
    # The output is labelled with the dataset's cells, in the dataset's order.
    for release in (first, again):
        assert isinstance(release.distribution, pd.Series)
        assert list(release.distribution.index) == CELLS
        assert release.distribution.index.name == "diagnosis"
        assert release.cells == CELLS
    assert isinstance(first.distribution, pd.Series) and isinstance(again.distribution, pd.Series)
    pd.testing.assert_series_equal(first.distribution, again.distribution)
    assert as_list.distribution == first.distribution.tolist()


def test_a_dataframe_is_aligned_by_its_columns(server: Server, proxy: FaultProxy) -> None:
    table = pd.DataFrame(
        [[40, 12, 1, 0, 5, 2], [55, 20, 1, 0, 8, 4], [25, 13, 1, 1, 4, 3]],
        index=pd.Index(AGE_BANDS, name="age_band"),
        columns=pd.Index(CELLS, name="diagnosis"),
    )
    reordered = table[list(reversed(CELLS))]
    with Client(proxy.base, server.admin) as client:
        dataset = named(client).id
        preview = client.preview(dataset, reordered, epsilon=0.5)
        assert preview.cells == CELLS
        assert isinstance(preview.forecasts, pd.Series)
        assert list(preview.forecasts.index) == AGE_BANDS
        client.preview(dataset, table, epsilon=0.5)
        release = client.release(dataset, reordered, epsilon=0.5)
    previews = [json.loads(seen.body) for seen in proxy.requests("preview")]
    assert previews[0] == previews[1] and previews[0]["table"] == table.to_numpy().tolist()
    sent = json.loads(proxy.requests("release")[0].body)
    assert sent["table"] == table.to_numpy().tolist()
    # Row names are sent only when asked for.
    assert "row_names" not in sent and all("row_names" not in p for p in previews)
    out = release.distributions
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == CELLS and out.columns.name == "diagnosis"
    pd.testing.assert_index_equal(out.index, table.index)
    assert release.row_names is None


def test_names_that_do_not_match_are_refused_before_sending(
    server: Server, proxy: FaultProxy
) -> None:
    series = pd.Series(COUNTS, index=CELLS)
    table = pd.DataFrame([COUNTS, COUNTS], index=["a", "b"], columns=CELLS)
    with Client(proxy.base, server.admin) as client:
        dataset = named(client).id  # its cells are now known to this client
        before = len(proxy.seen)

        missing = series.drop("scurvy")  # an empty group left out, as a crosstab leaves it
        with pytest.raises(dr.CellsMismatch) as caught:
            client.release(dataset, missing, epsilon=0.25)
        error = caught.value
        assert isinstance(error, ValueError) and isinstance(error, dr.DirichletError)
        assert (error.missing, error.extra) == (["scurvy"], [])
        # Which names are missing (which groups are empty) and the counts stay out of the text.
        assert "scurvy" not in str(error) and "missing" in str(error)
        assert not any(str(n) in str(error) for n in COUNTS if n > 9)

        extra = pd.concat([series, pd.Series([4], index=["typo"])])
        with pytest.raises(dr.CellsMismatch) as caught:
            client.preview(dataset, extra, epsilon=0.25)
        assert (caught.value.missing, caught.value.extra) == ([], ["typo"])
        assert "typo" not in str(caught.value)

        renamed = series.rename({"flu": "influenza"})
        with pytest.raises(ValueError) as both:
            client.release(dataset, renamed, epsilon=0.25)
        assert isinstance(both.value, dr.CellsMismatch)
        assert (both.value.missing, both.value.extra) == (["flu"], ["influenza"])

        with pytest.raises(dr.CellsMismatch):
            client.release(dataset, table.drop(columns="measles"), epsilon=0.25)
        with pytest.raises(ValueError, match="repeats"):
            client.release(dataset, pd.Series(COUNTS, index=[*CELLS[:5], "flu"]), epsilon=0.25)
        with pytest.raises(TypeError, match="strings"):
            client.release(dataset, pd.Series(COUNTS), epsilon=0.25)  # a RangeIndex
        with pytest.raises(TypeError, match="DataFrame"):
            client.release(dataset, series, epsilon=0.25, row_names=True)

        # Not one request reached the service, and nothing was charged.
        assert proxy.seen[before:] == []
        assert client.budget(dataset).releases == 0

    # A client that has not seen the dataset reads its cells first (a GET, no counts) and
    # refuses all the same: no preview or release is sent.
    mark = len(proxy.seen)
    with Client(proxy.base, server.admin) as fresh, pytest.raises(dr.CellsMismatch):
        fresh.release(dataset, missing, epsilon=0.25)
    assert [(s.method, s.path) for s in proxy.seen[mark:]] == [("GET", f"/v1/datasets/{dataset}")]
    assert proxy.requests("release") == [] and proxy.requests("preview") == []


def test_lists_and_arrays_go_by_position(client: Client) -> None:
    dataset = named(client).id
    vector = client.release(dataset, np.array(COUNTS), epsilon=0.25)
    assert isinstance(vector.distribution, list) and vector.cells == CELLS
    with pytest.raises(dr.InvalidRequest) as wrong:
        client.release(dataset, COUNTS[:5], epsilon=0.25)
    assert wrong.value.field == "counts"


def test_row_names_round_trip(client: Client, server: Server) -> None:
    rng = np.random.default_rng(22)
    records = pd.DataFrame(
        {
            # No one over 65 and no measles, scurvy or sprain: a crosstab would omit them.
            "age_band": rng.choice(AGE_BANDS[:2], size=80),
            "diagnosis": rng.choice(["flu", "asthma", "other"], size=80),
        }
    )
    crosstab = pd.crosstab(records["age_band"], records["diagnosis"])
    assert crosstab.shape == (2, 3)
    table = crosstab.reindex(index=AGE_BANDS, columns=CELLS, fill_value=0)
    dataset = client.create_dataset("visits by age", epsilon=2.0, order=2, cells=CELLS).id

    release = client.release(dataset, table, epsilon=0.5, row_names=True, label="dx | age")
    assert release.row_names == AGE_BANDS and release.cells == CELLS
    out = release.distributions
    assert isinstance(out, pd.DataFrame) and out.shape == (3, 6)
    assert list(out.index) == AGE_BANDS and out.index.name == "age_band"
    assert list(out.columns) == CELLS and out.columns.name == "diagnosis"
    assert np.allclose(out.sum(axis=1), 1.0)

    stored = client.get_release(dataset, release.id)
    assert (stored.row_names, stored.cells, stored.label) == (AGE_BANDS, CELLS, "dx | age")
    assert stored.distributions == out.to_numpy().tolist()

    # Explicit names: a DataFrame output is indexed by the release's names, not its own index;
    # with a list table the output stays rows and the names come back beside it.
    public = ["children", "adults", "seniors"]
    renamed = client.release(dataset, table, epsilon=0.25, row_names=public)
    assert isinstance(renamed.distributions, pd.DataFrame)
    assert list(renamed.distributions.index) == public
    listed = client.release(dataset, table.to_numpy().tolist(), epsilon=0.25, row_names=public)
    assert listed.row_names == public and isinstance(listed.distributions, list)
    # Without row_names nothing names the rows.
    unnamed = client.release(dataset, table, epsilon=0.25)
    assert unnamed.row_names is None
    assert isinstance(unnamed.distributions, pd.DataFrame)
    assert list(unnamed.distributions.index) == AGE_BANDS  # the input's own index

    # A listing page names the cells once; every release read from it carries them.
    history = list(client.releases(dataset, page_size=2))
    assert [r.id for r in history] == [unnamed.id, listed.id, renamed.id, release.id]
    assert all(r.cells == CELLS for r in history)
    assert [r.row_names for r in history] == [None, public, public, AGE_BANDS]

    # The service checks explicit names against the table.
    with pytest.raises(dr.InvalidRequest) as wrong:
        client.release(dataset, table, epsilon=0.25, row_names=["one", "two"])
    assert wrong.value.field == "row_names"
    record(
        f"[{server.backend}] row names: a {crosstab.shape[0]}×{crosstab.shape[1]} crosstab "
        f"reindexed to {len(AGE_BANDS)}×{len(CELLS)} public rows and cells, released with "
        f"row_names=True -> DataFrame indexed {list(out.index)} × {list(out.columns)}; stored "
        f"and listed with the same names"
    )
