"""The conformance kit for the real Claude Code CLI: offline, against the fake Anthropic Messages API.

Claude Code runs from a fresh ``HOME`` with ``ANTHROPIC_BASE_URL`` pointing at :class:`FakeAnthropic` on
loopback, so it completes real turns and writes real transcripts. What the model received is read from the fake
API's log (:func:`the_loop.testing.fake_anthropic.conversation_turns`); the conversation Claude Code kept is its
transcript.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from the_loop.testing.conformance import HarnessKit, hermetic_path
from the_loop.testing.fake_anthropic import FakeAnthropic
from the_loop.toolkit import unframed

# Shaped like a real key (Claude Code shows and records its last 20 characters); the fake API accepts any.
TEST_API_KEY = "sk-ant-api03-conformance-0123456789-abcdefghijklmnopqrstuvwxyz-AAAA"
BYPASS_ARGS = ["--permission-mode", "bypassPermissions"]


# How Claude Code sometimes hands a paste to the model (seen on a loaded machine, when the paste reaches it in more
# than one read): on lines of its own, the pasted text whole between these tags.
_PASTED = re.compile(r'\s*<pasted_content id="([^"]*)">\n(.*?)\n</pasted_content id="\1">\n?', re.DOTALL)


def unwrapped(text: str) -> str:
    """``text`` with Claude Code's ``<pasted_content>`` wrappers taken off what they wrap."""
    return _PASTED.sub(lambda match: match[2], text)


class ClaudeKit(HarnessKit):
    """``binary``: the installed Claude Code executable. ``api_key``: what sessions inherit as
    ``ANTHROPIC_API_KEY`` (None: unset, and ``ANTHROPIC_AUTH_TOKEN`` carries the credential instead).
    ``permission_mode``: Claude Code's ``--permission-mode``; ``manual`` asks before each tool runs (its default,
    ``auto``, decides itself)."""

    name = "claude"

    def __init__(
        self,
        tmp: Path,
        binary: Path,
        api_key: str | None = TEST_API_KEY,
        permission_mode: str = "bypassPermissions",
    ) -> None:
        super().__init__(tmp)
        self.binary = binary
        self.api_key = api_key
        self.permission_mode = permission_mode
        self.api = FakeAnthropic(tmp / "anthropic-api.jsonl").start()

    def plugins(self) -> list[tuple[object, str]]:
        from the_loop_claude import plugin

        return [(plugin, "claude")]

    def environment(self) -> dict[str, str | None]:
        return {
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": None,
            "PATH": hermetic_path(self.tmp / "sysbin"),
            "ANTHROPIC_BASE_URL": self.api.url,
            "ANTHROPIC_API_KEY": self.api_key,
            "ANTHROPIC_AUTH_TOKEN": None if self.api_key else "conformance-bearer-token",
            # Claude Code sends telemetry to Anthropic itself, not through ANTHROPIC_BASE_URL: a test never may.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def config(self) -> dict[str, Any]:
        # Unattended by default, as an operator runs it; as root that needs the sandbox word (IS_SANDBOX=1).
        return {
            "routing": {"harnessArgs": {"claude": ["--permission-mode", self.permission_mode]}},
            "integrations": {"claude": {"binary": str(self.binary), "sandbox": os.geteuid() == 0}},
        }

    dying_sign = "Dark mode"  # the first-run theme picker, waiting for a person

    def dying_config(self) -> dict[str, Any]:
        # Without the onboarding pre-seed a fresh home gets the first-run screens: with the fake API reachable the
        # connectivity check passes and Claude Code waits at the theme picker (without it, it exits at once).
        return {"integrations": {"claude": {"completeOnboarding": False}}}

    def requests(self) -> list[list[str]]:
        return [[unframed(unwrapped(text)) for text in turn] for turn in self.api.turns()]

    def busy(self, seconds: float) -> str:
        return f"Take your time with this one [slow {seconds:g}]"

    def forget(self, session_id: str, cwd: Path) -> None:
        from the_loop_claude import transcript

        path = transcript.find(session_id, cwd)
        assert path is not None, f"no transcript of {session_id} for {cwd}"
        path.unlink()

    # The steering scenarios: the fake API streams slowly, counts tokens, and asks for a Bash tool (a prompt only in
    # Claude Code's manual permission mode: its default, auto, asks nothing).

    def long_turn(self, seconds: float) -> str:
        return f"Think it through [stream {seconds:g}]"

    def costly(self, tokens: int) -> str:
        return f"A costly answer [tokens {tokens}]"

    def asking(self, what: str) -> str:
        return f"Run the command the test asked for [tool bash: {what}]"

    def asking_config(self) -> dict[str, Any]:
        return {"routing": {"harnessArgs": {"claude": ["--permission-mode", "manual"]}}}

    def ran(self, what: str, cwd: Path) -> bool:
        target = what.rsplit(">", 1)[-1].strip()  # the file the command writes
        return (cwd / target).exists()

    def stop(self) -> None:
        self.api.stop()
