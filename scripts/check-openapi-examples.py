#!/usr/bin/env python3
"""Checks that openapi.yaml's schemas mean what the API design says.

openapi-spec-validator only checks that the document is well-formed OpenAPI 3.1. This script feeds
hand-written bodies, valid and invalid, to the request and response schemas (JSON Schema 2020-12,
with format checking) and fails if a valid one is refused or an invalid one accepted: e.g. a
parameter that does not belong to a mechanism, a missing `epsilon`, both `sensitivity` and
`neighbouring`, a problem whose `type` does not match its status. It also checks that every
operation declares the error responses its route can return.

Usage: python3 scripts/check-openapi-examples.py [openapi.yaml]   (needs PyYAML, jsonschema,
rfc3339-validator, rfc3986-validator; scripts/validate-openapi.sh installs them).
"""

import copy
import sys

import yaml
from jsonschema import Draft202012Validator, FormatChecker

SPEC_PATH = sys.argv[1] if len(sys.argv) > 1 else "openapi.yaml"
with open(SPEC_PATH, encoding="utf-8") as f:
    SPEC = yaml.safe_load(f)

FORMATS = FormatChecker()
for needed in ("uuid", "date-time", "uri-reference"):
    if needed not in FORMATS.checkers:
        sys.exit(f"jsonschema cannot check format {needed!r}: install rfc3339-validator and rfc3986-validator")

failures = []


def validator(pointer):
    """A validator for the schema at `pointer` ('#/components/...'), refs resolved in the document."""
    root = copy.deepcopy(SPEC)
    root["$ref"] = pointer
    return Draft202012Validator(root, format_checker=FORMATS)


def check(pointer, instance, valid, why):
    errors = list(validator(pointer).iter_errors(instance))
    if valid and errors:
        failures.append(f"{pointer}: refused a valid body ({why}): {errors[0].message}")
    if not valid and not errors:
        failures.append(f"{pointer}: accepted an invalid body ({why})")


def response_schema(name):
    return f"#/components/responses/{name}/content/application~1problem+json/schema"


S = "#/components/schemas/"
UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
UUID2 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
NOW = "2025-01-02T03:04:05.678Z"

# ------------------------------------------------------------------ ReleaseRequest
good_releases = [
    ({"counts": [1, 2], "epsilon": 1}, "dirichlet by default"),
    ({"counts": [0, 0, 5.5], "epsilon": 0.5, "order": 2, "mechanism": "dirichlet", "prior": 2}, "dirichlet, all fields"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior"}, "posterior, r defaults"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "r": 0.5, "order": 4}, "posterior with r"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [10, 10]}, "diffuse, per-cell alpha"),
    ({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 5}, "explicit"),
    ({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": [5, 6], "epsilon": 3}, "explicit with a cap"),
    ({"counts": [1, 2], "mechanism": "gaussian", "sigma": 3}, "gaussian sigma"),
    ({"counts": [1, 2], "mechanism": "gaussian", "epsilon": 1}, "gaussian calibrated"),
    ({"counts": [1, 2], "mechanism": "gaussian", "epsilon": 1, "order": 8}, "gaussian calibrated at an order"),
    ({"counts": [1, 2], "mechanism": "gaussian", "sigma": 3, "epsilon": 1}, "gaussian sigma with a cap"),
    ({"counts": [1, 2], "mechanism": "laplace", "scale": 3}, "laplace scale"),
    ({"counts": [1, 2], "mechanism": "laplace", "epsilon": 1, "order": 3}, "laplace calibrated"),
    ({"table": [[1, 2], [3, 4]], "epsilon": 1, "mechanism": "diffuse", "alpha": 0, "lower_bound": [1, 2],
      "label": "t"}, "diffuse with lower_bound on a labelled table"),
    ({"table": [[1, 2]], "mechanism": "explicit", "r": 1, "alpha": 0, "lower_bound": 5}, "explicit with lower_bound on a table"),
    ({"table": [[1, 2]], "epsilon": 1, "mechanism": "posterior", "prior_shape": [1, 2]}, "posterior prior_shape on a table"),
]
bad_releases = [
    ({"epsilon": 1}, "no counts"),
    ({"counts": [1], "epsilon": 1}, "one cell"),
    ({"counts": [1, -1], "epsilon": 1}, "negative count"),
    ({"counts": [1, "2"], "epsilon": 1}, "string count"),
    ({"counts": [1, 2]}, "dirichlet without epsilon"),
    ({"counts": [1, 2], "epsilon": 0}, "epsilon 0"),
    ({"counts": [1, 2], "epsilon": 1, "order": 1}, "order 1"),
    ({"counts": [1, 2], "epsilon": 1, "prior": 0}, "prior 0"),
    ({"counts": [1, 2], "epsilon": 1, "r": 1}, "r with dirichlet"),
    ({"counts": [1, 2], "epsilon": 1, "alpha": 1}, "alpha with dirichlet"),
    ({"counts": [1, 2], "epsilon": 1, "sigma": 1}, "sigma with dirichlet"),
    ({"counts": [1, 2], "mechanism": "posterior"}, "posterior without epsilon"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "prior": 1}, "prior with posterior"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "posterior", "alpha": 1}, "alpha with posterior"),
    ({"counts": [1, 2], "mechanism": "diffuse", "alpha": 1}, "diffuse without epsilon"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse"}, "diffuse without alpha"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "r": 1}, "r with diffuse"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [1]}, "one-cell alpha"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "diffuse", "alpha": [1, 0]}, "alpha cell 0"),
    ({"counts": [1, 2], "mechanism": "explicit", "r": 1}, "explicit without alpha"),
    ({"counts": [1, 2], "mechanism": "explicit", "alpha": 1}, "explicit without r"),
    ({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 1, "prior": 1}, "prior with explicit"),
    ({"counts": [1, 2], "mechanism": "explicit", "r": 1, "alpha": 1, "epsilon": 1, "order": 2}, "order with explicit"),
    ({"counts": [1, 2], "mechanism": "gaussian"}, "gaussian without sigma or epsilon"),
    ({"counts": [1, 2], "mechanism": "gaussian", "scale": 1}, "scale with gaussian"),
    ({"counts": [1, 2], "mechanism": "gaussian", "sigma": 0}, "sigma 0"),
    ({"counts": [1, 2], "mechanism": "gaussian", "sigma": 1, "epsilon": 1, "order": 2}, "order with a given sigma"),
    ({"counts": [1, 2], "mechanism": "gaussian", "order": 2}, "order without epsilon"),
    ({"counts": [1, 2], "mechanism": "laplace"}, "laplace without scale or epsilon"),
    ({"counts": [1, 2], "mechanism": "laplace", "scale": 1, "sigma": 1}, "sigma with laplace"),
    ({"counts": [1, 2], "mechanism": "laplace", "scale": 1, "order": 3}, "order with a given scale"),
    ({"counts": [1, 2], "epsilon": 1, "mechanism": "telepathy"}, "unknown mechanism"),
    ({"table": [[1, 2]], "epsilon": 1, "mechanism": "exponential"}, "exponential on a table"),
    ({"epsilon": 1, "mechanism": "diffuse", "alpha": 0, "lower_bound": 1}, "lower_bound without counts or table"),
    ({"counts": [1, 2], "table": [[1, 2]], "mechanism": "explicit", "r": 1, "alpha": 0, "lower_bound": 1},
     "lower_bound with both counts and table"),
    ({"counts": [1, 2], "epsilon": 1, "colour": "blue"}, "unknown field"),
    ([1, 2], "not an object"),
]
for body, why in good_releases:
    check(S + "ReleaseRequest", body, True, why)
for body, why in bad_releases:
    check(S + "ReleaseRequest", body, False, why)

# ------------------------------------------------------------------ DatasetCreate
good_datasets = [
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}}, "RDP budget"),
    ({"name": "x" * 200, "budget": {"order": 32, "epsilon": 8192}}, "longest name, largest budget"),
    ({"name": "  a b\n", "budget": {"order": 2, "epsilon": 2 ** -40}}, "name trimmed, smallest budget"),
    ({"name": " " + "x" * 200 + "\t", "budget": {"order": 2, "epsilon": 1}}, "200 characters once trimmed"),
    ({"name": "a", "budget": {"epsilon": 1, "delta": 1e-6}}, "(eps, delta), server order"),
    ({"name": "a", "budget": {"epsilon": 1, "delta": 1e-6, "order": 8}}, "(eps, delta) at an order"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "neighbouring": "add_remove_one"}, "neighbouring"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "sensitivity": {"l2_squared": 2, "linf": 1}}, "custom sensitivity"),
]
bad_datasets = [
    ({"budget": {"order": 2, "epsilon": 1}}, "no name"),
    ({"name": "", "budget": {"order": 2, "epsilon": 1}}, "empty name"),
    ({"name": "x" * 201, "budget": {"order": 2, "epsilon": 1}}, "name too long"),
    ({"name": " \t ", "budget": {"order": 2, "epsilon": 1}}, "blank name"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1e-13}}, "RDP budget that rounds to zero"),
    ({"name": "a"}, "no budget"),
    ({"name": "a", "budget": {"epsilon": 1}}, "budget without order or delta"),
    ({"name": "a", "budget": {"order": 2}}, "budget without epsilon"),
    ({"name": "a", "budget": {"order": 1, "epsilon": 1}}, "order 1"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 0}}, "epsilon 0"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 8192.5}}, "RDP epsilon above 8192"),
    ({"name": "a", "budget": {"epsilon": 1, "delta": 0}}, "delta 0"),
    ({"name": "a", "budget": {"epsilon": 1, "delta": 1}}, "delta 1"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1, "extra": 1}}, "unknown budget field"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "neighbouring": "custom"}, "neighbouring custom"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "neighbouring": "replace_one",
      "sensitivity": {"l2_squared": 2, "linf": 1}}, "both sensitivity and neighbouring"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "sensitivity": {"l2_squared": 2}}, "sensitivity without linf"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "sensitivity": {"l2_squared": 0, "linf": 1}}, "l2_squared 0"),
    ({"name": "a", "budget": {"order": 2, "epsilon": 1}, "owner": "me"}, "unknown field"),
]
for body, why in good_datasets:
    check(S + "DatasetCreate", body, True, why)
for body, why in bad_datasets:
    check(S + "DatasetCreate", body, False, why)

check(S + "TokenCreate", {"datasets": [UUID]}, True, "one dataset")
check(S + "TokenCreate", {"datasets": []}, False, "no dataset")
check(S + "TokenCreate", {"datasets": ["nope"]}, False, "not a uuid")
check(S + "TokenCreate", {"datasets": [UUID], "role": "admin"}, False, "unknown field")

# ------------------------------------------------------------------ responses
budget = {"order": 2, "total": 1, "spent": 0.25, "remaining": 0.75, "releases": 1}
budget_dp = dict(budget, dp={"delta": 1e-6, "total_epsilon": 3, "spent_epsilon": 1.5})
dataset = {
    "id": UUID, "name": "survey", "neighbouring": "replace_one", "sensitivity": {"l2_squared": 2, "linf": 1},
    "budget": {"order": 2, "epsilon": 1}, "spent": 0.25, "releases": 1, "created_at": NOW,
}
dataset_dp = dict(dataset, budget={"epsilon": 3, "delta": 1e-6, "order": 8, "rdp_epsilon": 1.2})
mechanism = {"kind": "dirichlet", "pricing": "exact", "r": 0.3, "alpha": 1.9, "prior": 1, "calibration": {"order": 2, "epsilon": 0.25}}
record = {
    "id": UUID2, "dataset_id": UUID, "seq": 1, "created_at": NOW, "created_by": "admin",
    "distribution": [0.25, 0.75], "mechanism": mechanism, "cost": {"order": 2, "epsilon": 0.25},
}
release = dict(record, budget=budget)
forecast = {"l2_bound": 0.3, "l2_bound_confidence": 0.95, "max_cell_variance": 0.01,
            "kl_tail": {"eta": 0.1, "probability": 0.05}}

check(S + "Health", {"status": "ok"}, True, "healthz")
check(S + "Ready", {"status": "ready", "database": "postgres"}, True, "readyz")
check(S + "Ready", {"status": "ready", "database": "mysql"}, False, "unknown backend")
check(S + "Dataset", dataset, True, "RDP dataset")
check(S + "Dataset", dataset_dp, True, "(eps, delta) dataset")
check(S + "Dataset", dict(dataset, neighbouring="custom"), True, "custom neighbouring")
check(S + "Dataset", dict(dataset, id="42"), False, "id not a uuid")
check(S + "Dataset", dict(dataset, created_at="yesterday"), False, "created_at not a date-time")
check(S + "Dataset", dict(dataset, budget={"order": 2, "epsilon": 1, "delta": 1e-6}), False, "half an (eps, delta) spec")
check(S + "DatasetList", {"items": [dataset, dataset_dp]}, True, "list")
check(S + "Budget", budget, True, "budget")
check(S + "Budget", budget_dp, True, "budget with dp")
check(S + "Budget", dict(budget, remaining=-1), False, "negative remaining")
check(S + "Budget", dict(budget, releases=1.5), False, "fractional releases")
check(S + "Release", release, True, "release")
check(S + "Release", record, False, "release without budget")
check(S + "Release", dict(release, distribution=[1.5, -0.5]), False, "distribution off the simplex box")
check(S + "Release", dict(release, mechanism={"kind": "explicit", "pricing": "exact", "r": 1, "alpha": [1, 2]}), True, "explicit release")
check(S + "Release", dict(release, mechanism={"kind": "diffuse", "pricing": "exact", "r": 0.2, "alpha": [10, 10],
                                              "calibration": {"order": 2, "epsilon": 1}}), True, "diffuse release")
check(S + "Release", dict(release, mechanism={"kind": "laplace", "pricing": "exact", "scale": 2}), True, "laplace release, scale given")
check(S + "Release", dict(release, mechanism={"kind": "explicit", "pricing": "exact", "r": 1, "alpha": 1,
                                              "calibration": {"order": 2, "epsilon": 1}}), False, "explicit with a calibration")
check(S + "Release", dict(release, mechanism={"kind": "gaussian", "pricing": "exact", "scale": 2}), False, "gaussian with a scale")
check(S + "Release", dict(release, mechanism={"kind": "gaussian", "pricing": "bound", "sigma": 2,
                                              "calibration": {"order": 2, "epsilon": 1}}), True, "gaussian release")
check(S + "ReleaseRecord", record, True, "record")
check(S + "ReleaseRecord", release, False, "record with budget")
check(S + "ReleaseList", {"items": [record], "next_before": 1}, True, "page with more")
check(S + "ReleaseList", {"items": [], "next_before": None}, True, "last page")
check(S + "ReleaseList", {"items": [], "next_before": 0}, False, "next_before 0")
summary = {k: record[k] for k in ("id", "dataset_id", "seq", "created_at", "created_by", "cost")}
check(S + "ReleaseSummary", summary, True, "summary")
check(S + "ReleaseSummary", dict(summary, label="by age band"), True, "labelled summary")
check(S + "ReleaseSummary", dict(summary, distribution=record["distribution"]), False, "summary with an output")
check(S + "ReleaseSummary", dict(summary, mechanism=record["mechanism"]), False, "summary with a mechanism")
check(S + "ReleaseList", {"items": [summary, dict(summary, seq=1)], "next_before": None}, True, "page of summaries")
check(S + "ReleaseList", {"items": [dict(record, distribution=None)], "next_before": None}, False, "record without its output")
preview = {"mechanism": mechanism, "cost": {"order": 2, "epsilon": 0.25}, "admissible": True,
           "budget_after": budget, "forecast": forecast}
check(S + "Preview", preview, True, "preview")
check(S + "Preview", dict(preview, forecast=None), True, "preview without forecast")
check(S + "Preview", dict(preview, forecast={}), False, "forecast object without fields")
check(S + "Preview", dict(preview, forecast=dict(forecast, kl_tail=None)), True, "forecast without KL tail")
check(S + "Preview", dict(preview, admissible="yes"), False, "admissible not a boolean")
selection = {"hellinger_bound": 0.258, "hellinger_bound_confidence": 0.95}
check(S + "Preview", dict(preview, forecast=selection), True, "exponential forecast")
check(S + "Preview", dict(preview, forecast=dict(selection, hellinger_bound=1.5)), False, "hellinger bound above 1")
check(S + "Preview", dict(preview, forecast=dict(selection, l2_bound=0.3)), False, "two forecasts in one")
check(S + "Preview", dict(preview, forecast={"hellinger_bound": 0.2}), False, "hellinger bound without confidence")
check(S + "TokenCreated", {"id": "9f86d081884c7d65", "token": "dra_9f86d081884c7d65_q-Z_s3cr3t", "role": "analyst",
                           "datasets": [UUID], "created_at": NOW, "expires_at": None}, True, "token")
check(S + "TokenCreated", {"id": "9f86d081884c7d65", "token": "dra_9f86d081884c7d65_q-Z_s3cr3t", "role": "admin",
                           "datasets": [UUID], "created_at": NOW, "expires_at": None}, False, "admin role")


def problem(slug, status, **extra):
    return dict({"type": f"/problems/{slug}", "title": "t", "status": status, "detail": "d"}, **extra)


check(response_schema("NotFound"), problem("not-found", 404, instance="/v1/datasets/" + UUID), True, "404")
check(response_schema("NotFound"), problem("forbidden", 404), False, "404 with another type")
check(response_schema("NotFound"), problem("not-found", 403), False, "not-found with another status")
check(response_schema("Unauthorized"), problem("unauthorized", 401), True, "401")
check(response_schema("InvalidRequest"), problem("invalid-request", 422, field="name"), True, "422 with field")
check(response_schema("ReleaseRejected"), problem("no-guarantee", 422), True, "no-guarantee")
check(response_schema("ReleaseRejected"), problem("budget-exhausted", 422), False, "409 type under 422")
check(response_schema("BudgetExhausted"), problem("budget-exhausted", 409, budget=budget), True, "409")
check(response_schema("BudgetExhausted"), problem("budget-exhausted", 409), False, "409 without budget")
check(response_schema("ServiceUnavailable"), problem("timeout", 503), True, "timeout")
check(response_schema("HeadersTooLarge"), problem("headers-too-large", 431), True, "431")
check(response_schema("HeadersTooLarge"), problem("payload-too-large", 431), False, "431 with another type")
check(response_schema("Internal"), problem("internal", 500), True, "500")
check(response_schema("Internal"), {"title": "oops", "status": 500, "detail": "d"}, False, "problem without type")
check(response_schema("Internal"), problem("internal", 500, trace_id="abc"), True, "extension member")

# ------------------------------------------------------------------ declared error responses
OPEN = {("/healthz", "get"), ("/readyz", "get"), ("/metrics", "get"), ("/openapi.yaml", "get")}
OPEN |= {("/console", "get"), ("/console/{asset}", "get")}  # static pages; the data stays behind the API
ADMIN_ONLY = {("/v1/datasets", "post"), ("/v1/tokens", "post")}
for path, item in SPEC["paths"].items():
    for method, op in item.items():
        if method not in ("get", "post", "put", "patch", "delete"):
            continue
        codes = set(op.get("responses", {}))
        need = {"431", "500", "503"}
        if (path, method) not in OPEN:
            need.add("401")
            if op.get("security") == []:
                failures.append(f"{method.upper()} {path}: authenticated route marked security: []")
        elif op.get("security") != [] and {} not in (op.get("security") or []):
            # Open: `security: []`, or credentials optional (`- {}` among the requirements,
            # as /metrics, whose per-dataset series need the admin token).
            failures.append(f"{method.upper()} {path}: open route without security: []")
        if (path, method) in ADMIN_ONLY:
            need.add("403")
        if "{id}" in path:
            need.add("404")
        if "requestBody" in op:
            need |= {"400", "413", "415", "422"}
            body = op["requestBody"]["content"]["application/json"]["schema"]
            resolved = SPEC["components"]["schemas"][body["$ref"].split("/")[-1]] if "$ref" in body else body
            if resolved.get("additionalProperties") is not False:
                failures.append(f"{method.upper()} {path}: request body allows unknown fields")
        if path == "/v1/datasets/{id}/releases" and method == "post":
            need.add("409")
        missing = need - codes
        if missing:
            failures.append(f"{method.upper()} {path}: responses {sorted(missing)} not declared")
        for code, resp in op["responses"].items():
            if code.startswith(("4", "5")):
                ref = resp.get("$ref", "")
                content = SPEC["components"]["responses"][ref.split("/")[-1]]["content"] if ref else resp["content"]
                if list(content) != ["application/problem+json"]:
                    failures.append(f"{method.upper()} {path} {code}: not application/problem+json")

if failures:
    print("\n".join(failures))
    print(f"check-openapi-examples: {len(failures)} failed")
    sys.exit(1)
print("check-openapi-examples: all schema examples and declared responses agree with the design")
