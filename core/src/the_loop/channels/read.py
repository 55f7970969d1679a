"""Reading replies: the order of the drops, the claim into the inbox, the acknowledgement."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.channels import kickoff
from the_loop.channels import standing as owned
from the_loop.channels.conversations import (
    COMMAND_KIND,
    PROCESSED_SUBTYPES,
    REPLY_KIND,
    _lock,
    bindings,
    label,
)
from the_loop.channels.inbound import (
    MENTION,
    _number,
    acknowledge,
    advance_shared,
    drop,
    newer,
    shared_cursor,
    tell,
    without_bot,
)
from the_loop.channels.ticket import _HTML_COMMENT, envelope
from the_loop.interfaces import ChannelError, InboundMessage, Press, ReadingChannel
from the_loop.refs import parse_ref
from the_loop.state import StateError, locked

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import InboundEvent


def cursor(config: LoadedConfig, name: str, ref: str, thread: str) -> str:
    """The newest message this machine processed in ``thread``: the newer of the work item's session record here
    and ``channels/<name>.json`` (the latter always has it, so a cleanup that deletes the record loses nothing)."""

    best = shared_cursor(config, name, thread)
    record = config.registry.load(ref)
    if record is not None:
        local = ((record.channels.get(name) or {}).get("cursors") or {}).get(thread)
        if isinstance(local, str) and newer(local, best):
            best = local
    return best


def _advance(config: LoadedConfig, name: str, ref: str, thread: str, ts: str) -> None:
    """Move the thread's cursor to ``ts`` (caller holds the channel lock): in ``channels/<name>.json`` always, and
    in the work item's session record when it has one here."""
    from the_loop.state.registry import SessionRecord

    advance_shared(config, name, thread, ts)
    registry = config.registry
    if registry.load(ref) is not None:

        def change(record: SessionRecord) -> None:
            section = record.channels.setdefault(name, {})
            section.setdefault("cursors", {})[thread] = ts

        registry.update(ref, change)


def _speaker(config: LoadedConfig, name: str, ref: str, author: str) -> str:
    """``allowed`` (on the allow-list, ``routing.authorizedUsers[].<name>``, a member id compared exactly, as the
    router does), ``collaborator`` (on the item's roster: input only, never a binding act) or "" (a stranger). An
    empty list lets nobody in."""
    return control.standing(config, [ref], name, author)


def dedupe_key(name: str, message: InboundMessage) -> str:
    return f"{name}:{message.channel_id}:{message.message_id}"


def _inbound(
    channel: ReadingChannel, message: InboundMessage, ref: str, transport: str, permalink: str, bot: str
) -> InboundEvent:
    from the_loop.models import Actor, InboundEvent

    key = dedupe_key(channel.name, message)
    text = without_bot(message.text, bot)
    return InboundEvent(
        dedupe_key=key,
        delivery_id=key,
        provider=channel.name,
        transport=transport,  # type: ignore[arg-type]
        event="reply",
        kind="reply",
        actor=Actor(provider=channel.name, id=message.author_id),
        body=text,
        entity=ref,
        work_items=(ref,),
        url=permalink,
        excerpt={"from": f"{channel.name}:{message.author_id}", "workItem": ref, "text": text},
        attachments=tuple(dict(file) for file in message.files),
        received_at=events.timestamp(),
    )


def find_ref(config: LoadedConfig, name: str, channel_id: str, thread: str) -> tuple[str, dict[str, Any]] | None:
    """The work item bound to ``thread`` in ``channel_id`` (a bound thread only: never guessed)."""
    for ref, bound in bindings(config, name):
        if bound["channel"] == channel_id and bound["thread"] == thread:
            return ref, bound
    return None


def room_of(config: LoadedConfig, name: str, channel_id: str) -> tuple[str, dict[str, Any]] | None:
    """The work item whose declared room ``channel_id`` is (``collaborationChannels``, D §2.7), with its declaration;
    None when no open item declares it — or more than one does: a contested room attributes nothing."""
    from the_loop.control.grants import holder

    holders = holder(config, f"{name}@{channel_id}")
    if len(holders) != 1:
        return None
    from the_loop.control.grants import declared_channels

    entry = next(e for e in declared_channels(config, holders[0]) if e["target"] == channel_id)
    return holders[0], {**entry, "permalink": ""}


def accept(
    config: LoadedConfig,
    channel: ReadingChannel,
    message: InboundMessage,
    transport: str,
    *,
    bound: tuple[str, dict[str, Any]] | None = None,
    bot_id: str | None = None,
    later: Callable[[Callable[[], None]], None] | None = None,
    standing: owned.Sink | None = None,
) -> str:
    """Take one read message through the inbound pipeline; its outcome (``accepted``, ``duplicate`` or a drop
    reason). Claimed — inbox write and cursor advance under one flock — before it is acknowledged. What follows
    the claim (the reaction, a relayed command, a private note) goes to ``later`` when given, so a listener can
    acknowledge the platform's delivery at once (Slack wants it within 3 s). A message in a standing session's
    thread goes to ``standing`` instead (:mod:`~the_loop.channels.standing`)."""
    run = later or (lambda work: work())
    if message.subtype not in PROCESSED_SUBTYPES:  # edits, deletes, joins: never new input
        return drop(channel, message, "unsupported-subtype", level="debug")
    top_level = message.message_id == message.thread_id
    if bound is None and not top_level:
        owner = owned.owner_of(config, channel.name, message.channel_id, message.thread_id)
        if owner:
            bot = channel.bot_identity() if bot_id is None else bot_id
            return owned.accept(config, channel, message, owner, bot, run, standing)
        bound = find_ref(config, channel.name, message.channel_id, message.thread_id)
    key = message.thread_id  # the cursor this message moves: its thread's, or the room's
    room = None
    if bound is None:  # a bound thread wins over the room it is in (issue-375)
        room = room_of(config, channel.name, message.channel_id)
        key = f"channel:{message.channel_id}"
    if bound is None and room is None:
        if top_level and kickoff.is_central(channel, message):  # a kickoff in the central conversation
            return kickoff.accept(config, channel, message, channel.bot_identity() if bot_id is None else bot_id, later)
        return drop(channel, message, "unmapped", level="debug")
    ref, conversation = bound or room  # type: ignore[misc]
    bot = channel.bot_identity() if bot_id is None else bot_id
    if room is not None and room[1].get("listen") != "all" and not (bot and f"<@{bot}" in message.text):
        return drop(channel, message, "not-addressed", ref, level="debug")  # a mentions room hears only mentions
    reason, speaker, kind = "", "", ""
    if message.is_bot or (bot and message.author_id == bot):
        reason = "self-authored"  # before anyone's identity is read
    elif not message.author_id or not (speaker := _speaker(config, channel.name, ref, message.author_id)):
        reason = "unauthorized-actor"  # before the text is read
    elif not bot and MENTION.search(message.text):
        reason = "no-bot-id"  # the bot's own mention cannot be told apart: never recorded as prose
    if not reason:
        routing = config.core.routing
        parsed = control.parse(without_bot(message.text, bot), routing.control.keywords)
        kind = COMMAND_KIND if parsed.command and routing.control.enabled else REPLY_KIND
        if kind != REPLY_KIND and speaker != "allowed":
            reason = "unauthorized-act"  # a collaborator may only reply
        elif kind not in channel.granted():
            reason = "unpublishable-event"  # dropped, never downgraded to a plain reply
    claimed = "duplicate"
    try:
        with locked(_lock(config, channel.name)):
            if newer(message.message_id, cursor(config, channel.name, ref, key)):
                claimed = reason or "accepted"
                if claimed == "accepted" and kind == REPLY_KIND:
                    from the_loop.inbox import Inbox

                    event = _inbound(channel, message, ref, transport, conversation.get("permalink", ""), bot)
                    if not Inbox.for_config(config).put(event.dedupe_key, event.inbox_entry()):
                        claimed = "duplicate"
                _advance(config, channel.name, ref, key, message.message_id)
    except (StateError, OSError) as exc:  # not claimed: not acknowledged either, so a later read retries it
        events.emit("channel.claim_failed", level="error", channel=channel.name, work_item=ref, error=str(exc))
        return "claim-failed"
    if claimed == "duplicate":
        return drop(channel, message, "duplicate", ref, level="debug")
    if claimed == "no-bot-id":
        run(lambda: tell(channel, message, "the-loop could not read this message just now; please send it again."))
    if claimed != "accepted":
        return drop(channel, message, claimed, ref, level="warning" if claimed == "unauthorized-actor" else "info")
    events.emit(
        "channel.reply_received",
        channel=channel.name,
        work_item=ref,
        kind=kind,
        gate="none",  # human gates come with the process graph
        channel_id=message.channel_id,
        thread=message.thread_id,
        message=message.message_id,
        author=message.author_id,
        transport=transport,
    )

    def after_claim() -> None:
        acknowledge(channel, message, "received")
        if kind == COMMAND_KIND:
            _relay_command(config, channel, message, ref, without_bot(message.text, bot))

    run(after_claim)
    return "accepted"


def read_cycle(config: LoadedConfig, channel: ReadingChannel, standing: owned.Sink | None = None) -> dict[str, int]:
    """One poll over every bound conversation of a work item that has not ended (each read costs a call against
    the platform's rate limit; a reopen resumes it, from its cursor): read what is newer than its cursor (all
    pages) and accept it. A conversation whose read fails is skipped this cycle, its cursor untouched; a refusal
    with a wait (HTTP 429) ends the cycle, as every further read would be refused too. Standing sessions' threads
    are read too, their messages handed to ``standing``."""
    counts = {"threads": 0, "failed": 0, "messages": 0, "accepted": 0}
    bot = channel.bot_identity()
    for ref, bound in bindings(config, channel.name, open_only=True):
        counts["threads"] += 1
        try:
            messages = channel.read_replies(bound, cursor(config, channel.name, ref, bound["thread"]))
        except Exception as exc:
            counts["failed"] += 1
            events.emit(
                "channel.read_failed",
                level="warning",
                channel=channel.name,
                work_item=ref,
                error=f"{type(exc).__name__}: {exc}"[:500],
                retry_after=getattr(exc, "retry_after", None),
            )
            if getattr(exc, "retry_after", None):
                break
            continue
        for message in messages:
            counts["messages"] += 1
            outcome = accept(config, channel, message, "poll", bound=(ref, bound), bot_id=bot)
            if outcome == "claim-failed":
                break  # a later claim would move the cursor past this one: the thread waits for the next cycle
            if outcome == "accepted":
                counts["accepted"] += 1
    owned.read(config, channel, bot, standing, counts)
    _read_rooms(config, channel, bot, counts)
    counts.update(kickoff.read(config, channel, bot))  # after the bound threads: the central conversation
    return counts


def _read_rooms(config: LoadedConfig, channel: ReadingChannel, bot: str, counts: dict[str, int]) -> None:
    """Poll every declared ``listen: all`` room (a ``mentions`` room hears only mentions, which a listener gets):
    its top-level messages newer than the room's cursor. The first read only records where the room stands, so a
    room's history never becomes input."""
    from the_loop.control.grants import rooms

    for ref, entry in rooms(config, channel.name):
        if entry.get("listen") != "all":
            continue
        room, key = str(entry["target"]), f"channel:{entry['target']}"
        after = cursor(config, channel.name, ref, key)
        try:
            messages = channel.read_top_level(room, after)
        except Exception as exc:
            events.emit(
                "channel.read_failed", level="warning", channel=channel.name, work_item=ref, error=f"{exc}"[:500]
            )
            continue
        counts["rooms"] = counts.get("rooms", 0) + 1
        if not after:
            newest = max((m.message_id for m in messages), key=lambda ts: _number(ts) or 0.0, default="")
            if newest:
                with locked(_lock(config, channel.name)):
                    _advance(config, channel.name, ref, key, newest)
            continue
        for message in messages:
            counts["messages"] += 1
            if accept(config, channel, message, "poll", bot_id=bot) == "accepted":
                counts["accepted"] += 1


def listen(
    config: LoadedConfig,
    channel: ReadingChannel,
    should_stop: Callable[[], bool],
    standing: owned.Sink | None = None,
) -> None:
    """Run ``channel``'s listener, every pushed message through :func:`accept`. Beside it, a catch-up read (what
    was written while nobody listened) runs each time the listener connects (a reconnect too) and again every
    ``catch_up_interval()`` seconds, so a delivery Slack gave up on is still read. The caller holds the channel's
    single-listener lock."""
    connected = threading.Event()

    def catch_up() -> None:
        counts = read_cycle(config, channel, standing)
        events.emit("channel.caught_up", channel=channel.name, **counts)

    interval = channel.catch_up_interval() or float("inf")
    _every(interval, should_stop, catch_up, f"the-loop-{channel.name}-catch-up", wake=connected, first=False)

    jobs: queue.Queue[Callable[[], None]] = queue.Queue()  # what follows a claim, in arrival order

    def follow_up() -> None:
        while not should_stop() or not jobs.empty():
            try:
                job = jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                job()
            except Exception as exc:
                events.emit("channel.handler_failed", level="error", channel=channel.name, error=f"{exc}"[:500])

    threading.Thread(target=follow_up, name=f"the-loop-{channel.name}-follow-up", daemon=True).start()

    def sink(message: InboundMessage) -> str:
        try:
            return accept(config, channel, message, "socket", later=jobs.put, standing=standing)
        except Exception as exc:  # one bad message never ends the listener
            events.emit("channel.handler_failed", level="error", channel=channel.name, error=f"{exc}"[:500])
            return "error"

    def pressed(press: Press) -> str:  # a press on the kickoff picker
        try:
            return kickoff.answer(config, channel, press)
        except Exception as exc:
            events.emit("channel.handler_failed", level="error", channel=channel.name, error=f"{exc}"[:500])
            return "error"

    channel.listen(sink, should_stop, connected.set, pressed)


def _relay_command(config: LoadedConfig, channel: ReadingChannel, message: InboundMessage, ref: str, text: str) -> None:
    """A granted control keyword goes onto the ticket unmarked, words first (issue-498), so the ticket ingress acts
    on it; nothing is delivered into the session from here."""
    item = parse_ref(ref)
    provider = config.tickets(item)
    who = f"{label(config, channel.name, message.author_id)} ({channel.name}:{message.author_id})"
    body = f"{_HTML_COMMENT.sub('', text).strip()}\n\n(relayed from {who})\n\n" + envelope(
        COMMAND_KIND, channel.name, message.author_id
    )
    try:
        if provider is None:
            raise ChannelError(f"no ticket provider for {item.provider}:")
        provider.post_comment(item, body)
    except Exception as exc:
        events.emit("channel.mirror_failed", level="warning", channel=channel.name, work_item=ref, error=str(exc))
        acknowledge(channel, message, "error")
        return
    events.emit("channel.mirrored", channel=channel.name, work_item=ref, kind=COMMAND_KIND, message=message.message_id)
    acknowledge(channel, message, "completed")


def _every(
    interval: float,
    should_stop: Callable[[], bool],
    work: Callable[[], Any],
    name: str,
    *,
    wake: threading.Event | None = None,
    first: bool = True,
) -> threading.Thread:
    """A daemon thread running ``work`` every ``interval`` seconds (on a monotonic deadline), at once unless
    ``first`` is false, and whenever ``wake`` is set."""

    def loop() -> None:
        deadline = time.monotonic() if first else time.monotonic() + interval
        while not should_stop():
            if (wake is not None and wake.is_set()) or time.monotonic() >= deadline:
                if wake is not None:
                    wake.clear()
                try:
                    work()
                except Exception as exc:  # one raising cycle is logged; the thread lives
                    events.emit(
                        "channel.cycle_failed", level="error", thread=name, error=f"{type(exc).__name__}: {exc}"
                    )
                deadline = time.monotonic() + interval
            time.sleep(0.2)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
