"""Launching a harness in a tmux pane for the dispatcher, and waiting until it is ready for input.

The dispatcher decides *whether* a work item's session is spawned, respawned or resumed; :class:`Launcher` does
the launch: it refuses a tmux name another work item's record holds, runs the adapter's preparation, starts the
harness with the session's environment, and polls the pane until the adapter's ready check passes, the pane dies
or ``routing.tmux.readyTimeoutSeconds`` pass. It reports what happened and writes no session record and no
outcome: those stay the dispatcher's.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.config import harness_args
from the_loop.interfaces import HarnessAdapter, Launch, ReadyCheck
from the_loop.sessions.harness import HarnessError, launch_argv, valid_session_id
from the_loop.sessions.tmux import CREDENTIAL_ENV_NAMES, SpawnError, SpawnResult, TargetError, TmuxError, TmuxRunner
from the_loop.state.registry import SessionRegistry, canonical

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

READY_POLL_SECONDS = 0.05
PANE_TAIL_LINES = 12


@dataclass(frozen=True)
class NotStarted:
    """A harness that did not start, or never became ready for input: why, and the pane's last lines."""

    reason: str
    last_lines: list[str] = field(default_factory=list)


class Launcher:
    """Starts harnesses through ``runner`` under ``config``; ``registry`` tells which work item holds a tmux name."""

    def __init__(self, config: LoadedConfig, runner: TmuxRunner, registry: SessionRegistry) -> None:
        self.config = config
        self.routing = config.core.routing
        self.runner = runner
        self.registry = registry

    def launch(
        self,
        work_item: str,
        adapter: HarnessAdapter,
        target: str,
        cwd: str | Path,
        session_id: str,
        prompt: str,
        *,
        resume: bool,
        args: Sequence[str] | None = None,
    ) -> NotStarted | SpawnResult | None:
        """Prepare and start the harness in ``target``, then wait until it is ready for input. None when it is;
        :class:`NotStarted` when it did not start or never became ready; the :class:`SpawnResult` when the name
        is held by another occupant (nothing was started). ``args``: the harness's arguments as resolved for this
        work item (its own, then the model's, then the effort's); its own alone when not given."""
        held = self.held_by_another(work_item, target)
        if held:
            return held
        launch_args = tuple(args) if args is not None else harness_args(self.config, adapter.name)
        launch = Launch(prompt=prompt, session_id=session_id, cwd=Path(cwd), args=launch_args)
        self._prepare(work_item, adapter, Path(cwd))
        try:
            argv = launch_argv(adapter, launch, resume=resume)
            check = adapter.ready_check(launch)  # before the start: it may note what is already on disk
            result = self._spawn_in(target, cwd, argv, work_item, adapter)
        except (HarnessError, SpawnError, TargetError) as exc:
            return NotStarted(str(exc))
        if not result.spawned:
            return result
        return self._await_ready(target, check)

    def held_by_another(self, work_item: str, target: str) -> SpawnResult | None:
        """The name ``target`` when another work item's record points a session at it: never cleared, reused or
        delivered into for this one (tmux spells ``a.b`` and ``a_b`` alike, and old records may share a name)."""
        others = [item for item in self.registry.holders(target) if item != canonical(work_item)]
        if not others:
            return None
        remedy = (
            f"tmux session {target} belongs to {others[0]} (its session record points there), so it was not "
            f"touched for {work_item}; free the name with: the-loop sessions reset --work-item {others[0]}"
        )
        return SpawnResult(target, spawned=False, occupant=None, remedy=remedy)

    def why_not_resume(self, adapter: HarnessAdapter, launch: Launch) -> str:
        """Why the recorded conversation is not resumed ("" when it will be): resuming is off, the harness cannot,
        the id is not one it takes, or the adapter finds no such conversation in the checkout."""
        if not self.routing.tmux.resume_on_respawn:
            return "resume disabled (routing.tmux.resumeOnRespawn: false)"
        if not adapter.capabilities.can_resume:
            return f"{adapter.name} cannot resume"
        if not valid_session_id(launch.session_id) or not adapter.accepts_session_id(launch.session_id):
            return "no valid recorded session id"
        try:
            exists = adapter.conversation_exists(launch)
        except Exception as exc:  # an adapter bug must not lose the event: start fresh instead
            return f"{adapter.name} could not tell whether the conversation exists: {type(exc).__name__}: {exc}"
        return "" if exists else f"{adapter.name} has no conversation {launch.session_id} in {launch.cwd}"

    def _prepare(self, work_item: str, adapter: HarnessAdapter, cwd: object) -> None:
        """The adapter's pre-spawn preparation; best-effort, the spawn proceeds either way."""
        try:
            applied = adapter.prepare(Path(str(cwd)))
        except Exception as exc:
            events.emit(
                "workspace.trust_failed",
                level="warning",
                work_item=work_item,
                harness=adapter.name,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        if applied:
            events.emit("workspace.trusted", work_item=work_item, harness=adapter.name, applied=applied)

    def _spawn_in(
        self, target: str, cwd: object, argv: list[str], work_item: str, adapter: HarnessAdapter
    ) -> SpawnResult:
        """``runner.spawn`` with the session's environment and ``routing.tmux.remainOnExit``."""
        from the_loop.config import session_withheld_env

        return self.runner.spawn(
            target,
            str(cwd),
            argv,
            env=self._session_env(work_item, adapter),
            strip_env=session_withheld_env(self.config),  # whatever runner this is: the config's secrets stay out
            remain_on_exit=self.routing.tmux.remain_on_exit,
        )

    def _session_env(self, work_item: str, adapter: HarnessAdapter) -> dict[str, str]:
        env = {
            **adapter.session_env(),
            "THE_LOOP_WORK_ITEM": work_item,
            "THE_LOOP_CLI_CONFIG": str(self.config.ref.path),
        }
        return {key: value for key, value in env.items() if value}

    def _await_ready(self, target: str, check: ReadyCheck) -> NotStarted | None:
        """Poll the pane until the adapter's check says ready (None), the pane dies, or
        ``routing.tmux.readyTimeoutSeconds`` pass; a pane that never became ready is killed so a retry can start
        again (it is our own spawn: nobody has been talking to it)."""
        timeout = self.routing.tmux.ready_timeout_seconds
        deadline = time.monotonic() + timeout
        while True:
            state = self.runner.probe(target)
            if state in ("dead", "absent"):
                return NotStarted("the harness exited before it was ready for input", self._last_lines(target))
            if state == "live":
                try:
                    if check(lambda: self.runner.capture(target)):
                        return None
                except TmuxError:
                    pass  # the pane went away between the probe and the capture: the next probe says so
            if time.monotonic() >= deadline:
                lines = self._last_lines(target)
                self.runner.kill(target)
                return NotStarted(f"the harness was not ready for input within {timeout:g}s", lines)
            time.sleep(READY_POLL_SECONDS)

    def _last_lines(self, target: str) -> list[str]:
        """The pane's last non-empty lines, secrets masked, for the event log ([] when there is no pane)."""
        try:  # with the scrollback: a dead pane's visible screen may hold only tmux's "Pane is dead" line
            screen = self.runner.capture(target, history=True)
        except (TmuxError, TargetError):
            return []
        lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
        return [redact(line) for line in lines[-PANE_TAIL_LINES:]]


_PANE_SECRET_NAMES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
_KEY_LIKE = re.compile(r"sk-ant-[A-Za-z0-9._\-]*")


def redact(text: str, names: Iterable[str] = ()) -> str:
    """``text`` with every credential this process holds masked, whole or by its last 20 characters (the part a
    harness shows), and anything shaped like an Anthropic key; for pane text that goes into the event log."""
    for name in (*CREDENTIAL_ENV_NAMES, *_PANE_SECRET_NAMES, *names):
        value = os.environ.get(name, "")
        for part in (value, value[-20:]):
            if len(part) >= 8:
                text = text.replace(part, "[redacted]")
    return _KEY_LIKE.sub("[redacted]", text)
