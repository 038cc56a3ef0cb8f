"""The README walkthrough (steps 1-8) through a client generated from openapi.yaml.

scripts/ci/openapi-client.sh generates the package `dirichlet_release_client` with
openapi-python-client, puts it on PYTHONPATH and runs this against a live server (BASE, ADMIN).
Every call goes through the generated functions and every answer is checked as the generated
model it was parsed into, never as raw JSON: a response the description does not declare, or one
the generator could not type, fails here.
"""

import os
import sys
from typing import Any, TypeVar

from dirichlet_release_client import AuthenticatedClient
from dirichlet_release_client.api.allocations import (
    list_allocations,
    set_allocation,
)
from dirichlet_release_client.api.datasets import (
    create_dataset,
    get_budget,
    get_dataset,
)
from dirichlet_release_client.api.releases import create_release, preview_release
from dirichlet_release_client.api.tokens import create_token, whoami
from dirichlet_release_client.models import (
    Allocation,
    AllocationExhaustedProblem,
    AllocationList,
    AllocationSet,
    Budget,
    BudgetExhaustedProblem,
    Dataset,
    DatasetCreate,
    DirichletMechanism,
    DirichletRequest,
    Forecast,
    Preview,
    RdpBudgetRequest,
    RdpBudgetSpec,
    Release,
    TokenCreate,
    TokenCreated,
    WhoAmI,
    WhoAmIRole,
)
from dirichlet_release_client.types import Response, Unset

T = TypeVar("T")


def parsed(response: Response[Any], status: int, model: type[T]) -> T:
    """The response's parsed body, which must be `model` with the given status."""
    assert response.status_code == status, (response.status_code, response.content)
    assert isinstance(response.parsed, model), (model, response.parsed)
    return response.parsed


def step(text: str) -> None:
    print(f"\n# {text}")


def main() -> int:
    base, admin_token = os.environ["BASE"], os.environ["ADMIN"]
    # Any status the description does not declare raises.
    admin = AuthenticatedClient(
        base_url=base, token=admin_token, raise_on_unexpected_status=True
    )
    counts = [120.0, 45, 3, 0, 17, 9]

    step(
        "1. Register a dataset: ε = 1 of Rényi-DP at order λ₀ = 2, replace_one, named cells."
    )
    cells = ["flu", "asthma", "measles", "scurvy", "sprain", "other"]
    registration = DatasetCreate(
        name="visits per diagnosis",
        budget=RdpBudgetRequest(order=2, epsilon=1.0),
        cells=cells,
    )
    created = create_dataset.sync_detailed(client=admin, body=registration)
    dataset = parsed(created, 201, Dataset)
    assert created.headers["location"] == f"/v1/datasets/{dataset.id}"
    assert isinstance(dataset.budget, RdpBudgetSpec) and dataset.budget.epsilon == 1.0
    assert dataset.cells == cells
    print(
        f"dataset {dataset.id} ({dataset.name}, {dataset.neighbouring}), cells {cells}"
    )

    step("2. Preview a release at ε = 0.4: nothing is sampled, nothing is spent.")
    request = DirichletRequest(counts=counts, epsilon=0.4)
    preview = parsed(
        preview_release.sync_detailed(dataset.id, client=admin, body=request),
        200,
        Preview,
    )
    assert isinstance(preview.mechanism, DirichletMechanism)
    assert preview.admissible and isinstance(preview.forecast, Forecast)
    print(
        f"mechanism {preview.mechanism.kind} r = {preview.mechanism.r:.4g}, "
        f"cost {preview.cost.epsilon:.4g} at order {preview.cost.order}, "
        f"admissible {preview.admissible}, l2_bound {preview.forecast.l2_bound:.3f} "
        f"(confidence {preview.forecast.l2_bound_confidence})"
    )

    step(
        "3. Release it with an Idempotency-Key, then retry: the same release, no new charge."
    )
    first = create_release.sync_detailed(
        dataset.id, client=admin, body=request, idempotency_key="visits-2026-11"
    )
    release = parsed(first, 201, Release)
    assert "idempotent-replayed" not in first.headers
    assert isinstance(release.distribution, list) and len(release.distribution) == len(
        counts
    )
    assert release.cells == cells
    retry = create_release.sync_detailed(
        dataset.id, client=admin, body=request, idempotency_key="visits-2026-11"
    )
    replayed = parsed(retry, 201, Release)
    assert retry.headers["idempotent-replayed"] == "true"
    assert (replayed.id, replayed.seq, replayed.distribution) == (
        release.id,
        release.seq,
        release.distribution,
    )
    assert replayed.budget.releases == 1
    print(
        f"release {release.id} seq {release.seq}: {[round(p, 3) for p in release.distribution]}"
    )
    print(
        f"retry: release {replayed.id}, Idempotent-Replayed: {retry.headers['idempotent-replayed']}"
    )

    step("4. What is left?")
    budget = parsed(get_budget.sync_detailed(dataset.id, client=admin), 200, Budget)
    assert budget.releases == 1 and budget.spent == release.cost.epsilon
    print(f"spent {budget.spent:.4g} of {budget.total}, {budget.remaining:.4g} remains")

    step("5. A second release of 0.4 fits; a third is refused: 409 budget-exhausted.")
    again = DirichletRequest(counts=[118.0, 47, 3, 1, 17, 9], epsilon=0.4)
    second = parsed(
        create_release.sync_detailed(dataset.id, client=admin, body=again), 201, Release
    )
    refusal = parsed(
        create_release.sync_detailed(dataset.id, client=admin, body=again),
        409,
        BudgetExhaustedProblem,
    )
    assert refusal.type_ == "/problems/budget-exhausted" and refusal.status == 409
    assert refusal.budget.releases == 2 and refusal.budget.spent == second.budget.spent
    print(f"second release seq {second.seq}; third: {refusal.status} {refusal.type_}")
    print(f"  {refusal.detail} (ledger: {refusal.budget.releases} releases)")

    step("6. An analyst token for this dataset only, and the analyst using it.")
    token = parsed(
        create_token.sync_detailed(
            client=admin, body=TokenCreate(datasets=[dataset.id])
        ),
        201,
        TokenCreated,
    )
    assert token.datasets == [dataset.id] and token.role == "analyst"
    analyst = AuthenticatedClient(
        base_url=base, token=token.token, raise_on_unexpected_status=True
    )
    me = parsed(whoami.sync_detailed(client=analyst), 200, WhoAmI)
    assert me.role == WhoAmIRole.ANALYST and me.token_id == token.id
    assert not isinstance(me.datasets, Unset) and me.datasets == [dataset.id]
    seen = parsed(get_dataset.sync_detailed(dataset.id, client=analyst), 200, Dataset)
    assert seen.id == dataset.id and seen.releases == 2
    print(f"token {token.id} for {[str(d) for d in token.datasets]}: whoami {me.role}")
    print(
        f"the analyst reads {seen.name}: {seen.releases} releases, spent {seen.spent:.4g}"
    )

    step(
        "7. A table of disjoint groups: one charge, the price of a single 6-cell vector."
    )
    tables = parsed(
        create_dataset.sync_detailed(
            client=admin,
            body=DatasetCreate(
                name="visits per diagnosis by age band",
                budget=RdpBudgetRequest(order=2, epsilon=1.0),
            ),
        ),
        201,
        Dataset,
    )
    rows = [
        [40.0, 12, 1, 0, 5, 2],
        [55.0, 20, 1, 0, 8, 4],
        [25.0, 13, 1, 1, 4, 3],
    ]
    table = parsed(
        create_release.sync_detailed(
            tables.id,
            client=admin,
            body=DirichletRequest(
                table=rows,
                epsilon=0.5,
                label="diagnosis | by age band",
                row_names=["0-17", "18-64", "65+"],
            ),
            idempotency_key="visits-by-age-2026-11",
        ),
        201,
        Release,
    )
    assert not isinstance(table.distributions, Unset) and len(table.distributions) == 3
    assert isinstance(table.distribution, Unset)
    assert table.label == "diagnosis | by age band" and table.budget.releases == 1
    assert table.row_names == ["0-17", "18-64", "65+"]
    print(f"table release {table.id} ({table.label}): {len(table.distributions)} rows,")
    print(f"  cost {table.cost.epsilon:.4g}, releases charged {table.budget.releases}")

    step(
        "8. An analyst's allocation of 0.3: a release of 0.4 is refused by it, 0.25 fits."
    )
    member = parsed(
        create_token.sync_detailed(
            client=admin, body=TokenCreate(datasets=[tables.id])
        ),
        201,
        TokenCreated,
    )
    allocation = parsed(
        set_allocation.sync_detailed(
            tables.id, member.id, client=admin, body=AllocationSet(epsilon=0.3)
        ),
        200,
        Allocation,
    )
    assert allocation.token_id == member.id and allocation.spent == 0
    team = AuthenticatedClient(
        base_url=base, token=member.token, raise_on_unexpected_status=True
    )
    vector = [40.0, 12, 1, 0, 5, 2]
    over = parsed(
        create_release.sync_detailed(
            tables.id, client=team, body=DirichletRequest(counts=vector, epsilon=0.4)
        ),
        409,
        AllocationExhaustedProblem,
    )
    assert over.type_ == "/problems/allocation-exhausted"
    assert over.allocation.remaining == allocation.remaining
    fits = parsed(
        create_release.sync_detailed(
            tables.id, client=team, body=DirichletRequest(counts=vector, epsilon=0.25)
        ),
        201,
        Release,
    )
    mine = parsed(get_budget.sync_detailed(tables.id, client=team), 200, Budget)
    assert not isinstance(mine.allocation, Unset)
    assert mine.allocation.spent == fits.cost.epsilon
    trail = parsed(
        list_allocations.sync_detailed(tables.id, client=admin), 200, AllocationList
    )
    assert [c.token_id for c in trail.changes] == [member.id]
    print(f"allocation of {member.id}: ε {allocation.epsilon:.4g}")
    print(f"  0.4 refused: {over.status} {over.type_}")
    print(
        f"  0.25 released; spent {mine.allocation.spent:.4g}, "
        f"{mine.allocation.remaining:.4g} left"
    )
    print("\nwalkthrough through the generated client: all steps passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
