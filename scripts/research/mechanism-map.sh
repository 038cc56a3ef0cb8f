#!/usr/bin/env bash
# Regenerate docs/mechanism-map.csv and docs/mechanism-map.png: a server on a fresh SQLite file
# gives the charge → parameter calibration and `auto`'s plans; scripts/research/mechanism_map.py
# simulates the truth with numpy's samplers. About 5–10 minutes on 2 busy cores.
#   scripts/research/mechanism-map.sh [BIN]     BIN defaults to target/debug/dirichlet-release
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
# shellcheck source=scripts/ci/tools-venv.sh
source scripts/ci/tools-venv.sh
tools_venv numpy==2.2.6 matplotlib==3.11.2
# shellcheck source=scripts/ops/serve.sh
source scripts/ops/serve.sh
serve sqlite "${1:-target/debug/dirichlet-release}"
python scripts/research/mechanism_map.py "$BASE" "$ADMIN" docs/mechanism-map.csv docs/mechanism-map.png
