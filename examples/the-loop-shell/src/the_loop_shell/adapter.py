"""The ``shell-agent`` harness adapter: how core starts and resumes the agent in :mod:`the_loop_shell.agent`."""

from __future__ import annotations

import sys
from pathlib import Path

from the_loop.interfaces import Capabilities, HarnessAdapter, Launch


class ShellAgentAdapter(HarnessAdapter):
    """The agent takes the id core mints (``--session-id``) and resumes by it (``--resume``), so it can be hosted
    in tmux and be a default harness."""

    name = "shell-agent"
    capabilities = Capabilities(tmux_hostable=True, preassigned_session_id=True, can_resume=True)

    def transcripts(self) -> Path:
        from the_loop_shell.config import ShellAgentSettings

        settings = self.config.sections.get("shellAgent") or ShellAgentSettings()
        path = Path(settings.transcript_dir).expanduser()
        return path if path.is_absolute() else self.config.ref.path.parent / path

    def _argv(self, id_flag: str, launch: Launch) -> list[str]:
        # Binary first, the agent's own flags, the operator's routing.harnessArgs, then the prompt as one word, last.
        # "--" ends the options, so a prompt that starts with "-" is still the prompt.
        agent = [sys.executable, "-m", "the_loop_shell.agent", "--transcripts", str(self.transcripts())]
        return [*agent, id_flag, launch.session_id, *launch.args, "--", launch.prompt]

    def fresh_argv(self, launch: Launch) -> list[str]:
        return self._argv("--session-id", launch)

    def resume_argv(self, launch: Launch) -> list[str]:
        return self._argv("--resume", launch)

    def prepare(self, cwd: Path) -> list[str]:
        """Make the transcript directory before the agent starts; report it only when it was created."""
        directory = self.transcripts()
        try:
            directory.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            return []
        return [str(directory)]
