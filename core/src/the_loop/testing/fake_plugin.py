"""Fakes for tests, shipped with core so every distribution's tests can use them: a harness adapter for the fake
harness TUI (:mod:`the_loop.testing.harness`) and a ticket provider backed by a JSON file.

Register it in a test host (``plugin_host.register(fake_plugin, "fake")``) or in a spawned process with
``THE_LOOP_EXTRA_PLUGINS=the_loop.testing.fake_plugin``. Environment:

- ``FAKE_HARNESS_LOG`` — where the fake harness logs what it receives (passed as ``--log``; ``{session}`` in it is
  replaced by the conversation id, one log per conversation);
- ``FAKE_HARNESS_PYTHON`` — the interpreter that runs the fake (a missing path makes the binary "not on PATH");
- ``FAKE_HARNESS_MODELS``, ``FAKE_HARNESS_EFFORTS`` — comma-separated names the fake harness accepts (``--model``,
  ``--effort``): the adapter's ``check_choice`` answers ``ok`` for a listed name, ``refused`` for another, and
  ``unknown`` while the variable is unset;
- ``FAKE_TICKETS`` — a JSON file ``{"items": {ref: {"labels": [...], "state": "open", "comments": [...]}}}`` the fake
  ticket provider reads labels and state from and appends posted comments to.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from the_loop import hookimpl
from the_loop.interfaces import (
    BlockedPrompt,
    Capabilities,
    ChoiceKind,
    HarnessAdapter,
    Launch,
    PromptOption,
    ReadyCheck,
    TicketProvider,
    Usage,
    UsageRead,
    Verdict,
)
from the_loop.refs import WorkItemRef
from the_loop.testing.harness import ASKING, PROMPT, fake_harness_argv

MARKER = "<!-- the-loop:agent-comment -->"


class FakeAdapter(HarnessAdapter):
    """Drives ``python -m the_loop.testing.harness`` the way Claude Code is driven: pre-assigned id, resumable."""

    name = "fake"
    capabilities = Capabilities(
        tmux_hostable=True,
        preassigned_session_id=True,
        can_resume=True,
        can_interrupt=True,
        reports_usage=True,
        recognises_prompts=True,
    )

    def _argv(self, launch: Launch, **ids: str) -> list[str]:
        log = os.environ.get("FAKE_HARNESS_LOG")  # "{session}" in it gives each conversation its own log
        log = log.replace("{session}", launch.session_id) if log else None
        binary = os.environ.get("FAKE_HARNESS_PYTHON")  # a test points this at a missing binary
        extra = {"python": binary} if binary else {}
        return fake_harness_argv(log, prompt=launch.prompt, extra=launch.args, **ids, **extra)

    def fresh_argv(self, launch: Launch) -> list[str]:
        return self._argv(launch, session_id=launch.session_id)

    def resume_argv(self, launch: Launch) -> list[str]:
        return self._argv(launch, resume=launch.session_id)

    def ready_check(self, launch: Launch) -> ReadyCheck:
        """Ready once the fake has drawn its prompt (it does so right before it takes the boot prompt)."""
        return lambda screen: PROMPT in screen()

    def conversation_exists(self, launch: Launch) -> bool:
        """With ``FAKE_HARNESS_STATE`` set the fake keeps one marker per conversation (as Claude Code keeps a
        transcript); without it there is nothing to ask and a resume is tried."""
        state = os.environ.get("FAKE_HARNESS_STATE")
        return (Path(state) / launch.session_id).exists() if state else True

    def interrupt_keys(self) -> tuple[str, ...]:
        return ("Escape",)

    def interrupted_check(self, launch: Launch) -> ReadyCheck:
        """Stopped once the screen's last line is the prompt again (a busy turn shows ``[working]`` last)."""

        def stopped(screen: Callable[[], str]) -> bool:
            lines = [line for line in screen().splitlines() if line.strip()]
            return bool(lines) and lines[-1].startswith(PROMPT)

        return stopped

    def read_usage(self, session_id: str, cwd: Path, cursor: str) -> UsageRead | None:
        """The usage lines the fake appended to its conversation's file (``FAKE_HARNESS_STATE``) past ``cursor``
        (a byte offset)."""
        from the_loop.toolkit import lines_after

        state = os.environ.get("FAKE_HARNESS_STATE")
        if not state:
            return None
        path, offset = Path(state) / session_id, int(cursor or 0)
        usage = []
        try:
            if path.stat().st_size < offset:
                offset = 0  # a new file under the old name: read it from its start
            for line, after in lines_after(path, offset):
                offset = after  # the last complete line's end is the next read's start
                try:
                    spent = json.loads(line)
                    usage.append(Usage(**spent["usage"], model=spent.get("model", "")))
                except (ValueError, KeyError, TypeError):
                    continue  # not a usage line
        except OSError:
            return None
        return UsageRead(tuple(usage), str(offset))

    def blocked_prompt(self, screen: str) -> BlockedPrompt | None:
        """The fake's one decision prompt, when it is the last thing on screen."""
        lines = [line.strip() for line in screen.splitlines() if line.strip()]
        if len(lines) < 3 or not lines[-3].startswith(ASKING) or lines[-1] != "2. No":
            return None
        return BlockedPrompt(lines[-3], (PromptOption("1", "Yes", ("1",)), PromptOption("2", "No", ("2",))))

    def model_args(self, model: str) -> list[str] | None:
        return ["--model", model]

    def effort_args(self, effort: str) -> list[str] | None:
        return ["--effort", effort]

    def check_choice(self, kind: ChoiceKind, name: str) -> Verdict:
        accepted = os.environ.get("FAKE_HARNESS_MODELS" if kind == "model" else "FAKE_HARNESS_EFFORTS")
        if accepted is None:
            return "unknown"
        return "ok" if name in [word.strip() for word in accepted.split(",")] else "refused"

    def prepare(self, cwd: Path) -> list[str]:
        marker = os.environ.get("FAKE_HARNESS_PREPARED")
        if marker:  # lets a test see that preparation ran before the harness started
            with open(marker, "a", encoding="utf-8") as handle:
                handle.write(f"{cwd}\n")
            return [str(cwd)]
        return []


class FakeTicketProvider(TicketProvider):
    """Tickets in a JSON file; refs of scheme ``fake`` (``fake:octo/repo#1``)."""

    scheme = "fake"

    def _path(self) -> Path:
        return Path(os.environ["FAKE_TICKETS"])

    def _edit(self, change: Any) -> Any:
        path = self._path()
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = json.loads(path.read_text()) if path.exists() else {"items": {}}
            result = change(data)
            path.write_text(json.dumps(data, indent=2))
            return result

    def _item(self, ref: WorkItemRef) -> dict[str, Any]:
        path = self._path()
        data = json.loads(path.read_text()) if path.exists() else {"items": {}}
        return data["items"].get(str(ref), {})

    def url(self, ref: WorkItemRef) -> str | None:
        return f"https://tickets.example/{ref.owner}/{ref.repo}/{ref.number}"

    def validate(self, ref: WorkItemRef) -> None:
        return None

    def post_comment(self, ref: WorkItemRef, body: str) -> str:
        def add(data: dict[str, Any]) -> str:
            comments = data["items"].setdefault(str(ref), {}).setdefault("comments", [])
            comments.append(body)
            return str(len(comments))

        return self._edit(add)

    def react(self, ack: Any, reaction: str) -> None:
        def add(data: dict[str, Any]) -> None:
            item = data["items"].setdefault(ack.get("ref", ""), {})
            item.setdefault("reactions", []).append({"on": ack.get("id", ""), "reaction": reaction})

        self._edit(add)

    def item_state(self, ref: WorkItemRef) -> Literal["open", "closed", "merged", "missing", "unknown"]:
        item = self._item(ref)
        return item.get("state", "open") if item else "missing"

    def labels(self, ref: WorkItemRef) -> list[str]:
        return list(self._item(ref).get("labels", []))

    def is_self_authored(self, text: str) -> bool:
        return MARKER in text

    def mark(self, text: str) -> str:
        return f"{text.rstrip()}\n\n{MARKER}\n"


@hookimpl
def loop_register_harnesses() -> list[type[HarnessAdapter]]:
    return [FakeAdapter]


@hookimpl
def loop_register_ticketing() -> list[type[TicketProvider]]:
    return [FakeTicketProvider]
