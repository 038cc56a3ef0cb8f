#!/usr/bin/env bash
# The description as a team meets it first: a Python client generated from openapi.yaml by a
# mainstream generator, openapi-python-client (PyPI), then used. Fails if the generator warns about
# anything (a schema or response it skipped, an operation it dropped), if any generated module
# does not import, or if the README walkthrough (steps 1-8) run through the generated client
# against a live server (scripts/ops/serve.sh) does not pass: scripts/ci/openapi_client_walkthrough.py
# checks every answer as the typed model it was parsed into, the 409 as `BudgetExhaustedProblem`.
#
#   scripts/ci/openapi-client.sh [sqlite|postgres|DATABASE_URL]      (default: a temporary SQLite file)
#   BIN=target/release/dirichlet-release OPENAPI_PYTHON_CLIENT_VERSION=0.29.1 scripts/ci/openapi-client.sh
#
# The generator's one setting: it has no YAML parser, so `GET /openapi.yaml`'s application/yaml is
# read as text (`content_type_overrides`), which the description allows (the document as a string).
set -euo pipefail
cd "$(dirname "$0")/../.."

GENERATOR_VERSION=${OPENAPI_PYTHON_CLIENT_VERSION:-0.29.1}
BIN=${BIN:-target/debug/dirichlet-release}

# A venv of its own: the generator pins pydantic, ruamel and the like.
# shellcheck source=scripts/ci/tools-venv.sh
. scripts/ci/tools-venv.sh
# ruff: the generator formats the code it writes with it (and warns when it is missing); the
# walkthrough script is checked with it too.
TOOLS_VENV=${OPENAPI_CLIENT_VENV:-$PWD/target/openapi-client-venv} \
  tools_venv "openapi-python-client==$GENERATOR_VERSION" "ruff==0.17.6"

# shellcheck source=scripts/ops/serve.sh
. scripts/ops/serve.sh
work=$serve_work

echo "== ruff: scripts/ci/openapi_client_walkthrough.py"
ruff check --no-cache scripts/ci/openapi_client_walkthrough.py
ruff format --no-cache --check scripts/ci/openapi_client_walkthrough.py

echo "== openapi-python-client $(python -c 'import importlib.metadata as m; print(m.version("openapi-python-client"))') generate openapi.yaml"
cat >"$work/generator.yaml" <<'YAML'
content_type_overrides:
  application/yaml: text/plain
YAML
status=0
openapi-python-client generate --path openapi.yaml --config "$work/generator.yaml" --meta none \
  --output-path "$work/client/dirichlet_release_client" --fail-on-warning >"$work/generate.log" 2>&1 || status=$?
cat "$work/generate.log"
if [ "$status" -ne 0 ] || grep -qiE 'warning|unable to|cannot parse|skipping|not supported' "$work/generate.log"; then
  echo "openapi-client: the generator warned (exit $status): the description must generate a complete client" >&2
  exit 1
fi

echo "== import every generated module; every documented response is parsed"
PYTHONPATH="$work/client" python - openapi.yaml <<'PY'
import importlib
import inspect
import pkgutil
import re
import sys

from ruamel.yaml import YAML  # the generator's own YAML parser

import dirichlet_release_client as package

modules = [package.__name__]
modules += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
loaded = {name: importlib.import_module(name) for name in modules}
models = [m for m in modules if ".models." in m]

# Every operation's module parses every status it declares: into a generated model for a JSON
# body (successes and problems), text for text, nothing only for a response without a body.
spec = YAML(typ="safe").load(open(sys.argv[1], encoding="utf-8"))
responses = spec["components"]["responses"]
failures, parsed = [], 0
for path, item in spec["paths"].items():
    for method, operation in item.items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", operation["operationId"]).lower()
        name = f"{package.__name__}.api.{operation['tags'][0]}.{snake}"
        if name not in loaded:
            failures.append(f"{method.upper()} {path}: no module {name}")
            continue
        source = inspect.getsource(loaded[name]._parse_response)
        for status, response in operation["responses"].items():
            if "$ref" in response:
                response = responses[response["$ref"].rsplit("/", 1)[-1]]
            block = source.split(f"if response.status_code == {status}:", 1)
            if len(block) == 1:
                failures.append(f"{operation['operationId']} {status}: not parsed")
                continue
            block = block[1].split("if response.status_code ==", 1)[0]
            content = response.get("content", {})
            if any("json" in media for media in content):
                ok = ".from_dict(" in block
            elif content:
                ok = "response.text" in block
            else:
                ok = "None" in block
            parsed += ok
            if not ok:
                failures.append(f"{operation['operationId']} {status}: not parsed as declared")
assert not failures, "\n".join(failures)
operations = sum(len(item) for item in spec["paths"].values())
print(f"{len(modules)} modules imported ({len(models)} models); {operations} operations parse "
      f"all their {parsed} documented responses")
PY

echo "== the README walkthrough through the generated client"
serve "${1:-sqlite}" "$BIN"
PYTHONPATH="$work/client" python scripts/ci/openapi_client_walkthrough.py
