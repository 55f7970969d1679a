"""The harness conformance scenarios (:mod:`the_loop.testing.conformance`) against the real Claude Code CLI, offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from the_loop.testing.conformance import HarnessConformance, HarnessKit, HarnessStartFailure, HarnessSteering
from the_loop_claude.conformance import ClaudeKit


@pytest.fixture
def kit(tmp_path: Path, claude_binary: Path) -> HarnessKit:
    return ClaudeKit(tmp_path, claude_binary)


class TestClaudeConformance(HarnessConformance):
    pass


class TestClaudeStartFailure(HarnessStartFailure):
    pass


class TestClaudeSteering(HarnessSteering):
    pass
