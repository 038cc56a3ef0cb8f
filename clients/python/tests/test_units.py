"""What needs no server: counts conversion, problem mapping, models, parameters."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict

import httpx
import numpy as np
import pandas as pd
import pytest

import dirichlet_release as dr
from dirichlet_release._base import problem_error
from dirichlet_release._counts import prepare_counts, prepare_row_names
from dirichlet_release._exceptions import problem_class
from dirichlet_release._models import parse_time

REPO = Path(__file__).resolve().parents[3]


def test_counts_forms() -> None:
    assert prepare_counts([1, 2.5, 0])[:2] == ("counts", [1, 2.5, 0])
    assert prepare_counts((1, 2))[:2] == ("counts", [1, 2])
    assert prepare_counts(np.array([1, 2], dtype=np.int64))[:2] == ("counts", [1, 2])
    assert prepare_counts([[1, 2], [3, 4]])[:2] == ("table", [[1, 2], [3, 4]])
    assert prepare_counts(np.arange(6).reshape(2, 3))[:2] == ("table", [[0, 1, 2], [3, 4, 5]])
    member, value, shape = prepare_counts(pd.Series([3, 4], index=["a", "b"]))
    assert (member, value, list(shape.index)) == ("counts", [3, 4], ["a", "b"])
    frame = pd.DataFrame([[1, 2], [3, 4]], index=["x", "y"], columns=["a", "b"])
    member, value, shape = prepare_counts(frame)
    assert (member, value, list(shape.columns)) == ("table", [[1, 2], [3, 4]], ["a", "b"])
    # Whole numbers stay integers in the JSON (gaussian and laplace need integer counts).
    assert all(isinstance(v, int) for v in prepare_counts(np.array([1, 2]))[1])


@pytest.mark.parametrize(
    "bad",
    [[1, math.nan], [1, math.inf], np.array([1.0, np.nan]), pd.Series([1.0, None])],
)
def test_non_finite_counts_are_refused_without_quoting_them(bad: object) -> None:
    with pytest.raises(ValueError, match="finite") as caught:
        prepare_counts(bad)
    assert "nan" not in str(caught.value).lower().replace("nan or", "")


@pytest.mark.parametrize("bad", ["12", 5, {"a": 1}, [True, False], np.zeros((2, 2, 2))])
def test_other_shapes_are_refused(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        prepare_counts(bad)


def test_every_documented_problem_type_has_its_class() -> None:
    openapi = (REPO / "openapi.yaml").read_text()
    # One schema per problem type, its `type` a constant.
    types = set(re.findall(r"const: (/problems/[a-z-]+)", openapi))
    assert len(types) >= 20
    for problem in types:
        cls = problem_class(400, problem)
        assert cls is not dr.ProblemError, problem
    assert problem_class(409, "/problems/budget-exhausted") is dr.BudgetExhausted
    assert problem_class(422, "/problems/idempotency-key-reused") is dr.IdempotencyKeyReused
    assert problem_class(409, "/problems/output-quota-exceeded") is dr.OutputQuotaExceeded
    assert problem_class(500, "/problems/internal") is dr.InternalServerError
    assert problem_class(503, "/problems/timeout") is dr.ServiceUnavailable
    assert problem_class(404, None) is dr.NotFound
    assert problem_class(418, None) is dr.ProblemError
    assert problem_class(502, None) is dr.ServerError


def test_a_bare_error_page_is_still_a_problem_error() -> None:
    response = httpx.Response(
        502, text="<html>bad gateway</html>", headers={"content-type": "text/html"}
    )
    error = problem_error(response, None)
    assert type(error) is dr.ServerError and error.status == 502
    assert error.type == "about:blank" and "bad gateway" in error.detail


def test_times_with_nanoseconds_and_z() -> None:
    t = parse_time("2026-11-25T06:59:20.123456789Z")
    assert (t.microsecond, t.utcoffset()) == (123456, pd.Timedelta(0))
    assert parse_time("2026-11-25T06:59:20+02:00").utcoffset() is not None


def test_client_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        dr.Client("", "token-of-some-length")
    with pytest.raises(ValueError):
        dr.Client("http://127.0.0.1:1", "")
    with pytest.raises(ValueError):
        dr.Client("http://127.0.0.1:1", "t" * 20, retries=-1)
    with dr.Client("http://127.0.0.1:1/", "t" * 20) as client:
        assert client.base_url == "http://127.0.0.1:1"
        with pytest.raises(TypeError):
            client.create_token("one-id-not-a-list")


def test_every_public_name_has_a_docstring() -> None:
    # ruff's pydocstyle rules skip the members of _private modules, where the code lives.
    import inspect

    missing = []
    for name in dr.__all__:
        obj = getattr(dr, name)
        if name == "__version__":
            continue
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if member.startswith("_"):
                    continue
                if isinstance(value, (classmethod, staticmethod)):
                    value = value.__func__
                if (callable(value) or isinstance(value, property)) and not value.__doc__:
                    missing.append(f"{name}.{member}")
    assert missing == []


CELLS = ["flu", "asthma", "measles", "scurvy"]


def test_pandas_input_is_aligned_to_the_cells_by_name() -> None:
    series = pd.Series([3, 1, 4, 1], index=pd.Index(["scurvy", "flu", "measles", "asthma"]))
    member, value, shape = prepare_counts(series, CELLS)
    assert (member, value, list(shape.index)) == ("counts", [1, 1, 4, 3], CELLS)
    # Without cells (the dataset has none) the input's order is sent as it is.
    assert prepare_counts(series)[1] == [3, 1, 4, 1]
    frame = pd.DataFrame(
        [[1, 2, 3, 4], [5, 6, 7, 8]],
        index=pd.Index(["x", "y"], name="group"),
        columns=pd.Index(["asthma", "scurvy", "flu", "measles"], name="dx"),
    )
    member, value, shape = prepare_counts(frame, CELLS)
    assert (member, value) == ("table", [[3, 1, 4, 2], [7, 5, 8, 6]])
    assert list(shape.columns) == CELLS and shape.columns.name == "dx"
    assert list(shape.index) == ["x", "y"]
    # Lists and arrays are positional: there are no names to align.
    assert prepare_counts([3, 1, 4, 1], CELLS)[1] == [3, 1, 4, 1]


@pytest.mark.parametrize(
    ("labels", "missing", "extra"),
    [
        (["flu", "asthma", "measles"], ["scurvy"], []),
        (["flu", "asthma", "measles", "scurvy", "other"], [], ["other"]),
        (["flu", "asthma", "measles", "Scurvy"], ["scurvy"], ["Scurvy"]),
    ],
)
def test_a_mismatch_keeps_the_names_out_of_the_message(
    labels: list[str], missing: list[str], extra: list[str]
) -> None:
    counts = pd.Series([1234567] * len(labels), index=labels)
    with pytest.raises(dr.CellsMismatch) as caught:
        prepare_counts(counts, CELLS)
    assert (caught.value.missing, caught.value.extra) == (missing, extra)
    message = str(caught.value)
    assert not any(name in message for name in missing + extra)
    assert "1234567" not in message
    assert ("cells are missing" in message) == bool(missing)
    assert ("not among" in message) == bool(extra)
    with pytest.raises(dr.CellsMismatch):
        prepare_counts(pd.DataFrame([counts.tolist()], columns=labels), CELLS)


def test_labels_are_aligned_in_the_form_names_are_stored_in() -> None:
    # The service stores cell names trimmed and in NFC: labels they were registered from match.
    cells = ["café", "flu"]
    series = pd.Series([3, 1], index=[" flu", "cafe\u0301"])
    member, value, shape = prepare_counts(series, cells)
    assert (member, value, list(shape.index)) == ("counts", [1, 3], cells)
    with pytest.raises(ValueError, match="repeats"):
        prepare_counts(pd.Series([1, 2], index=["caf\u00e9", "cafe\u0301"]), cells)


def test_labels_that_cannot_be_aligned() -> None:
    with pytest.raises(ValueError, match="repeats"):
        prepare_counts(pd.Series([1, 2, 3, 4], index=["flu", "flu", "measles", "scurvy"]), CELLS)
    with pytest.raises(TypeError, match="strings"):
        prepare_counts(pd.Series([1, 2, 3, 4]), CELLS)
    with pytest.raises(TypeError, match="strings"):
        prepare_counts(pd.DataFrame([[1, 2, 3, 4]]), CELLS)


def test_row_names_are_sent_only_when_asked() -> None:
    frame = pd.DataFrame([[1, 2], [3, 4]], index=pd.Index(["0-17", "18+"], name="age"))
    assert prepare_row_names(None, frame) is None
    assert prepare_row_names(False, frame) is None
    assert prepare_row_names(True, frame) == ["0-17", "18+"]
    assert prepare_row_names(["a", "b"], [[1, 2], [3, 4]]) == ["a", "b"]
    assert prepare_row_names(pd.Index(["a", "b"]), frame) == ["a", "b"]
    with pytest.raises(TypeError, match="DataFrame"):
        prepare_row_names(True, [[1, 2], [3, 4]])
    with pytest.raises(TypeError, match="strings"):
        prepare_row_names(True, pd.DataFrame([[1, 2], [3, 4]]))  # a RangeIndex
    with pytest.raises(TypeError, match="one string"):
        prepare_row_names("ab", frame)


def test_allocations_parse_with_their_times() -> None:
    doc: Dict[str, Any] = {
        "order": 2.0,
        "allocations": [{"token_id": "t1", "epsilon": 0.5, "spent": 0.125, "remaining": 0.375}],
        "changes": [
            {
                "token_id": "t1",
                "changed_at": "2026-11-25T06:59:20.123456789Z",
                "changed_by": "admin",
                "old_epsilon": None,
                "new_epsilon": 0.5,
            },
            {
                "token_id": "t2",
                "changed_at": "2026-11-25T07:00:00Z",
                "changed_by": "admin",
                "old_epsilon": 0.25,
                "new_epsilon": None,
            },
        ],
    }
    listed = dr.Allocations.from_json(doc)
    assert listed.order == 2.0
    assert listed.allocations == [dr.Allocation("t1", 0.5, 0.125, 0.375)]
    set_, removed = listed.changes
    assert (set_.old_epsilon, set_.new_epsilon, removed.old_epsilon, removed.new_epsilon) == (
        None,
        0.5,
        0.25,
        None,
    )
    assert set_.changed_at == datetime(2026, 11, 25, 6, 59, 20, 123456, tzinfo=timezone.utc)
    assert removed.changed_at.tzinfo is not None and removed.changed_by == "admin"
    with pytest.raises(dr.BadResponse):
        dr.Allocations.from_json({"order": 2.0, "allocations": [{"token_id": "t1"}], "changes": []})
    budget = dr.Budget.from_json(
        {"order": 2, "total": 1, "spent": 0.125, "remaining": 0.875, "releases": 1}
        | {"allocation": doc["allocations"][0]}
    )
    assert budget.allocation == listed.allocations[0]


def test_allocation_exhausted_from_its_problem_document() -> None:
    body = {
        "type": "/problems/allocation-exhausted",
        "title": "Allocation exhausted",
        "status": 409,
        "detail": "the release would exceed this token's allocation on the dataset",
        "allocation": {"token_id": "t1", "epsilon": 0.5, "spent": 0.5, "remaining": 0.0},
        "budget": {"order": 2, "total": 1, "spent": 0.5, "remaining": 0.5, "releases": 1},
    }
    response = httpx.Response(409, json=body, headers={"content-type": "application/problem+json"})
    error = problem_error(response, "key-1")
    assert type(error) is dr.AllocationExhausted and isinstance(error, dr.BudgetExhausted)
    assert problem_class(409, "/problems/allocation-exhausted") is dr.AllocationExhausted
    assert error.allocation == dr.Allocation("t1", 0.5, 0.5, 0.0)
    assert error.remaining == 0.0  # the allocation's, not the dataset's 0.5
    assert error.budget is not None and error.budget.remaining == 0.5
    assert error.idempotency_key == "key-1"


def test_population_budget_exhausted_from_its_problem_document() -> None:
    body = {
        "type": "/problems/population-budget-exhausted",
        "title": "Population budget exhausted",
        "status": 409,
        "detail": "the release would exceed the budget of population p1",
        "population": "p1",
        "budget": {"order": 2, "total": 1, "spent": 0.875, "remaining": 0.125},
    }
    response = httpx.Response(409, json=body, headers={"content-type": "application/problem+json"})
    error = problem_error(response, None)
    assert type(error) is dr.PopulationBudgetExhausted and isinstance(error, dr.BudgetExhausted)
    assert error.population == "p1"
    assert error.population_budget == dr.PopulationBudget(2.0, 1.0, 0.875, 0.125)
    assert error.remaining == 0.125 and error.budget is None


def test_external_records_and_budget_paths_are_read() -> None:
    record: Dict[str, Any] = {
        "kind": "external",
        "id": "r1",
        "dataset_id": "d1",
        "seq": 3,
        "created_at": "2026-11-28T07:00:00Z",
        "created_by": "admin",
        "label": "dp-sgd",
        "mechanism": {
            "mechanism": "composed",
            "events": [{"mechanism": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "count": 5}],
            "kind": "external",
        },
        "cost": {"order": 2.0, "epsilon": 1.25},
    }
    listed = dr.Release.from_json(record)
    assert listed.kind == "external" and listed.mechanism.kind == "composed"
    assert listed.mechanism["events"][0]["count"] == 5 and listed.distribution is None
    charge = dr.Charge.from_json(record, idempotency_key="k")
    assert (charge.dataset_id, charge.seq, charge.kind) == ("d1", 3, "external")
    assert charge.mechanism == {k: v for k, v in record["mechanism"].items() if k != "kind"}
    node = {"kind": "dataset", "id": "d1", "name": "d", "total": 1, "spent": 0.5}
    budget = dr.Budget.from_json(
        {"order": 2, "total": 1, "spent": 0.5, "remaining": 0.5, "releases": 1, "binding": "p1"}
        | {
            "path": [
                node | {"remaining": 0.5, "binding": False},
                node | {"kind": "population", "id": "p1", "remaining": 0.25, "binding": True},
            ]
        }
    )
    assert budget.path is not None and [n.kind for n in budget.path] == ["dataset", "population"]
    assert budget.binding == "p1" and budget.path[1].binding
    with pytest.raises(dr.BadResponse):
        dr.PathNode.from_json(node | {"remaining": 0.5, "binding": "yes"})


def _planned_doc() -> Dict[str, Any]:
    forecast = {"l2": 0.02, "confidence": 0.95, "cell_sd": 0.01}
    return {
        "order": 2.0,
        "items": [
            {
                "status": "planned",
                "mechanism": "dirichlet",
                "epsilon": 0.125,
                "cost": 0.125,
                "parameters": {"r": 0.5, "alpha": 3.0},
                "forecast": forecast,
                "candidates": [
                    {"mechanism": "dirichlet", "status": "chosen", "estimated_cost": 0.125},
                    {"mechanism": "exponential", "status": "not_applicable", "reason": "d = 2"},
                ],
            },
            {
                "status": "unreachable",
                "mechanism": "gaussian",
                "shortfall": {"max_epsilon": 8192.0, "best": forecast, "min_n": 12.0},
                "candidates": [],
            },
        ],
        "total_cost": 0.125,
        "remaining": 1.0,
        "fits": False,
        "unreachable": 1,
    }


def test_plan_answers_are_read_strictly() -> None:
    plan = dr.Plan.from_json(_planned_doc())
    planned, short = plan.items
    assert planned.parameters == dr.PlanParameters({"r": 0.5, "alpha": 3.0})
    assert planned.parameters == {"r": 0.5, "alpha": 3.0}
    assert planned.parameters is not None and planned.parameters["alpha"] == 3.0
    assert planned.candidates[1] == dr.PlanCandidate(
        "exponential", "not_applicable", reason="d = 2"
    )
    assert short.shortfall == dr.Shortfall(8192.0, dr.AccuracyForecast(0.02, 0.95, 0.01), 12.0)

    def broken(change: Any) -> Dict[str, Any]:
        doc = _planned_doc()
        change(doc)
        return doc

    for bad in [
        broken(lambda d: d.pop("fits")),
        broken(lambda d: d.update(fits="yes")),
        broken(lambda d: d.update(unreachable=1.0)),
        broken(lambda d: d.update(remaining=None)),
        broken(lambda d: d.update(items={})),
        broken(lambda d: d["items"][0].update(status="maybe")),
        broken(lambda d: d["items"][0].pop("cost")),
        broken(lambda d: d["items"][0].pop("parameters")),
        broken(lambda d: d["items"][0].update(cost=True)),
        broken(lambda d: d["items"][0].update(cost="0.125")),
        broken(lambda d: d["items"][0]["parameters"].update(alpha=["1"])),
        broken(lambda d: d["items"][0]["forecast"].pop("cell_sd")),
        broken(lambda d: d["items"][0]["candidates"][0].pop("mechanism")),
        broken(lambda d: d["items"][0]["candidates"][0].update(status="best")),
        broken(lambda d: d["items"][1]["shortfall"].pop("best")),
        broken(lambda d: d["items"][1].pop("candidates")),
    ]:
        with pytest.raises(dr.BadResponse):
            dr.Plan.from_json(bad)
    with pytest.raises(dr.BadResponse, match="2 items for 1 sent"):
        dr.Plan.from_json(_planned_doc(), sent=[{"d": 2}])
    # Whether a planned item may lack an ε is the listing's to say (see
    # test_a_planned_item_needs_an_epsilon_unless_its_mechanism_runs_as_given); read without
    # it, the item is taken as it comes.
    explicit = broken(lambda d: d["items"][0].update(mechanism="explicit"))
    explicit["items"][0].pop("epsilon")
    assert dr.Plan.from_json(explicit).items[0].epsilon is None


def test_plan_items_as_sent() -> None:
    item = dr.PlanItem(
        d=np.int64(40),  # type: ignore[arg-type]
        n_lower_bound=5000,
        target=dr.Target(l2=0.02, confidence=np.float64(0.9)),
        alpha=pd.Series([1, 2]),
    )
    doc = item.to_json()
    assert doc == {
        "d": 40,
        "mechanism": "auto",
        "n_lower_bound": 5000,
        "alpha": [1, 2],
        "target": {"l2": 0.02, "confidence": 0.9},
    }
    assert type(doc["d"]) is int
    assert json.loads(json.dumps(doc)) == doc
    table = dr.PlanItem(d=6, rows=3, n=50, mechanism="dirichlet", epsilon=0.1, prior=0.5)
    assert table.to_json() == {
        "d": 6,
        "rows": 3,
        "n": 50,
        "mechanism": "dirichlet",
        "epsilon": 0.1,
        "prior": 0.5,
    }
    assert dr.PlanItem(d=2, n=3, mechanism="explicit", r=1.0, alpha=1.0).to_json() == {
        "d": 2,
        "mechanism": "explicit",
        "n": 3,
        "r": 1.0,
        "alpha": 1.0,
    }


# A listing of made-up mechanisms, none of them the service's: what the client does with a plan
# must follow whatever the service lists, with no table of its own.
def _field(name: str, **extra: Any) -> Dict[str, Any]:
    return {
        "name": name,
        "type": "number",
        "required": False,
        "description": name,
        "plan": True,
    } | extra


def _mechanism(name: str, epsilon: str, fields: Any, **extra: Any) -> Dict[str, Any]:
    return {
        "name": name,
        "summary": f"the {name} mechanism",
        "default": False,
        "epsilon": epsilon,
        "order": True,
        "fields": fields,
        "tables": True,
        "lower_bound": False,
        "targets": ["l2", "kl"],
        "auto": True,
        "forecast": None,
    } | extra


def _listing() -> Dict[str, Any]:
    return {
        "mechanisms": [
            _mechanism(
                "staircase",
                "target",
                [_field("step", default=2.0), _field("prior", type="number_or_numbers")],
                default=True,
                forecast="staircase",
            ),
            _mechanism(
                "blur",
                "target_or_cap",
                [_field("spread"), _field("smoothing", default=0.0)],
                noise_field="spread",
            ),
            _mechanism(
                "fixed",
                "cap",
                [_field("weights", type="number_or_numbers", required=True)],
                order=False,
                tables=False,
                targets=[],
                auto=False,
            ),
        ]
    }


def test_the_mechanism_listing_is_read_strictly() -> None:
    listing = dr.Mechanisms.from_json(_listing())
    assert listing.names == ["staircase", "blur", "fixed"] and len(listing) == 3
    assert listing.default.name == "staircase" and "blur" in listing and "dirichlet" not in listing
    staircase = listing["staircase"]
    assert staircase.fields[0] == dr.MechanismField("step", "number", False, "step", 2.0)
    assert staircase.field_names == ["step", "prior"] and staircase.forecast == "staircase"
    assert listing["blur"].noise_field == "spread" and listing["blur"].targets == ["l2", "kl"]
    assert listing.get("laplace") is None
    with pytest.raises(KeyError):
        listing["laplace"]
    assert [m.name for m in listing] == listing.names

    def broken(change: Any) -> Dict[str, Any]:
        doc = _listing()
        change(doc)
        return doc

    for bad in [
        {},
        broken(lambda d: d.update(mechanisms={})),
        broken(lambda d: d["mechanisms"][0].update(default=False)),
        broken(lambda d: d["mechanisms"][1].update(default=True)),
        broken(lambda d: d["mechanisms"].append(d["mechanisms"][0])),
        broken(lambda d: d["mechanisms"][0].update(epsilon="approximate")),
        broken(lambda d: d["mechanisms"][0].update(tables="yes")),
        broken(lambda d: d["mechanisms"][0].update(targets="l2")),
        broken(lambda d: d["mechanisms"][0].pop("fields")),
        broken(lambda d: d["mechanisms"][0]["fields"].append(_field("step"))),
        broken(lambda d: d["mechanisms"][0]["fields"][0].update(default="2")),
        broken(lambda d: d["mechanisms"][0]["fields"][0].pop("required")),
        broken(lambda d: d["mechanisms"][0]["fields"][0].pop("plan")),
        broken(lambda d: d["mechanisms"][0]["fields"][0].update(plan=1)),
        broken(lambda d: d["mechanisms"][1].pop("noise_field")),
        broken(lambda d: d["mechanisms"][1].update(noise_field="width")),
        broken(lambda d: d["mechanisms"][0].update(noise_field="step")),
    ]:
        with pytest.raises(dr.BadResponse):
            dr.Mechanisms.from_json(bad)


def _planned_as(
    mechanism: str, sent: Dict[str, Any], parameters: Dict[str, Any], epsilon: Any = 0.125
) -> dr.PlannedItem:
    doc = _planned_doc()["items"][0] | {"mechanism": mechanism, "parameters": parameters}
    if epsilon is None:
        doc.pop("epsilon")
    sent = {"d": 2, "n": 10, "mechanism": "auto"} | sent
    return dr.PlannedItem.from_json(doc, sent=sent, mechanisms=dr.Mechanisms.from_json(_listing()))


SENT = {"step": 3.0, "prior": [1, 2], "spread": 4.0, "smoothing": 0.5, "weights": [1.0, 1.0]}


@pytest.mark.parametrize(
    ("mechanism", "sent", "parameters", "epsilon", "expected"),
    [
        # The fields sent that the listing gives the chosen mechanism, and no other.
        ("staircase", SENT, {"width": 7.0}, 0.125, {"step": 3.0, "prior": [1, 2]}),
        ("staircase", {"prior": 0.5, "weights": 1.0}, {}, 0.125, {"prior": 0.5}),
        # A field the planner chose (not sent) comes from the parameters; the noise field does
        # not when the release is calibrated to ε, which draws it again.
        ("blur", {}, {"spread": 9.0, "smoothing": 0.25}, 0.125, {"smoothing": 0.25}),
        ("blur", {"smoothing": 0.5}, {"spread": 9.0, "smoothing": 0.5}, 0.125, {"smoothing": 0.5}),
        # Given its noise field, it runs as given: no ε, the noise field sent.
        (
            "blur",
            {"spread": 4.0},
            {"spread": 4.0, "smoothing": 0.0},
            None,
            {"spread": 4.0, "smoothing": 0.0},
        ),
        ("fixed", SENT, {"weights": [1.0, 1.0]}, None, {"weights": [1.0, 1.0]}),
    ],
)
def test_release_kwargs_follow_the_listing(
    mechanism: str,
    sent: Dict[str, Any],
    parameters: Dict[str, Any],
    epsilon: Any,
    expected: Dict[str, Any],
) -> None:
    item = _planned_as(mechanism, sent, parameters, epsilon)
    assert item.mechanism_info is not None and item.mechanism_info.name == mechanism
    kwargs = {"mechanism": mechanism} | ({} if epsilon is None else {"epsilon": epsilon})
    assert item.release_kwargs() == kwargs | expected


def test_a_planned_item_needs_an_epsilon_unless_its_mechanism_runs_as_given() -> None:
    with pytest.raises(dr.BadResponse, match="epsilon"):
        _planned_as("staircase", {}, {}, epsilon=None)
    with pytest.raises(dr.BadResponse, match="epsilon"):
        _planned_as("blur", {"smoothing": 1.0}, {}, epsilon=None)
    assert _planned_as("blur", {"spread": 1.0}, {}, epsilon=None).epsilon is None
    assert _planned_as("fixed", {}, {}, epsilon=None).epsilon is None
    # A mechanism the listing does not have.
    with pytest.raises(dr.BadResponse, match="does not list"):
        _planned_as("dirichlet", {}, {})
    # Read without the listing: nothing to tell which fields are the mechanism's.
    doc = _planned_doc()["items"][0]
    item = dr.PlannedItem.from_json(doc, sent={"d": 2, "n": 10, "r": 1.0})
    with pytest.raises(ValueError, match="list of mechanisms"):
        item.release_kwargs()


def test_kl_targets_and_forecasts() -> None:
    assert dr.Target(kl=0.05, confidence=0.9).to_json() == {"kl": 0.05, "confidence": 0.9}
    assert dr.Target(l2=0.1, kl=np.float64(0.5)).to_json() == {"l2": 0.1, "kl": 0.5}
    forecast = {"l2": 0.02, "confidence": 0.95, "cell_sd": 0.01}
    assert dr.AccuracyForecast.from_json(forecast).kl is None
    assert dr.AccuracyForecast.from_json(forecast | {"kl": 0.03}).kl == 0.03
    with pytest.raises(dr.BadResponse):
        dr.AccuracyForecast.from_json(forecast | {"kl": "0.03"})


def test_plan_items_carry_any_field_in_params() -> None:
    item = dr.PlanItem(
        d=4, n=10, mechanism="gaussian", epsilon=0.5, params={"smoothing": np.float64(0.5)}
    )
    assert item.to_json() == {
        "d": 4,
        "n": 10,
        "mechanism": "gaussian",
        "epsilon": 0.5,
        "smoothing": 0.5,
    }
    both = dr.PlanItem(d=4, n=10, prior=1.0, params={"prior_shape": pd.Series([1, 2])})
    assert both.to_json()["prior_shape"] == [1, 2] and both.to_json()["prior"] == 1.0
    with pytest.raises(ValueError, match="twice"):
        dr.PlanItem(d=4, n=10, r=1.0, params={"r": 2.0}).to_json()
    with pytest.raises(ValueError, match="member of the plan item"):
        dr.PlanItem(d=4, n=10, params={"epsilon": 2.0}).to_json()
