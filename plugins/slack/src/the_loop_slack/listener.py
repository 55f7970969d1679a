"""The Socket Mode listener: slack-sdk's built-in ``SocketModeClient``, one per instance (``slack-listener.pid``).

Each ``events_api`` envelope carrying a message is handed to core's claim (inbox write + cursor advance under one
flock) and acknowledged after it — also when handling raised, so one bad envelope is never redelivered forever;
only a claim that stored nothing leaves the envelope unacknowledged, for Slack to send again. An ``interactive``
envelope is acknowledged first (Slack wants it within 3 s; core's claim makes a redelivered press harmless) and a
press on the kickoff repository picker then goes to ``press_sink``; other presses and ``slash_commands`` are
acknowledged and ignored (later); other types are ignored.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import InboundMessage, Press, ServiceContext

if TYPE_CHECKING:
    from slack_sdk.socket_mode.request import SocketModeRequest

    from the_loop_slack.channel import SlackChannel

ACKED_TYPES = ("events_api", "interactive", "slash_commands")
MESSAGE_EVENTS = ("message", "app_mention")


def message_of(request: SocketModeRequest) -> InboundMessage | None:
    """The message an envelope carries, or None (another event type, or no channel/ts)."""
    from the_loop_slack.channel import inbound

    if request.type != "events_api":
        return None
    event = (request.payload or {}).get("event") or {}
    if event.get("type") not in MESSAGE_EVENTS or not event.get("channel") or not event.get("ts"):
        return None
    return inbound(str(event["channel"]), event)


def handler(
    sink: Callable[[InboundMessage], str], press_sink: Callable[[Press], str] | None = None
) -> Callable[[Any, SocketModeRequest], None]:
    """The per-envelope listener: claim first, then acknowledge (see the module docstring)."""
    from slack_sdk.socket_mode.response import SocketModeResponse

    from the_loop_slack.picker import press_of

    def on_request(client: Any, request: SocketModeRequest) -> None:
        if request.type not in ACKED_TYPES:
            return
        if request.type == "interactive":
            client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
            try:
                press = press_of(request.payload or {})
                if press is not None and press_sink is not None:
                    press_sink(press)
            except Exception as exc:
                events.emit("channel.handler_failed", level="error", channel="slack", error=f"{type(exc).__name__}")
            return
        outcome = "ignored"
        try:
            message = message_of(request)
            if message is not None:
                outcome = sink(message)
        except Exception as exc:
            events.emit("channel.handler_failed", level="error", channel="slack", error=f"{type(exc).__name__}")
        if outcome != "claim-failed":
            client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    return on_request


def probe_scopes(channel: SlackChannel) -> None:
    """At connect: log the scopes the token lacks for what is configured (``channel.scope_missing``)."""
    from the_loop.interfaces import ChannelError

    try:
        missing = channel.missing_scopes()
    except ChannelError as exc:
        events.emit("channel.scope_probe_failed", level="warning", channel="slack", error=str(exc))
        return
    if missing:
        events.emit("channel.scope_missing", level="warning", channel="slack", scopes=missing)


def on_hello(connected: Callable[[], None], channel: SlackChannel) -> Callable[[str], None]:
    """Each ``hello`` (a first connect or a reconnect): core's catch-up read, and the scope probe beside it."""

    def listener(raw: str) -> None:
        try:
            kind = json.loads(raw).get("type")
        except (ValueError, AttributeError):
            return
        if kind == "hello":
            connected()
            threading.Thread(target=probe_scopes, args=(channel,), name="the-loop-slack-scopes", daemon=True).start()

    return listener


def run_socket_mode(
    channel: SlackChannel,
    sink: Callable[[InboundMessage], str],
    should_stop: Callable[[], bool],
    connected: Callable[[], None] = lambda: None,
    press_sink: Callable[[Press], str] | None = None,
) -> None:
    from slack_sdk.socket_mode.builtin import SocketModeClient

    from the_loop_slack.channel import guarded_logger

    client = SocketModeClient(
        app_token=channel.token("app"),
        web_client=channel.client(),
        logger=guarded_logger("the_loop_slack.socket"),
        concurrency=1,  # envelopes in arrival order
    )
    client.socket_mode_request_listeners.append(handler(sink, press_sink))
    client.on_message_listeners.append(on_hello(connected, channel))
    client.connect()
    try:
        while not should_stop():
            time.sleep(0.2)
    finally:
        client.close()


def run_service(context: ServiceContext) -> None:
    """``the-loop daemon run slack-listener`` (and ``channels listen``): the listener until told to stop."""
    from the_loop.toolkit import channels, standing_sink
    from the_loop_slack.channel import SlackChannel

    config = context.config
    channels.listen(config, SlackChannel(config), context.should_stop, standing_sink(config))
