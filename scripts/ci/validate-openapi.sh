#!/usr/bin/env bash
# Checks openapi.yaml with openapi-spec-validator (PyPI): the document is valid OpenAPI 3.1
# (structure, $refs, schemas). The document is generated from the code; that it is current, and
# that its schemas mean what the server does, is checked by `cargo test --test it openapi::`.
# Installs the tool with pip into target/tools-venv (override with TOOLS_VENV). Exits non-zero on
# any failure. Usage: scripts/ci/validate-openapi.sh [path/to/openapi.yaml]
set -euo pipefail
cd "$(dirname "$0")/../.."
spec=${1:-openapi.yaml}

# shellcheck source=scripts/ci/tools-venv.sh
. scripts/ci/tools-venv.sh
tools_venv "openapi-spec-validator==${OPENAPI_SPEC_VALIDATOR_VERSION:-0.9.0}"

echo "== openapi-spec-validator $(python -c 'import importlib.metadata as m; print(m.version("openapi-spec-validator"))') $spec"
openapi-spec-validator "$spec"
