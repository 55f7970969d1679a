"""Fixtures of the Jira plugin's tests: the fake Jira REST API, the E §A.6 config pointing at it, and a loaded config
with the plugin registered (for in-process tests). Tests import ``fake_jira`` and ``jira_world`` by name (the
folder is on pytest's ``pythonpath``), never ``conftest``, which names another plugin's too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_jira import FakeJira
from jira_world import EMAIL, LABEL, TOKEN, JiraWorld, base_config

from the_loop.testing import LoopEnv
from the_loop.testing.host import TestHost


@pytest.fixture
def fake_jira() -> Iterator[FakeJira]:
    """PROJ-12 armed; OPS-1 in a mirror-only project."""
    with FakeJira() as fake:
        fake.add_issue("PROJ-12", summary="Add a widget", labels=[LABEL])
        fake.add_issue("OPS-1", summary="Ops chore", labels=[LABEL])
        yield fake


@pytest.fixture
def jira_env(loop_env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    """``loop_env`` with the Jira credentials set, here and for subprocesses."""
    for name, value in (("JIRA_EMAIL", EMAIL), ("JIRA_API_TOKEN", TOKEN)):
        monkeypatch.setenv(name, value)
        loop_env.env[name] = value
    return loop_env


@pytest.fixture
def world(
    jira_env: LoopEnv, fake_jira: FakeJira, plugin_host: TestHost, monkeypatch: pytest.MonkeyPatch
) -> Iterator[JiraWorld]:
    """The :class:`~jira_world.JiraWorld` on ``jira_env`` and ``fake_jira``, closed at teardown."""
    world = JiraWorld.create(jira_env, fake_jira, plugin_host, monkeypatch)
    yield world
    world.close()


@pytest.fixture
def load(jira_env: LoopEnv, fake_jira: FakeJira, plugin_host: Any) -> Callable[..., Any]:
    """Write the config (overrides as keyword arguments) and load it with the Jira plugin registered."""
    import the_loop_jira.plugin
    from the_loop.config import load_config

    plugin_host.register(the_loop_jira.plugin, "jira")

    def loader(config: dict[str, Any] | None = None, **jira: Any) -> Any:
        from the_loop import events

        jira_env.write_config(config or base_config(fake_jira, **jira))
        loaded = load_config(jira_env.config_path, plugin_host)
        events.configure(loaded.state.events_path, "poller", enabled=True)
        return loaded

    return loader
