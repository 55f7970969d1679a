"""The Claude Code adapter: the argv of a fresh and a resumed conversation, and the pre-spawn preparation.

Conversation ids are UUIDs (Claude Code's ``--session-id`` takes nothing else; ``--resume`` with another word opens
an interactive picker). A conversation exists when its transcript does, and a session is ready once its transcript
holds the new prompt (:mod:`the_loop_claude.transcript`). A model is chosen with ``--model <name>`` and an effort
level with ``--effort <level>``; whether this machine's Claude Code takes them is measured without spending a token
(:mod:`the_loop_claude.choices`).

Steering: Escape stops the running turn and keeps the conversation; the turn has stopped once the transcript says
so (:mod:`the_loop_claude.turns`) or the pane reads input again (:mod:`the_loop_claude.pane`). What each model
response spent is read from the transcript (:mod:`the_loop_claude.usage`), and the permission prompt and the other
menus are recognised on the pane (:mod:`the_loop_claude.prompts`).

Argv shape (no shell anywhere; core passes it to tmux as separate words)::

    <binary> --session-id <id> <routing.harnessArgs.claude…> [--model <m>] [--effort <e>]
             [--disallowedTools=AskUserQuestion] -- <prompt>
    <binary> --resume <id>     <the same>

The prompt is one argv element and the last one. The ``--`` before it ends option parsing, so a prompt that starts
with ``-`` (a Markdown list, an event quoting a flag) is never read as an option and a variadic option in
``harnessArgs`` (``--allowedTools A B``) cannot swallow it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop.interfaces import (
    BlockedPrompt,
    Capabilities,
    ChoiceKind,
    Finding,
    HarnessAdapter,
    Launch,
    ReadyCheck,
    UsageRead,
    Verdict,
)
from the_loop.toolkit import HarnessError, harness_args, valid_session_id

if TYPE_CHECKING:
    from collections.abc import Callable

    from the_loop.config import LoadedConfig
    from the_loop_claude.config import ClaudeSettings

SECTION = "integrations.claude"
# One token: --disallowedTools is variadic, so a separate value word could swallow what follows (R24).
UNATTENDED_ARGS = ("--disallowedTools=AskUserQuestion",)
INSTALL = "npm install -g @anthropic-ai/claude-code (or set integrations.claude.binary to where it is)"
VERSION_TIMEOUT = 30.0
INTERRUPT_KEYS = ("Escape",)  # once: a second Escape on an idle prompt opens the rewind menu
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class ClaudeAdapter(HarnessAdapter):
    """Claude Code in a tmux pane: the core mints the conversation id (``--session-id``) and resumes it by id."""

    name = "claude"
    capabilities = Capabilities(
        tmux_hostable=True,
        preassigned_session_id=True,
        can_resume=True,
        can_interrupt=True,
        reports_usage=True,
        recognises_prompts=True,
    )

    def settings(self) -> ClaudeSettings:
        """The plugin's section; its defaults when the config was loaded without this plugin's sections."""
        from the_loop_claude.config import ClaudeSettings

        return self.config.sections.get(SECTION) or ClaudeSettings()

    def binary(self) -> str:
        """The executable, resolved on this process's PATH so that the PATH check and the pane run the same file
        (the tmux server may have been started with another PATH)."""
        configured = str(Path(self.settings().binary).expanduser())
        return shutil.which(configured) or configured

    def problems(self) -> list[Finding]:
        """Claude Code is installed where ``integrations.claude.binary`` says and ``claude --version`` runs (offline;
        it needs no login)."""
        binary = self.binary()
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            return [Finding(f"Claude Code is not installed: {self.settings().binary!r} is not on PATH", INSTALL)]
        try:
            result = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [Finding(f"Claude Code does not start: {binary} --version failed ({type(exc).__name__})", INSTALL)]
        if result.returncode != 0:
            said = next((line.strip() for line in result.stderr.splitlines() if line.strip()), "no message")[:160]
            return [
                Finding(f"Claude Code does not start: {binary} --version exited {result.returncode} ({said})", INSTALL)
            ]
        return []

    def unattended(self) -> tuple[str, ...]:
        """Every interaction mode except ``cli`` is unattended: nobody answers a question asked in the pane."""
        return UNATTENDED_ARGS if self.config.core.routing.interaction.mode != "cli" else ()

    def accepts_session_id(self, session_id: str) -> bool:
        return bool(UUID.match(session_id))

    def _argv(self, id_flag: str, launch: Launch) -> list[str]:
        if not valid_session_id(launch.session_id) or not self.accepts_session_id(launch.session_id):
            raise HarnessError(f"{launch.session_id!r} is not a Claude Code conversation id (a UUID)")
        return [self.binary(), id_flag, launch.session_id, *launch.args, *self.unattended(), "--", launch.prompt]

    def fresh_argv(self, launch: Launch) -> list[str]:
        return self._argv("--session-id", launch)

    def resume_argv(self, launch: Launch) -> list[str]:
        return self._argv("--resume", launch)

    def conversation_exists(self, launch: Launch) -> bool:
        from the_loop_claude import transcript

        return transcript.find(launch.session_id, launch.cwd) is not None

    def ready_check(self, launch: Launch) -> ReadyCheck:
        """Ready once the conversation's transcript holds a prompt written after this launch began (a resumed
        transcript is measured first, so its old prompts do not count)."""
        from the_loop_claude import transcript

        offset = transcript.size(transcript.find(launch.session_id, launch.cwd))

        def ready(screen: Callable[[], str]) -> bool:  # the transcript says it: the pane is never read
            path = transcript.find(launch.session_id, launch.cwd)
            return path is not None and transcript.has_user_entry_after(path, offset)

        return ready

    def interrupt_keys(self) -> tuple[str, ...]:
        return INTERRUPT_KEYS

    def interrupted_check(self, launch: Launch) -> ReadyCheck:
        """Stopped once a line written to the transcript after this call ends a turn (the interrupt's note, or the
        turn's own end if it finished first), or once the pane reads input with no turn running: the screen only
        tells when nothing was running, or when Escape came before any of the answer and Claude Code put the
        prompt back in its input box, writing nothing."""
        from the_loop_claude import pane, transcript, turns

        found = transcript.find(launch.session_id, launch.cwd)
        offset = transcript.line_end(found) if found is not None else 0

        def stopped(screen: Callable[[], str]) -> bool:
            path = found or transcript.find(launch.session_id, launch.cwd)
            return (path is not None and turns.ended_after(path, offset)) or pane.reads_input(screen())

        return stopped

    def read_usage(self, session_id: str, cwd: Path, cursor: str) -> UsageRead | None:
        from the_loop_claude import transcript, usage

        path = transcript.find(session_id, cwd)
        return usage.read(path, cursor) if path is not None else None

    def blocked_prompt(self, screen: str) -> BlockedPrompt | None:
        from the_loop_claude import prompts

        return prompts.blocked_prompt(screen)

    def model_args(self, model: str) -> list[str] | None:
        return ["--model", model]

    def effort_args(self, effort: str) -> list[str] | None:
        return ["--effort", effort]

    def check_choice(self, kind: ChoiceKind, name: str) -> Verdict:
        """Effort: the levels ``claude --help`` lists. Model: the ids the Messages API the session would use lists
        for its credential. Neither spends a token; see :mod:`the_loop_claude.choices`."""
        from the_loop_claude import choices

        if kind == "effort":
            levels = self._effort_levels
            return "unknown" if levels is None else "ok" if name in levels else "refused"
        ids = self._model_ids
        return "unknown" if ids is None else "ok" if choices.model_listed(name, ids) else "refused"

    # Read once per adapter, so one `models check` asks Claude Code and the API once for every name.

    @functools.cached_property
    def _effort_levels(self) -> list[str] | None:
        from the_loop_claude import choices

        text = choices.read_help(self.binary(), self._environ())
        return choices.effort_levels(text) if text is not None else None

    @functools.cached_property
    def _model_ids(self) -> list[str] | None:
        from the_loop_claude import choices

        return choices.list_models(self._environ())

    def _environ(self) -> dict[str, str]:
        """The environment a session's pane would get: its endpoint and credential, and nothing core withholds."""
        from the_loop.toolkit import harness_environ

        return harness_environ(self.config, self)  # type: ignore[arg-type]

    def session_env(self) -> dict[str, str]:
        settings = self.settings()
        env = {"DISABLE_AUTOUPDATER": "" if settings.auto_update else "1"}
        if settings.sandbox:
            env["IS_SANDBOX"] = "1"
        return env

    def prepare(self, cwd: Path) -> list[str]:
        """Trust ``cwd``, complete onboarding, approve the inherited API key and enable the-loop's plugin in
        Claude Code's own files (see :mod:`the_loop_claude.trust`)."""
        from the_loop_claude import trust

        routing = self.config.core.routing
        settings = self.settings()
        return trust.prepare(
            cwd,
            trust=routing.harness_trust,
            plugins=routing.harness_plugins,
            workspace_root=_workspace_root(self.config),
            harness_args=harness_args(self.config, self.name),
            complete_onboarding=settings.complete_onboarding,
            approve_api_key=settings.approve_api_key,
        )


def _workspace_root(config: LoadedConfig) -> Path | None:
    """``routing.workspace.root`` anchored the way core anchors it, or None when it is not set."""
    from the_loop.toolkit import workspace

    return workspace.workspace_root(config) if workspace.enabled(config) else None
