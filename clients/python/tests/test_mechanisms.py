"""The mechanisms as the service lists them, and the client following the listing, on both backends.

Nothing here names a mechanism's fields: every expectation comes from ``GET /v1/mechanisms``, so
a client that kept its own table of fields would fail as soon as the two differ.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import httpx
import pytest

import dirichlet_release as dr
from dirichlet_release import AsyncClient, Client, PlanItem, Target

from .conftest import Server, mirrors, record


def test_the_listing_is_the_services(client: Client, server: Server) -> None:
    listing = client.mechanisms()
    assert isinstance(listing, dr.Mechanisms)
    # Public: read without a token, it is the same listing.
    public = httpx.get(f"{server.base}/v1/mechanisms").raise_for_status().json()
    assert listing == dr.Mechanisms.from_json(public) and listing.raw == public
    mirrors(listing, public, "mechanisms")
    assert len(listing) >= 2 and listing.default.name == "dirichlet"
    for mechanism in listing:
        assert isinstance(mechanism, dr.MechanismInfo) and listing[mechanism.name] is mechanism
        assert mechanism.summary and all(f.description for f in mechanism.fields)
        assert all(isinstance(f, dr.MechanismField) for f in mechanism.fields)


def test_the_listing_is_read_once_per_client(server: Server, dataset_id: str) -> None:
    paths: List[str] = []
    item = PlanItem(d=4, n=100, mechanism="dirichlet", epsilon=0.25)

    def seen(request: httpx.Request) -> None:
        paths.append(request.url.path)

    with (
        httpx.Client(event_hooks={"request": [seen]}) as http,
        Client(server.base, server.admin, http_client=http) as client,
    ):
        first = client.mechanisms()
        client.plan(dataset_id, [item])
        client.plan(dataset_id, [item])
        assert client.mechanisms() is first
    assert (
        paths.count("/v1/mechanisms") == 1 and paths.count(f"/v1/datasets/{dataset_id}/plan") == 2
    )

    async def scenario() -> List[str]:
        async_paths: List[str] = []

        async def async_seen(request: httpx.Request) -> None:
            async_paths.append(request.url.path)

        async with (
            httpx.AsyncClient(event_hooks={"request": [async_seen]}) as http,
            AsyncClient(server.base, server.admin, http_client=http) as client,
        ):
            # plan first: it reads the listing itself.
            (planned,) = (await client.plan(dataset_id, [item])).items
            assert planned.mechanism_info == (await client.mechanisms())["dirichlet"]
        return async_paths

    assert asyncio.run(scenario()).count("/v1/mechanisms") == 1


def test_release_kwargs_pass_exactly_each_listed_mechanisms_fields(client: Client) -> None:
    """Every field any mechanism lists is sent; each chosen mechanism gets its own, unchanged."""
    listing = client.mechanisms()
    every = sorted({f.name for m in listing for f in m.fields})
    sent: Dict[str, Any] = {"d": 2, "n": 10, "mechanism": "auto"}
    sent.update({name: float(i + 1) for i, name in enumerate(every)})
    forecast = {"l2": 0.1, "confidence": 0.95, "cell_sd": 0.05}
    for mechanism in listing:
        answer: Dict[str, Any] = {
            "status": "planned",
            "mechanism": mechanism.name,
            "cost": 0.25,
            "parameters": {},
            "forecast": forecast,
            "candidates": [],
        }
        if not mechanism.runs_given(sent):
            answer["epsilon"] = 0.25
        planned = dr.PlannedItem.from_json(answer, sent=sent, mechanisms=listing)
        kwargs = planned.release_kwargs()
        own = {k: v for k, v in kwargs.items() if k not in ("mechanism", "epsilon")}
        assert own == {f.name: sent[f.name] for f in mechanism.fields}, mechanism.name
        assert kwargs["mechanism"] == mechanism.name


def _value(field: dr.MechanismField) -> Any:
    """A value for a required field: its default, or 0.5 for a number and 1 for a number per cell.

    (A concentration below the prior, so that a fully given Dirichlet draw, such as
    ``explicit``'s r and α, has a guarantee at the ledger order 2.)
    """
    if field.default is not None:
        return field.default
    return 0.5 if field.type == "number" else 1.0


def test_every_listed_mechanism_is_planned_and_released_from_the_listing(
    client: Client, server: Server
) -> None:
    """One plan item per listed mechanism, built from its listing alone; each released as planned.

    A two-cell vector of 100 records is a shape every mechanism takes. Each item gives the
    mechanism's required fields, and an ε unless its fields fix it; the release gets whatever
    else the planner settled on (in `parameters`) of the mechanism's fields.
    """
    listing = client.mechanisms()
    dataset = client.create_dataset("every mechanism", epsilon=64.0, order=2).id
    items = []
    for mechanism in listing:
        fields = {f.name: _value(f) for f in mechanism.fields if f.required}
        epsilon = None if mechanism.runs_given(fields) else 0.5
        items.append(PlanItem(d=2, n=100, mechanism=mechanism.name, epsilon=epsilon, params=fields))
    plan = client.plan(dataset, items)
    assert plan.fits, plan
    released = []
    for item, planned in zip(items, plan.items):
        assert planned.mechanism == item.mechanism and planned.mechanism_info is not None
        kwargs = planned.release_kwargs()
        assert (
            set(item.params)
            <= set(kwargs)
            <= {"mechanism", "epsilon", *item.params} | set(planned.mechanism_info.field_names)
        )
        release = client.release(dataset, [60, 40], **kwargs)
        assert (release.mechanism.kind, release.cost.epsilon) == (planned.mechanism, planned.cost)
        released.append(f"{release.mechanism.kind} {release.cost.epsilon:.4f}")
    assert client.budget(dataset).spent == plan.total_cost
    record(
        f"[{server.backend}] every listed mechanism planned from its listing and released at "
        f"its planned cost: {', '.join(released)}"
    )


def test_a_kl_target_is_planned_and_released_as_planned(client: Client, server: Server) -> None:
    """Every mechanism listed with a ``kl`` target, and ``auto``, planned by KL and released.

    Each planned item's forecast bounds KL within the target at the confidence asked, and its
    release (through `release_kwargs`, which carries any field the planner chose, such as a
    smoothing pseudo-count) is charged the planned cost and runs with the planned parameters.
    """
    listing = client.mechanisms()
    answering = [m for m in listing if "kl" in m.targets]
    if not answering:
        pytest.skip("no mechanism the service lists answers a kl target")
    dataset = client.create_dataset("planned by KL", epsilon=64.0, order=2).id
    target = Target(kl=0.05, confidence=0.9)
    names = [*(m.name for m in answering), "auto"]
    items = [
        PlanItem(
            d=6,
            n=5000,
            mechanism=m.name,
            target=target,
            params={f.name: _value(f) for f in m.fields if f.required},
        )
        for m in answering
    ] + [PlanItem(d=6, n=5000, target=target)]
    plan = client.plan(dataset, items)
    counts = [2000, 1500, 800, 400, 200, 100]
    assert plan.items[-1].planned, "auto reaches the KL target"
    released = []
    for name, planned in zip(names, plan.items):
        if not planned.planned:
            continue
        assert planned.forecast is not None and planned.forecast.kl is not None, name
        assert planned.forecast.kl <= 0.05 and planned.forecast.confidence == 0.9, name
        kwargs = planned.release_kwargs()
        # What the planner settled on of the mechanism's own fields (a smoothing pseudo-count)
        # is sent; the noise a calibrated release draws from ε is not.
        info, parameters = planned.mechanism_info, planned.parameters
        assert info is not None and parameters is not None
        for key, value in parameters.items():
            if info.takes(key) and key != info.noise_field:
                assert kwargs[key] == value, (name, key)
        release = client.release(dataset, counts, **kwargs)
        assert (release.mechanism.kind, release.cost.epsilon) == (planned.mechanism, planned.cost)
        assert all(release.mechanism[k] == v for k, v in parameters.items()), name
        released.append(
            f"{name}→{planned.mechanism} ε {planned.epsilon} KL ≤ {planned.forecast.kl:.4f}"
        )
    record(
        f"[{server.backend}] planned by KL ≤ 0.05 (90 %), d = 6, n = 5000: {'; '.join(released)}"
    )
