# Sourced by the scripts under scripts/: a Python virtualenv with the PyPI tools they need.
#   tools_venv PACKAGE==VERSION...   installs what is missing and puts the venv's bin/ first on PATH.
# The venv lives in $TOOLS_VENV (default: target/tools-venv, which git and docker both ignore).
# shellcheck shell=bash

tools_venv() {
  local repo venv python
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  venv=${TOOLS_VENV:-$repo/target/tools-venv}
  python=${PYTHON:-python3}
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || return 1
  fi
  # pip is quick when everything is already installed at the pinned versions.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" || return 1
  PATH="$venv/bin:$PATH"
  export PATH
}
