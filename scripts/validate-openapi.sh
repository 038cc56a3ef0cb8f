#!/usr/bin/env bash
# Checks openapi.yaml:
#   1. openapi-spec-validator (PyPI): the document is valid OpenAPI 3.1 (structure, $refs, schemas);
#   2. scripts/check-openapi-examples.py: its schemas accept the valid and refuse the invalid
#      example bodies of the API design, and every operation declares the error responses
#      (application/problem+json) its route can return.
# Installs the tools with pip into target/tools-venv (override with TOOLS_VENV). Exits non-zero on
# any failure. Usage: scripts/validate-openapi.sh [path/to/openapi.yaml]
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-openapi.yaml}

# shellcheck source=scripts/tools-venv.sh
. scripts/tools-venv.sh
tools_venv \
  "openapi-spec-validator==${OPENAPI_SPEC_VALIDATOR_VERSION:-0.9.0}" \
  "jsonschema==4.26.0" "rfc3339-validator==0.1.4" "rfc3986-validator==0.1.1" "PyYAML==6.0.3"

echo "== openapi-spec-validator $(python -c 'import importlib.metadata as m; print(m.version("openapi-spec-validator"))') $spec"
openapi-spec-validator "$spec"

echo "== scripts/check-openapi-examples.py $spec"
python scripts/check-openapi-examples.py "$spec"
