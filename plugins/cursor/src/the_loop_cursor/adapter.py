"""The cursor-agent adapter: installed and listed, but never hosted in tmux.

cursor-agent mints its own conversation id and takes none from the caller, so core could neither name the
conversation before it starts nor resume it by a recorded id. The adapter says so in its capabilities; routing
services and ``config validate`` refuse it as ``routing.defaultHarness``, and a spawn that still resolves to it
fails with ``session.spawn_failed`` naming this reason.

A model is chosen with ``--model <name>``; cursor-agent has no effort option. Whether it accepts a model is not
measured: nothing offline lists cursor's models without signing in, so the verdict is ``unknown`` (offerable) and
an effort level is ``refused`` (no mapping).
"""

from __future__ import annotations

from the_loop.interfaces import Capabilities, HarnessAdapter, Launch
from the_loop.toolkit import HarnessError

REASON = "cursor-agent cannot be hosted in tmux: it has no pre-assignable session id"


class CursorAdapter(HarnessAdapter):
    name = "cursor"
    capabilities = Capabilities(tmux_hostable=False, preassigned_session_id=False, can_resume=False)

    def fresh_argv(self, launch: Launch) -> list[str]:
        raise HarnessError(REASON)

    def resume_argv(self, launch: Launch) -> list[str]:
        raise HarnessError(f"{REASON}, so a conversation cannot be resumed by id")

    def model_args(self, model: str) -> list[str] | None:
        return ["--model", model]
