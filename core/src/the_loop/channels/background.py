"""The read loops a daemon runs for every enabled channel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from the_loop.channels import outbox as channel_outbox
from the_loop.channels.conversations import enabled_channels
from the_loop.channels.publish import drain
from the_loop.channels.read import _every, read_cycle
from the_loop.channels.standing import Sink
from the_loop.interfaces import ReadingChannel

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def start_background(
    config: LoadedConfig, should_stop: Callable[[], bool], standing: Sink | None = None
) -> list[threading.Thread]:
    """The daemons' channel threads: the undelivered-queue drainer (once a minute) and a poll reader per channel
    that reads (a :class:`~the_loop.interfaces.ReadingChannel`) with ``read_mode`` ``poll``. Nothing when no channel
    is enabled. ``standing`` takes the messages in standing sessions' threads."""
    channels = enabled_channels(config)
    if not channels:
        return []
    threads = [_every(channel_outbox.DRAIN_INTERVAL, should_stop, lambda: drain(config), "the-loop-channel-drain")]
    for channel in channels:
        if isinstance(channel, ReadingChannel) and channel.read_mode() == "poll":
            interval = channel.read_interval()
            cycle = lambda channel=channel: read_cycle(config, channel, standing)  # noqa: E731
            threads.append(_every(interval, should_stop, cycle, f"the-loop-{channel.name}-reader"))
    return threads
