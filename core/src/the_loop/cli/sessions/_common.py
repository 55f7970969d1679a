"""What the ``sessions`` subcommands share: the ref option, the operator's identity, control records."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import click

from the_loop import events

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef


def _parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> WorkItemRef | None:
    from the_loop.refs import RefError, parse_ref

    if value is None:
        return None
    try:
        return parse_ref(value)
    except RefError as exc:
        raise click.BadParameter(str(exc)) from None


WORK_ITEM = click.option(
    "--work-item", "ref", required=True, metavar="REF", callback=_parse, help="The work item, e.g. github:octo/repo#15."
)


def operator() -> str:
    """Who ran the command: the local user (recorded as the actor of a CLI control command)."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


def record_control(config: LoadedConfig, ref: WorkItemRef, command: str, note: str = "") -> None:
    """Write the portable ``control`` section: what an authorized person last asked for this work item."""
    from the_loop.registry import now_iso
    from the_loop.store import WorkItemStore

    control = {
        "command": command,
        "source": "cli",
        "actor": operator(),
        "requestedAt": now_iso(),
        "note": note,
        "instance": "",
    }
    WorkItemStore(config.state, config=config).update_section(ref, "control", control)


def control_event(ref: WorkItemRef, command: str, effect: str, **fields: Any) -> None:
    events.emit(
        "control.command", work_item=str(ref), command=command, source="cli", actor=operator(), effect=effect, **fields
    )


def ticket_comment(config: LoadedConfig, ref: WorkItemRef, text: str) -> None:
    """Best-effort: tell the people on the ticket what the operator did; no provider installed → nothing."""
    from the_loop.plugins import get_host

    provider_cls = get_host().ticket_providers().get(ref.provider)
    if provider_cls is None:
        return
    try:
        provider = provider_cls(config)
        provider.post_comment(ref, provider.mark(text))
    except Exception as exc:
        click.echo(f"warning: could not comment on {ref}: {exc}", err=True)


COMMENT_OPTION = click.option(
    "--comment/--no-comment",
    default=True,
    show_default=True,
    help="Also post a marked comment on the work item saying what was done (when its tracker is installed).",
)


def set_status(config: LoadedConfig, ref: WorkItemRef, status: str) -> None:
    """Flip the work item's own session to ``status`` (pause/resume touch nothing else, tmux included)."""
    from the_loop.registry import SessionRegistry

    def change(record: Any) -> None:
        own = record.own
        if own is not None:
            own.status = status

    SessionRegistry(config.state).update(str(ref), change)
    if status == "paused":
        events.emit("session.paused", work_item=str(ref))
    else:
        events.emit("session.resumed", work_item=str(ref))
