"""The Jira plugin's test fixture: ``world``, a :class:`~jira_world.JiraWorld` (an operator machine against the fake
Jira REST API). Tests import ``fake_jira`` and ``jira_world`` by name (the folder is on pytest's ``pythonpath``), never
``conftest``, which names another plugin's too; a test module overrides ``world`` to set it up further once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_jira import FakeJira
from jira_world import LABEL, JiraWorld

from the_loop.testing import LoopEnv
from the_loop.testing.host import TestHost


@pytest.fixture
def world(loop_env: LoopEnv, plugin_host: TestHost, monkeypatch: pytest.MonkeyPatch) -> Iterator[JiraWorld]:
    """The world on ``loop_env`` and a fake Jira with PROJ-12 armed and OPS-1 in a mirror-only project; closed, and
    the fake stopped, at teardown."""
    with FakeJira() as fake:
        fake.add_issue("PROJ-12", summary="Add a widget", labels=[LABEL])
        fake.add_issue("OPS-1", summary="Ops chore", labels=[LABEL])
        world = JiraWorld.create(loop_env, fake, plugin_host, monkeypatch)
        yield world
        world.close()
