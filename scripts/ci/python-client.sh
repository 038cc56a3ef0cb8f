#!/usr/bin/env bash
# The Python client (clients/python) as a user gets it: a fresh virtual environment, the package
# installed from its directory with the pandas and numpy extras, then ruff, mypy --strict, a wheel
# built and checked, and the pytest suite against the release binary on a temporary SQLite file
# and on a fresh PostgreSQL database (both backends; PostgreSQL is never skipped).
#
#   scripts/ci/python-client.sh                  (DIRICHLET_BIN, default target/debug/dirichlet-release)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
export DIRICHLET_BIN=${DIRICHLET_BIN:-$repo/target/debug/dirichlet-release}
[ -x "$DIRICHLET_BIN" ] || cargo build --quiet --bin dirichlet-release
# The Rust naive-Bayes example, which the Python port is checked against (CI's examples step
# builds it anyway; this only builds it earlier).
cargo build --quiet --example naive_bayes
export DIRICHLET_RUST_NAIVE_BAYES=$repo/target/debug/examples/naive_bayes

venv=$repo/target/py-client-venv
rm -rf "$venv" "$repo/target/py-client-dist"
python3 -m venv "$venv"
py=$venv/bin/python
# Pinned: the checks must not change under the project's feet. pandas and numpy are pinned too,
# so that pandas-stubs matches the pandas it describes. dp-accounting (Google's) is only for the
# tests of record_dp_event with the real DpEvent classes; the client itself does not import it.
"$py" -m pip install --quiet --disable-pip-version-check \
  "./clients/python[pandas,numpy,dp-accounting]" \
  httpx==0.28.1 pandas==3.1.1 numpy==2.4.6 dp-accounting==0.6.0 \
  pytest==9.2.0 ruff==0.17.6 mypy==2.4.1 pandas-stubs==3.1.0.261029 build==1.6.1
"$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(dirichlet-release|httpx|pandas|numpy) '

cd clients/python
echo "--- ruff check, ruff format --check"
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
echo "--- mypy --strict (src, tests, examples)"
"$venv/bin/mypy" --strict
echo "--- wheel"
"$py" -m build --wheel --outdir "$repo/target/py-client-dist" . >/dev/null
wheel=$(ls "$repo"/target/py-client-dist/dirichlet_release-*.whl)
"$py" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("dirichlet_release/__init__.py", "dirichlet_release/_client.py", "dirichlet_release/py.typed"):
    assert need in names, f"{need} missing from the wheel"
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, py.typed included")
PY
echo "--- pytest, SQLite and PostgreSQL, against $DIRICHLET_BIN"
# Exit 5 (no tests collected) fails this script like any other non-zero exit.
DIRICHLET_TEST_BACKENDS=sqlite,postgres "$venv/bin/pytest" -q -p no:cacheprovider
