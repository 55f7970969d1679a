"""Contract tests run against every provider the installed plugins register (the way hatch tests every builder).

Each interface's contract is written once here and applied to every registered implementation, first-party or
example, so a new provider is held to it by being installed. The behaviour of each provider is tested with its
plugin; this checks only what every implementation of the interface owes core.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.config import LoadedConfig, load_config
from the_loop.interfaces import (
    Capabilities,
    Channel,
    HarnessAdapter,
    Launch,
    PollSource,
    ReadingChannel,
    TicketProvider,
    WebhookIngress,
)
from the_loop.plugins import PluginHost
from the_loop.refs import parse_ref

HOST = PluginHost.create()  # every installed distribution, as `the-loop` itself loads them
# One ref per scheme a first-party or example tracker takes; a new tracker adds its own here.
REFS = {"github": "github:octo/repo#15", "jira": "jira:acme.atlassian.net/PROJ-15", "fake": "fake:octo/repo#15"}


def _ids(found: dict[str, Any]) -> list[str]:
    return sorted(found)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoadedConfig]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    # What each tracker needs to take its ref at all (a Jira site and what goes with one); the rest is defaults.
    path.write_text(
        'version: "0.12.0"\n'
        "integrations:\n  jira:\n    site: acme.atlassian.net\n    deployment: data-center\n"
        "    api: {tokenEnv: [JIRA_API_TOKEN]}\n    projects: {PROJ: {repository: octo/repo}}\n",
        encoding="utf-8",
    )
    yield load_config(path, HOST, load_env=False)


def test_every_interface_has_a_registered_provider_to_check() -> None:
    assert HOST.harnesses() and HOST.ticket_providers() and HOST.channels()


@pytest.mark.parametrize("name", _ids(HOST.harnesses()))
def test_a_harness_adapter_keeps_the_adapter_contract(name: str, config: LoadedConfig, tmp_path: Path) -> None:
    cls = HOST.harnesses()[name]
    assert issubclass(cls, HarnessAdapter) and not inspect.isabstract(cls)
    assert cls.name == name and isinstance(cls.capabilities, Capabilities)
    adapter = cls(config)
    launch = Launch(prompt="boot prompt", session_id="00000000-0000-4000-8000-000000000015", cwd=tmp_path)
    if cls.capabilities.tmux_hostable:
        fresh = adapter.fresh_argv(launch)
        assert fresh and all(isinstance(arg, str) for arg in fresh)
        assert "boot prompt" in fresh  # the boot prompt is one argv word, never split or shell-quoted
    if cls.capabilities.can_resume:
        resumed = adapter.resume_argv(launch)
        assert resumed and launch.session_id in resumed
    assert callable(adapter.ready_check(launch))
    assert isinstance(adapter.accepts_session_id(launch.session_id), bool)


@pytest.mark.parametrize("scheme", _ids(HOST.ticket_providers()))
def test_a_ticket_provider_keeps_the_tracker_contract(scheme: str, config: LoadedConfig) -> None:
    cls = HOST.ticket_providers()[scheme]
    assert issubclass(cls, TicketProvider) and not inspect.isabstract(cls)
    assert cls.scheme == scheme
    assert scheme in REFS, f"add a {scheme}: ref to REFS so its provider is checked"
    ref = parse_ref(REFS[scheme])
    provider = cls(config)
    provider.validate(ref)  # its own scheme's ref is accepted
    url = provider.url(ref)
    assert url is None or url.startswith(("https://", "http://"))
    assert all(isinstance(key, str) for key in provider.close_keys(ref))
    repository = provider.code_repository(ref) if ref.key_form else None
    assert repository is None or isinstance(repository, str)


@pytest.mark.parametrize("name", _ids(HOST.channels()))
def test_a_channel_keeps_the_channel_contract(name: str, config: LoadedConfig) -> None:
    cls = HOST.channels()[name]
    assert issubclass(cls, Channel) and not inspect.isabstract(cls)
    assert cls.name == name
    assert isinstance(cls.enabled(config), bool)
    channel = cls(config)
    assert isinstance(channel.subscribed(), Collection)
    assert isinstance(channel.max_chars(), int) and channel.max_chars() > 0
    assert isinstance(channel.health(), str)
    if isinstance(channel, ReadingChannel):
        assert channel.read_mode() in ("poll", "socket", "off")
        assert channel.read_interval() > 0 and channel.catch_up_interval() >= 0
        assert all(isinstance(grant, str) for grant in channel.granted())


def test_every_ingress_a_plugin_registers_is_a_webhook_route_or_a_poll_source(config: LoadedConfig) -> None:
    for ingress in HOST.ingresses(config):
        assert isinstance(ingress, (WebhookIngress, PollSource)), ingress
        assert isinstance(type(ingress).name, str) and type(ingress).name
        if isinstance(ingress, WebhookIngress):
            assert ingress.path.startswith("/")
            assert all(isinstance(problem, str) for problem in ingress.problems())
