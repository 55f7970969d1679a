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
# The real Claude Code CLI for the harness conformance tier, pinned, installed beside the checkout (never on PATH:
# the tests name this file). Needs npm; without it those tests skip (with CI=true they fail instead).
claude_version=2.1.332
claude_dir=.tools/claude-code
claude_bin=$claude_dir/node_modules/@anthropic-ai/claude-code/bin/claude.exe
if [ "$(cat "$claude_dir/.installed" 2>/dev/null)" != "$claude_version" ] || [ ! -x "$claude_bin" ]; then
  if command -v npm >/dev/null 2>&1; then
    mkdir -p "$claude_dir"
    npm install --silent --no-audit --no-fund --prefix "$claude_dir" "@anthropic-ai/claude-code@$claude_version" \
      && "$claude_bin" --version >/dev/null && echo "$claude_version" > "$claude_dir/.installed" \
      || echo "test.sh: warning: could not install Claude Code $claude_version; its conformance tests will not run" >&2
  else
    echo "test.sh: warning: npm is not installed; the real Claude Code conformance tests will not run" >&2
  fi
fi
[ -x "$claude_bin" ] && export THE_LOOP_TEST_CLAUDE="$PWD/$claude_bin"
# The import contracts in pyproject.toml ([tool.importlinter]): core's layers and the plugin boundary.
.venv/bin/lint-imports --no-cache
# Four workers on any machine: most tests wait on tmux, a harness or a server rather than compute, so they overlap
# well even on two cores (`-n 0` runs them one at a time; a later -n wins).
exec .venv/bin/python -m pytest -n 4 --dist worksteal "$@"
