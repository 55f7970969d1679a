#!/usr/bin/env bash
# Runs the whole test suite. Creates (or refreshes) the development environment in .venv first:
# core, every plugin, the example third-party plugin and the test tools, all installed editable.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
stamp=.venv/.installed
inputs=$(cat pyproject.toml core/pyproject.toml plugins/*/pyproject.toml examples/*/pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$inputs" ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ./core $(printf -- '-e ./%s ' plugins/*/ examples/*/) -e '.[dev]'
  echo "$inputs" > "$stamp"
fi
exec .venv/bin/python -m pytest "$@"
