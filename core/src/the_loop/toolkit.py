"""What a provider plugin may use of core beyond the root API: the one door into core's machinery.

A plugin imports the root modules (``hookspecs``, ``interfaces``, ``models``, ``refs``, ``events``, ``plugins``),
``the_loop.config``, ``the_loop.command`` for its commands, and this module — never ``the_loop.<layer>.<module>``
directly (the ``plugins use only the public API`` contract in ``pyproject.toml`` holds the first-party ones to
it). The names below are the supported surface: they keep their meaning while the modules behind them move.

Each name is imported when it is first used, so importing the toolkit costs nothing and a plugin pays only for
what it touches (a webhook route never loads the tmux runner). ``docs/plugins/index.md`` lists them; a test keeps
that list, this table and the names' targets in step.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name → "module" (the module itself) or "module:attribute"
EXPORTS: dict[str, str] = {
    # Putting events in: the durable inbox, webhook signatures, the poll loop's clocks and ledger budget.
    "Inbox": "the_loop.inbox:Inbox",
    "signed_by": "the_loop.ingress.signing:signed_by",
    "PollClocks": "the_loop.ingress.poller:PollClocks",
    "LEDGER_CHECKS_PER_CYCLE": "the_loop.ingress.poller:LEDGER_CHECKS_PER_CYCLE",
    "ledger_only_due": "the_loop.ingress.poller:ledger_only_due",
    # Who may steer a work item: control keywords and arming, who someone is for an item, the claims.
    "control": "the_loop.control",
    "claims": "the_loop.control.claims",
    # A work item ending and reopening upstream; its checkout; harness adapters' helpers.
    "closing": "the_loop.sessions.closing",
    "workspace": "the_loop.sessions.workspace",
    "HarnessError": "the_loop.sessions.harness:HarnessError",
    "harness_args": "the_loop.config:harness_args",
    "harness_environ": "the_loop.sessions.harness:harness_environ",
    "harness_findings": "the_loop.sessions.harness:harness_findings",
    "valid_session_id": "the_loop.sessions.harness:valid_session_id",
    "unframed": "the_loop.sessions.tmux:unframed",
    # Records and the file primitives they are written with.
    "WorkItemStore": "the_loop.state.store:WorkItemStore",
    "provider_url": "the_loop.state.store:provider_url",
    "SessionRegistry": "the_loop.state.registry:SessionRegistry",
    "StateError": "the_loop.state:StateError",
    "Corrupt": "the_loop.state:Corrupt",
    "lines_after": "the_loop.state.tail:lines_after",
    "atomic_write_bytes": "the_loop.state:atomic_write_bytes",
    "dump_json": "the_loop.state:dump_json",
    "load_json": "the_loop.state:load_json",
    "read_json": "the_loop.state:read_json",
    "locked": "the_loop.state:locked",
    # A channel's side: bindings, reading replies, the undelivered queue; running a service in the foreground.
    "channels": "the_loop.channels",
    "outbox": "the_loop.channels.outbox",
    "run_in_foreground": "the_loop.daemon:run",
    "fetch_guarded": "the_loop.channels.attachments:fetch_guarded",  # an attachment, by hand, host by host
    "standing_sink": "the_loop.standing.control:sink",  # where a standing session's thread delivers
    "standing_sessions": "the_loop.standing.control",  # listing, act (start|stop|restart), say_to
    # A control surface of its own (the web plugin): one HTTP server stack, and an operator's actions and views.
    "serve_http": "the_loop.ingress.server:run_app",
    "read_body": "the_loop.ingress.server:read_body",
    "operations": "the_loop.sessions.operations",
    "standing": "the_loop.sessions.standing",
    "runner_for": "the_loop.sessions.tmux:runner_for",
    "atomic_write_json": "the_loop.state:atomic_write_json",
    "quarantine_if_corrupt": "the_loop.state:quarantine_if_corrupt",
}

__all__ = sorted(EXPORTS)

if TYPE_CHECKING:  # what a type checker sees; at run time each name loads on first use (below)
    from the_loop import (
        channels,  # noqa: F401
        control,  # noqa: F401
    )
    from the_loop.channels import outbox  # noqa: F401
    from the_loop.channels.attachments import fetch_guarded  # noqa: F401
    from the_loop.config import harness_args  # noqa: F401
    from the_loop.control import claims  # noqa: F401
    from the_loop.daemon import run as run_in_foreground  # noqa: F401
    from the_loop.inbox import Inbox  # noqa: F401
    from the_loop.ingress.poller import LEDGER_CHECKS_PER_CYCLE, PollClocks, ledger_only_due  # noqa: F401
    from the_loop.ingress.server import read_body  # noqa: F401
    from the_loop.ingress.server import run_app as serve_http  # noqa: F401
    from the_loop.ingress.signing import signed_by  # noqa: F401
    from the_loop.sessions import closing, operations, standing, workspace  # noqa: F401
    from the_loop.sessions.harness import (  # noqa: F401
        HarnessError,
        harness_environ,
        harness_findings,
        valid_session_id,
    )
    from the_loop.sessions.tmux import runner_for, unframed  # noqa: F401
    from the_loop.standing import control as standing_sessions  # noqa: F401
    from the_loop.standing.control import sink as standing_sink  # noqa: F401
    from the_loop.state import (  # noqa: F401
        Corrupt,
        StateError,
        atomic_write_bytes,
        atomic_write_json,
        dump_json,
        load_json,
        locked,
        quarantine_if_corrupt,
        read_json,
    )
    from the_loop.state.registry import SessionRegistry  # noqa: F401
    from the_loop.state.store import WorkItemStore, provider_url  # noqa: F401


def __getattr__(name: str) -> Any:
    target = EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"the_loop.toolkit has no {name!r}; a plugin may use: {', '.join(__all__)}")
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    if attribute:
        value = getattr(value, attribute)
    globals()[name] = value  # the next use is a plain lookup
    return value
