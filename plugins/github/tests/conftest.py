"""Fixtures of the GitHub plugin's tests: the fake GitHub API, a config pointing at it, the real webhook receiver
(``the-loop daemon run gh-webhook`` in a subprocess) with helpers to send signed deliveries, and ``gh_world``, the
operator's machine against the fake with the webhook receiver or the poller (:mod:`gh_world`).

Tests import the helpers beside it by name (``fake_github``, ``gh_payloads``, ``gh_receiver``, ``gh_world``: the
folder is on pytest's ``pythonpath``), never ``conftest``, a name every plugin's tests folder has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from fake_github import BOT, TOKEN, FakeGitHub
from gh_receiver import Receiver, github_config
from gh_world import GitHubWorld, Ingress, MakeWorld, add_items, github_env

from the_loop.testing import LoopEnv, free_port, kill_lock_holders


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """The fake API with ``octo/repo#15`` (labelled) and PR ``octo/repo#20``; token ``t`` is ``the-loop-bot``."""
    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        yield add_items(fake)


@pytest.fixture
def gh_env(loop_env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    """``loop_env`` with the token and webhook secret set (for subprocesses and this process)."""
    return github_env(loop_env, monkeypatch)


@pytest.fixture
def provider(gh_env: LoopEnv, fake_github: FakeGitHub, plugin_host: Any) -> Any:
    """A :class:`GitHubTicketProvider` on a config whose ``api.baseUrl`` is the fake, the plugin registered."""
    import the_loop_github.plugin
    from the_loop.config import load_config
    from the_loop_github.ticketing import GitHubTicketProvider

    plugin_host.register(the_loop_github.plugin, "github")
    github_config(gh_env, fake_github)
    return GitHubTicketProvider(load_config(gh_env.config_path, plugin_host))


# ------------------------------------------------------------------------------------------------ receiver


@pytest.fixture
def start_receiver(gh_env: LoopEnv, fake_github: FakeGitHub) -> Iterator[Callable[..., Receiver]]:
    """``start_receiver(**ghWebhook settings)`` → a :class:`Receiver`, stopped (SIGTERM) at teardown."""
    started: list[Receiver] = []

    def start(**settings: Any) -> Receiver:
        port = free_port()
        github_config(gh_env, fake_github, enabled=True, port=port, **settings)
        started.append(Receiver.start(gh_env, port))
        return started[-1]

    yield start
    for receiver in started:
        receiver.stop()
    kill_lock_holders(gh_env.root)


@pytest.fixture
def receiver(start_receiver: Callable[..., Receiver]) -> Receiver:
    return start_receiver()


# --------------------------------------------------------------------------------------------------- world


@pytest.fixture
def gh_world(gh_env: LoopEnv, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[MakeWorld]:
    """``gh_world(ingress="webhook", *, in_process=False, …, **routing)`` → a :class:`GitHubWorld` (see
    :mod:`gh_world`): a ``"webhook"`` world's receiver is running, an in-process poller's parts are made on the
    test's ``plugin_host``. Every world is closed at teardown."""
    made: list[GitHubWorld] = []

    def make(
        ingress: Ingress = "webhook",
        *,
        in_process: bool = False,
        repositories: Sequence[str] | None = None,
        plugins: Sequence[str] = (),
        extra: dict[str, Any] | None = None,
        polling: dict[str, Any] | None = None,
        **routing: Any,
    ) -> GitHubWorld:
        world = GitHubWorld(
            gh_env, ingress, repositories=repositories, plugins=plugins, extra=extra, polling=polling, routing=routing
        )
        made.append(world)
        if ingress == "webhook":
            world.start_receiver()
        if in_process:
            assert ingress == "poller", "only the poller runs in process"
            world.run_in_process(request.getfixturevalue("plugin_host"), monkeypatch)
        return world

    yield make
    for world in made:
        world.close()
    kill_lock_holders(gh_env.root)
