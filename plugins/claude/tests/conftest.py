"""Fixtures of the Claude adapter tests: a temporary home (never the machine's own) and configs loaded with the
claude plugin registered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.config import LoadedConfig, load_config
from the_loop_claude import plugin as claude_plugin


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``HOME``; ``CLAUDE_CONFIG_DIR`` unset."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return path


@pytest.fixture
def claude_config(tmp_path: Path, plugin_host: Any) -> Callable[..., LoadedConfig]:
    """``claude_config(routing={...}, claude={...})`` → a config loaded with the claude plugin's section."""
    plugin_host.register(claude_plugin, "claude")

    def load(routing: dict[str, Any] | None = None, claude: dict[str, Any] | None = None) -> LoadedConfig:
        document: dict[str, Any] = {"version": "0.12.0", "routing": routing or {}}
        if claude is not None:
            document["integrations"] = {"claude": claude}
        path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return load_config(path, plugin_host)

    return load


def _claude_binary() -> Path:
    """The pinned Claude Code that ``./test.sh`` installs (``$THE_LOOP_TEST_CLAUDE``, else its default place).
    Missing: the test is skipped, or fails under ``CI=true``."""
    import os

    root = Path(__file__).resolve().parents[3]
    default = root / ".tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    path = Path(os.environ.get("THE_LOOP_TEST_CLAUDE") or default)
    if not os.access(path, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real Claude Code is not installed at {path} (CI=true: a missing tool fails the run)")
        pytest.skip(f"the real Claude Code is not installed at {path} (./test.sh installs it with npm)")
    return path


@pytest.fixture
def claude_binary() -> Path:
    return _claude_binary()
