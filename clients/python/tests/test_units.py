"""What needs no server: counts conversion, problem mapping, models, parameters."""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

import dirichlet_release as dr
from dirichlet_release._base import problem_error
from dirichlet_release._counts import prepare_counts
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
