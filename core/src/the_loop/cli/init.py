"""``the-loop init``: write a commented starter ``cli-config.yaml``.

The starter sets only ``version``; every other main key is listed commented out with its default, so the file
documents itself and passes ``the-loop config validate`` as written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from the_loop.command import config_path_option, target_config_path

STARTER = """\
# the-loop configuration for this machine: which ingresses run, how work is routed, where state lives.
# Every key below is optional; the commented values are the defaults. Check edits with
# `the-loop config validate`, and see everything in effect with `the-loop config show`.
#
# Secrets never go in this file. Keys ending in `Env` name the environment variable that holds a secret;
# export it, or put NAME=value lines in the file named by env.file (mode 600).
version: "{version}"

# state:
#   root: .the-loop            # relative paths are anchored beside this file (its parent when in .the-loop/)

# env:
#   file: ""                   # NAME=value secrets file, loaded first; never overrides a set variable
#   sessionPassthrough: []     # non-secret variable names handed to agent sessions

# eventLog:
#   enabled: true
#   path: ""                   # default <state.root>/logs/events.jsonl

# repositories: []             # [HOST/]OWNER/REPO the poller and the receiver accept

# webhooks:
#   ghWebhook:
#     enabled: false           # run the HTTP receiver (`the-loop start`)
#     host: 127.0.0.1
#     port: 8787
#     path: /gh-webhook
#     secretEnv: THE_LOOP_GH_WEBHOOK_SECRET   # variable holding the webhook HMAC secret
#     allowUnsigned: false

# polling:
#   enabled: false             # run the poller (`the-loop start`)
#   intervalSeconds: 60
#   sources: []                # e.g. [{{provider: github, labels: [the-loop]}}]

# routing:
#   enabled: false             # turn ticket activity into agent sessions
#   defaultHarness: claude     # an installed, tmux-hostable harness adapter (`the-loop plugins`)
#   spawnOnUnmatched: never    # never | always | labeled
#   authorizedUsers: []        # logins allowed to steer work items
#   maxConcurrentDispatches: 4
#   tmux:
#     keepSessionOnClose: true
#     resumeOnRespawn: true

# Plugin sections (integrations.github, channels.slack, ...) take their keys from the installed plugins;
# `the-loop config show` prints each with its defaults.
"""


@click.command()
@config_path_option("Where to write")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.pass_context
def init(ctx: click.Context, target: Path | None, force: bool) -> None:
    """Write a commented starter cli-config.yaml."""
    from the_loop.config.migrations import CURRENT_CONFIG_VERSION
    from the_loop.state import atomic_write_bytes

    path = target_config_path(ctx, target)
    if path.exists() and not force:
        click.echo(f"error: {path} already exists; pass --force to overwrite it", err=True)
        sys.exit(2)
    atomic_write_bytes(path, STARTER.format(version=CURRENT_CONFIG_VERSION).encode("utf-8"), mode=0o644)
    click.echo(f"wrote {path}")
    click.echo("next: edit it, then run `the-loop config validate`")
