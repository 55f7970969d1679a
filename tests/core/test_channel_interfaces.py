"""A channel that only publishes is never read from; one that implements ReadingChannel is (hooks.md, Channels)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from the_loop import hookimpl
from the_loop.channels import start_background
from the_loop.config import LoadedConfig, load_config
from the_loop.interfaces import Channel, ChannelMessage, ReadingChannel
from the_loop.refs import WorkItemRef
from the_loop.testing import TestHost


class Publisher(Channel):
    name: ClassVar[str] = "publisher"

    @classmethod
    def enabled(cls, config: LoadedConfig) -> bool:
        return True

    def open_conversation(self, ref: WorkItemRef, title: str) -> Mapping[str, Any]:
        return {"channel": "c", "thread": "1"}

    def publish(self, binding: Mapping[str, Any], message: ChannelMessage) -> None:
        return None


class Reader(ReadingChannel, Publisher):
    name: ClassVar[str] = "reader"

    def read_mode(self) -> str:  # type: ignore[override]
        return "poll"


class Channels:
    @hookimpl
    def loop_register_channels(self) -> list[type[Channel]]:
        return [Publisher, Reader]


def test_only_a_reading_channel_gets_a_reader_thread(plugin_host: TestHost, tmp_path: Path) -> None:
    plugin_host.register(Channels(), "channels")
    path = tmp_path / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text('version: "0.12.0"\n', encoding="utf-8")
    config = load_config(path, plugin_host, load_env=False)
    threads = start_background(config, should_stop=lambda: True)
    assert sorted(thread.name for thread in threads) == ["the-loop-channel-drain", "the-loop-reader-reader"]
