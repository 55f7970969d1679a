"""``the-loop sessions register``: record a session by hand (it gets its tmux session with its next event)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option("--harness", required=True, help="An installed harness adapter (e.g. claude).")
@click.option("--harness-session-id", required=True, help="The conversation to resume.")
@click.option("--cwd", type=click.Path(file_okay=False, path_type=Path), help="Where the session runs.")
@click.option("--force", is_flag=True, help="Replace a live record.")
@click.pass_context
def register(
    ctx: click.Context, ref: WorkItemRef, harness: str, harness_session_id: str, cwd: Path | None, force: bool
) -> None:
    """Register REF's session with an existing conversation; its next event spawns the tmux session resuming it."""
    from the_loop import events
    from the_loop.interfaces import Launch
    from the_loop.sessions.harness import HarnessError, adapter_for, spawn_workdir, valid_session_id
    from the_loop.state.registry import Endpoint, SessionRecord, now_iso

    config = app(ctx).config(source="sessions")
    if not valid_session_id(harness_session_id):
        raise click.BadParameter(
            "not a conversation id ([A-Za-z0-9][A-Za-z0-9._-]{0,127})", param_hint="--harness-session-id"
        )
    try:
        adapter = adapter_for(harness, config)
    except HarnessError as exc:
        raise click.BadParameter(str(exc), param_hint="--harness") from None
    if not adapter.accepts_session_id(harness_session_id):  # Claude Code: a UUID; another word opens a picker
        raise click.BadParameter(
            f"{harness_session_id!r} is not a conversation id {adapter.name} can resume",
            param_hint="--harness-session-id",
        )
    workdir = (cwd or spawn_workdir(config)).absolute()
    binary = adapter.fresh_argv(Launch(prompt="", session_id=harness_session_id, cwd=workdir))[0]
    if shutil.which(binary) is None:
        click.echo(f"warning: harness CLI {binary!r} is not on PATH; the next event cannot start it", err=True)
    registry = config.registry
    existing = registry.load(str(ref))
    if existing and existing.own and existing.own.live and not force:
        click.echo(f"error: {ref} already has a live session record (use --force to replace it)", err=True)
        sys.exit(1)

    def change(record: SessionRecord) -> None:
        previous = record.own
        record.sessions[str(ref)] = Endpoint(
            harness=adapter.name,
            harness_session_id=harness_session_id,
            cwd=str(workdir),
            status="active",
            created_at=now_iso(),
            tmux_target="",
            recent_deliveries=previous.recent_deliveries if previous else [],
        )

    registry.update(str(ref), change)
    events.emit(
        "session.registered",
        work_item=str(ref),
        harness=adapter.name,
        harness_session_id=harness_session_id,
        cwd=str(workdir),
        replaced=bool(existing and existing.own),
    )
    click.echo(f"registered {ref}: {adapter.name} conversation {harness_session_id} in {workdir}")
