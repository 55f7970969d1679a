#!/usr/bin/env bash
# Installs the-loop from this checkout — core, all five plugins and the `the-loop` command — into its own
# virtualenv, writes a config if there is none (a starter, or with THE_LOOP_GITHUB_REPO one that watches that
# repository), then starts the daemon and shows its status.
# Running it again reinstalls from the checkout and leaves running services and an existing config alone.
#
# Settings (environment only):
#   THE_LOOP_HOME       the virtualenv goes to $THE_LOOP_HOME/venv (default: ~/.the-loop)
#   PYTHON              the interpreter that builds the virtualenv (default: python3; 3.11 or newer)
#   THE_LOOP_BIN_DIR    where the `the-loop` link goes (default: ~/.local/bin)
#   THE_LOOP_NO_START   set to 1 to install and write the config without starting anything
#   THE_LOOP_GITHUB_REPO  OWNER/REPO to watch: the new config is `the-loop init --github OWNER/REPO`, checked against
#                       GitHub with the token in GH_TOKEN, GITHUB_TOKEN or `gh auth token` (in a terminal, init asks)
#   THE_LOOP_GITHUB_API_URL  GitHub's API for that repository (GitHub Enterprise), passed as init's --api-url
set -euo pipefail

checkout=$(cd "$(dirname "$0")" && pwd)
venv=${THE_LOOP_HOME:-$HOME/.the-loop}/venv
python=${PYTHON:-python3}
bin_dir=${THE_LOOP_BIN_DIR:-$HOME/.local/bin}

fail() {
  echo "install.sh: error: $*" >&2
  exit 1
}

command -v "$python" >/dev/null || fail "$python not found; install Python 3.11 or newer, or set PYTHON"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  fail "$("$python" -V 2>&1) is too old; the-loop needs Python 3.11 or newer (set PYTHON)"
command -v tmux >/dev/null || fail "tmux not found; the-loop hosts its agent sessions in tmux (apt-get install tmux)"

if [ ! -x "$venv/bin/python" ]; then
  echo "creating the virtualenv $venv"
  "$python" -m venv "$venv"
fi

# Naming the sibling directories in one pip call lets them satisfy each other's pins; everything else comes
# from the package index. pip rebuilds local directories every time, so a re-run picks up checkout changes.
echo "installing the-loop, the-loop-core and the plugins github, jira, slack, claude, cursor, web from $checkout"
(cd "$checkout" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  ./core ./plugins/github ./plugins/jira ./plugins/slack ./plugins/claude ./plugins/cursor ./plugins/web .)

mkdir -p "$bin_dir"
ln -sfn "$venv/bin/the-loop" "$bin_dir/the-loop"
echo "linked $bin_dir/the-loop -> $venv/bin/the-loop"
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) echo "note: $bin_dir is not on your PATH; add it, or run $venv/bin/the-loop" ;;
esac

loop=$venv/bin/the-loop
# Ask the-loop itself which file it would read (-c is not used here, so: $THE_LOOP_CLI_CONFIG,
# ./.the-loop/cli-config.yaml, ~/.the-loop/cli-config.yaml), so the check and the CLI never disagree.
config=$("$venv/bin/python" -c 'from the_loop.config import resolve_config_path; print(resolve_config_path().path)')
if [ -e "$config" ]; then
  echo "keeping the existing config $config"
else
  setup=()
  if [ -n "${THE_LOOP_GITHUB_REPO:-}" ]; then
    setup=(--github "$THE_LOOP_GITHUB_REPO")
    [ -n "${THE_LOOP_GITHUB_API_URL:-}" ] && setup+=(--api-url "$THE_LOOP_GITHUB_API_URL")
  fi
  # init exits 1 when something is left to fix (a missing label, Claude Code not installed yet): it said what,
  # and the config it wrote still starts. It writes nothing when there is nothing to point it at (a refused token).
  "$loop" init --path "$config" ${setup[@]+"${setup[@]}"} || true
  [ -e "$config" ] || fail "the-loop init wrote no config (see above); fix that and run install.sh again"
fi

if [ "${THE_LOOP_NO_START:-}" = 1 ]; then
  echo "THE_LOOP_NO_START=1: not starting; run \`the-loop start\` when the config is ready"
  exit 0
fi
"$loop" start
"$loop" status
