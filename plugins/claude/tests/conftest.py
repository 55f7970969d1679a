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
