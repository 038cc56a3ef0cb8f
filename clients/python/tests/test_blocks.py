"""Datasets split into blocks over time through the client, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

import dirichlet_release as dr
from dirichlet_release import Client


def test_every_day_a_new_block(client: Client) -> None:
    daily = client.create_dataset("daily visits", epsilon=1.0, order=2, period="day")
    assert daily.raw["blocks"] == {"period": "day"}
    week = ("2026-12-01", "2026-12-07")
    charge = client.record_charge(daily.id, "rdp", epsilon=0.25, blocks=week)
    assert charge.raw["blocks"] == {"from": "2026-12-01", "to": "2026-12-07"}
    release = client.release(daily.id, [30, 12, 5, 0], epsilon=0.5, block="2026-12-07")
    assert release.raw["blocks"] == {"from": "2026-12-07", "to": "2026-12-07"}
    blocks = client.blocks(daily.id, "2026-12-06", "2026-12-08")
    assert [b.key for b in blocks] == ["2026-12-06", "2026-12-07", "2026-12-08"]
    assert blocks[0].spent == pytest.approx(0.25, abs=1e-9)
    assert blocks[1].spent == pytest.approx(0.25 + release.cost.epsilon, abs=1e-9)
    assert blocks[2] == dr.Block(key="2026-12-08", total=1.0, spent=0.0, remaining=1.0)

    # A range reaching the fullest day is refused, naming it; nothing is charged on any day.
    with pytest.raises(dr.BudgetExhausted) as refused:
        client.release(daily.id, [30, 12, 5, 0], epsilon=0.5, blocks=("2026-12-05", "2026-12-08"))
    assert refused.value.body["block"] == "2026-12-07"
    assert client.blocks(daily.id, "2026-12-08", "2026-12-08")[0].spent == 0.0
    preview = client.preview(daily.id, [30, 12, 5, 0], epsilon=0.5, block="2026-12-08")
    assert preview.admissible

    # Blocks are required on a blocked dataset, and refused on another.
    with pytest.raises(dr.InvalidRequest) as missing:
        client.release(daily.id, [30, 12, 5, 0], epsilon=0.1)
    assert missing.value.body["field"] == "blocks"
    with pytest.raises(dr.InvalidRequest):
        client.release(daily.id, [30, 12, 5, 0], epsilon=0.1, block="2026-W49")
    budget = client.budget(daily.id)
    assert budget.raw["blocks"]["most_spent"]["key"] == "2026-12-07"
