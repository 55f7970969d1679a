"""The harness conformance scenarios (:mod:`the_loop.testing.conformance`) against core's fake harness TUI."""

from __future__ import annotations

from pathlib import Path

import pytest

from the_loop.testing.conformance import (
    FakeHarnessKit,
    HarnessConformance,
    HarnessKit,
    HarnessStartFailure,
    HarnessSteering,
)


@pytest.fixture
def kit(tmp_path: Path) -> HarnessKit:
    return FakeHarnessKit(tmp_path)


class TestFakeHarnessConformance(HarnessConformance):
    pass


class TestFakeHarnessStartFailure(HarnessStartFailure):
    pass


class TestFakeHarnessSteering(HarnessSteering):
    pass
