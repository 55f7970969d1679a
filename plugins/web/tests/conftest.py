"""Fixtures of the web plugin's tests: ``web_world`` (:mod:`web_world`), on the GitHub tests' world.

The helpers beside it and the GitHub tests' helpers are imported by name (both folders are on pytest's
``pythonpath``), never ``conftest``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gh_world import GitHubWorld, github_env
from web_world import WebWorld

from the_loop.testing import LoopEnv, kill_lock_holders


@pytest.fixture
def web_env(loop_env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    """``loop_env`` with the fake GitHub's token and the webhook secret (for the daemons and this process)."""
    return github_env(loop_env, monkeypatch)


@pytest.fixture
def web_world(web_env: LoopEnv) -> Iterator[Callable[..., WebWorld]]:
    """``web_world(**service settings)`` → a :class:`WebWorld`: the receiver and the control plane running."""
    made: list[tuple[GitHubWorld, WebWorld]] = []

    def make(**service: Any) -> WebWorld:
        gh = GitHubWorld(web_env, "webhook")
        gh.start_receiver()
        world = WebWorld(gh, **service)
        made.append((gh, world))
        return world

    yield make
    for gh, world in made:
        world.close()
        gh.close()
    kill_lock_holders(web_env.root)
