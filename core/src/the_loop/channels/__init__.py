"""Channels: one human conversation per work item beside its ticket (D §2.2 to §2.6, decision 10).

Core's half of every channel (Slack today; a Teams or Discord plugin plugs into the same calls). A channel plugin
registers a :class:`~the_loop.interfaces.Channel` and does transport and rendering only; this module does the rest:

- **Binding** — the work item's conversation lives in its portable record (``channels.<name>``: channel, thread,
  opened, origin, permalink), so every machine finds the same one. It is decided under the flock on
  ``local/locks/channel-<name>-open.lock``: the root post happens inside it, so one work item never gets two
  roots (a lock of its own, so a slow root never holds up the claims).
- **Publish** — an event goes to every enabled channel subscribed to its type; when none accepts it, it waits in
  the undelivered queue (:mod:`the_loop.channels.outbox`), and a later event of the same work item queues behind it.
- **Read** — replies (polled or pushed by a listener) pass, in order: edits and deletes dropped, unmapped threads
  dropped, the channel's own messages dropped, strangers dropped before their text is read, a mention while the
  channel's own id is unknown dropped, the bot's mention taken out, a collaborator's control keyword dropped,
  ungranted kinds dropped.
  What remains is *claimed* — written to the durable inbox and the thread's cursor advanced under one flock — and
  only then acknowledged. The router later mirrors it onto the ticket and delivers it (:func:`routed`); a work item
  with no session is never first-spawned by a reply.

Events carry ids (work item, channel, thread, message), never message text or tokens.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.channels import outbox as channel_outbox
from the_loop.interfaces import Channel, ChannelError, ChannelMessage, InboundMessage
from the_loop.refs import WorkItemRef, parse_ref
from the_loop.routing import control
from the_loop.state import StateError, atomic_write_json, locked, read_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import InboundEvent
    from the_loop.routing.router import Router
    from the_loop.sessions.dispatcher import Outcome

PROCESSED_SUBTYPES = ("", "thread_broadcast", "file_share")
CONTENT_KINDS = ("comment", "review", "review-comment")
REPLY_KIND = "work-item.reply"
COMMAND_KIND = "control.command"
BOUND_ONLY = ("work-item.closed",)  # published only into a conversation that already exists
PUBLISHED_CAP = 500


# ------------------------------------------------------------------------------------------------ lookup


def installed() -> dict[str, type[Channel]]:
    from the_loop.plugins import get_host

    return get_host().channels()


def enabled_channels(config: LoadedConfig) -> list[Channel]:
    """Every installed channel ``config`` turns on; a channel whose check raises counts as off."""
    found = []
    for cls in installed().values():
        try:
            if cls.enabled(config):
                found.append(cls(config))
        except Exception as exc:
            events.emit("channel.disabled", level="error", channel=cls.name, error=f"{type(exc).__name__}: {exc}")
    return found


def channel_named(config: LoadedConfig, name: str) -> Channel | None:
    return next((channel for channel in enabled_channels(config) if channel.name == name), None)


def state_path(config: LoadedConfig, name: str) -> Path:
    return config.state.root / "channels" / f"{name}.json"


def _lock(config: LoadedConfig, name: str) -> Path:
    path = state_path(config, name)
    return path.with_name(path.name + ".lock")


def _open_lock(config: LoadedConfig, name: str) -> Path:
    """Held while a root is posted: apart from the claim lock, so a slow post never stalls a reply's claim."""
    return config.state.lock_for(f"channel-{name}-open")


def _store(config: LoadedConfig) -> Any:
    from the_loop.state.store import WorkItemStore

    return WorkItemStore(config.state, config=config)


def binding(config: LoadedConfig, name: str, ref: WorkItemRef | str) -> dict[str, Any] | None:
    """The work item's conversation on channel ``name``, or None when unbound."""
    record = _store(config).read(ref) or {}
    found = (record.get("channels") or {}).get(name)
    if isinstance(found, dict) and found.get("channel") and "thread" in found:
        return found
    return None


def bindings(config: LoadedConfig, name: str, *, open_only: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Every bound work item of channel ``name``: (ref, binding), sorted by ref; with ``open_only``, not those
    that ended (closed or merged)."""
    found = []
    for record in _store(config).list():
        bound = (record.get("channels") or {}).get(name)
        if open_only and record.get("ended"):
            continue
        if isinstance(bound, dict) and bound.get("channel") and bound.get("thread"):
            found.append((record["ref"], bound))
    return found


# -------------------------------------------------------------------------------------------------- open


def open_conversation(config: LoadedConfig, channel: Channel, ref: WorkItemRef, origin: str) -> dict[str, Any]:
    """The work item's binding, posting its root first when it has none (idempotent: a bound item makes no call
    and emits nothing). Raises :class:`ChannelError` when no root could be made."""
    with locked(_open_lock(config, channel.name)):
        found = binding(config, channel.name, ref)
        if found is not None:
            return found
        made = dict(channel.open_conversation(ref, str(ref)))
        if not made:
            return {}  # a channel with no conversations to bind (nothing to remember)
        if not made.get("channel") or not made.get("thread"):
            raise ChannelError(f"{channel.name} made no root for {ref}")
        bound = {
            "channel": str(made["channel"]),
            "thread": str(made["thread"]),
            "opened": events.timestamp(),
            "origin": origin,
            "permalink": str(made.get("permalink") or ""),
        }
        _store(config).update_section(ref, "channels", lambda current: {**(current or {}), channel.name: bound})
    events.emit(
        "channel.thread_opened",
        channel=channel.name,
        work_item=str(ref),
        thread=bound["thread"],
        channel_id=bound["channel"],
        origin=origin,
    )
    return bound


def open_for_start(config: LoadedConfig, ref: WorkItemRef) -> None:
    """An accepted start, before the checkout: open the conversation on every enabled channel. A failure is
    logged (``channel.open_failed``) and never affects the spawn; the next event opens it lazily."""
    for channel in enabled_channels(config):
        try:
            open_conversation(config, channel, ref, "start")
        except Exception as exc:
            events.emit(
                "channel.open_failed",
                level="warning",
                channel=channel.name,
                work_item=str(ref),
                error=f"{type(exc).__name__}: {exc}",
            )


# ----------------------------------------------------------------------------------------------- publish


def _post(config: LoadedConfig, channel: Channel, event: Mapping[str, Any]) -> None:
    """Post one queued-shape event on ``channel``, opening the conversation lazily (origin ``event``)."""
    work_item = str(event.get("workItem") or "")
    bound: Mapping[str, Any] = {}
    if work_item:
        bound = open_conversation(config, channel, parse_ref(work_item), "event")
    message = ChannelMessage(
        event_type=str(event.get("eventType") or ""),
        work_item=work_item,
        text=str(event.get("text") or ""),
        url=str(event.get("url") or ""),
        actor=str(event.get("actor") or ""),
        max_chars=channel.max_chars(),
    )
    channel.publish(bound, message)
    events.emit(
        "channel.posted",
        channel=channel.name,
        work_item=work_item or None,
        event_type=message.event_type,
        thread=bound.get("thread") or None,
    )


def publish(
    config: LoadedConfig,
    event_type: str,
    work_item: WorkItemRef | str,
    *,
    text: str = "",
    url: str = "",
    actor: str = "",
    source: str = "loop",
    key: str = "",
) -> list[str]:
    """Post an event to every enabled channel subscribed to ``event_type`` (never the one it came from); the
    names that accepted it. When channels were asked and none accepted, it is queued. With ``key``, an event
    already published under it is not published again (an inbox retry). Never raises."""
    event = {"eventType": event_type, "workItem": str(work_item), "text": text, "url": url, "actor": actor}
    event["source"] = source
    asked, accepted, errors = [], [], []
    retry_after: float | None = None
    try:
        channels = enabled_channels(config)
    except Exception as exc:  # a broken plugin host must not fail the publisher
        events.emit("channel.post_failed", level="warning", event_type=event_type, error=str(exc))
        return []
    for channel in channels:
        if channel.name == source or event_type not in channel.subscribed():
            continue
        if event_type in BOUND_ONLY and (not str(work_item) or binding(config, channel.name, work_item) is None):
            continue  # saying a work item closed is no reason to open a conversation for it
        if key and not _first_publish(config, channel.name, key):
            continue
        asked.append(channel.name)
        if str(work_item) and channel_outbox.pending_for(config, str(work_item), channel.name):
            errors.append("queued behind the work item's undelivered events")  # order within a conversation
            continue
        try:
            _post(config, channel, event)
            accepted.append(channel.name)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            retry_after = getattr(exc, "retry_after", None) or retry_after
            errors.append(error)
            events.emit(
                "channel.post_failed",
                level="warning",
                channel=channel.name,
                work_item=str(work_item) or None,
                event_type=event_type,
                error=error[:500],
            )
    if asked and not accepted:
        channel_outbox.queue(config, asked, event, "; ".join(errors), retry_after=retry_after)
    return accepted


def _first_publish(config: LoadedConfig, name: str, key: str) -> bool:
    """Claim ``key`` in ``channels/<name>.json`` (the newest :data:`PUBLISHED_CAP`); False when it was claimed before.
    Claimed before the post: at most once, and a failed post is still queued."""
    try:
        with locked(_lock(config, name)):
            data = _shared(config, name)
            published = [k for k in data.get("published") or [] if isinstance(k, str)]
            if key in published:
                return False
            data["published"] = [*published, key][-PUBLISHED_CAP:]
            atomic_write_json(state_path(config, name), data)
    except (StateError, OSError) as exc:  # the ledger is unwritable: publish anyway (a repeat beats a loss)
        events.emit("channel.post_failed", level="warning", channel=name, error=str(exc)[:500])
    return True


def drain(config: LoadedConfig, now: float | None = None) -> channel_outbox.DrainReport:
    """One drain of the undelivered queue (re-posts only; never the ticket)."""
    by_name = {channel.name: channel for channel in enabled_channels(config)}

    def post(name: str, event: Mapping[str, Any]) -> None:
        channel = by_name.get(name)
        if channel is None:
            raise ChannelError(f"channel {name} is not enabled")
        _post(config, channel, event)

    return channel_outbox.drain(config, post, now=now)


# -------------------------------------------------------------------------------------------------- read


def _number(ts: str) -> float | None:
    try:
        return float(ts)
    except ValueError:
        return None


def newer(ts: str, cursor: str) -> bool:
    """Whether message id ``ts`` comes after ``cursor`` (numerically when both are numbers: Slack ``ts``)."""
    if not cursor:
        return True
    a, b = _number(ts), _number(cursor)
    return a > b if a is not None and b is not None else ts > cursor


def _shared(config: LoadedConfig, name: str) -> dict[str, Any]:
    return read_json(state_path(config, name)) or {}


def cursor(config: LoadedConfig, name: str, ref: str, thread: str) -> str:
    """The newest message this machine processed in ``thread``: the newer of the work item's session record here
    and ``channels/<name>.json`` (the latter always has it, so a cleanup that deletes the record loses nothing)."""
    from the_loop.state.registry import SessionRegistry

    found = (_shared(config, name).get("cursors") or {}).get(thread)
    best = found if isinstance(found, str) else ""
    record = SessionRegistry(config.state).load(ref)
    if record is not None:
        local = ((record.channels.get(name) or {}).get("cursors") or {}).get(thread)
        if isinstance(local, str) and newer(local, best):
            best = local
    return best


def _advance(config: LoadedConfig, name: str, ref: str, thread: str, ts: str) -> None:
    """Move the thread's cursor to ``ts`` (caller holds the channel lock): in ``channels/<name>.json`` always, and
    in the work item's session record when it has one here."""
    from the_loop.state.registry import SessionRecord, SessionRegistry

    path = state_path(config, name)
    data = _shared(config, name)
    cursors = data.get("cursors") if isinstance(data.get("cursors"), dict) else {}
    cursors[thread] = ts
    data["cursors"] = cursors
    atomic_write_json(path, data)
    registry = SessionRegistry(config.state)
    if registry.load(ref) is not None:

        def change(record: SessionRecord) -> None:
            section = record.channels.setdefault(name, {})
            section.setdefault("cursors", {})[thread] = ts

        registry.update(ref, change)


def _speaker(config: LoadedConfig, name: str, ref: str, author: str) -> str:
    """``allowed`` (on the allow-list, ``routing.authorizedUsers[].<name>``, a member id compared exactly, as the
    router does), ``collaborator`` (on the item's roster: input only, never a binding act) or "" (a stranger). An
    empty list lets nobody in."""
    if any(p.matches(name, author) for p in control.principals(config)):
        return "allowed"
    return "collaborator" if control.is_collaborator(config, [ref], name, author) else ""


def label(config: LoadedConfig, name: str, author: str) -> str:
    """The person's name from the allow-list (``dana``), else their member id."""
    for entry in config.core.routing.authorized_users:
        if not isinstance(entry, str) and entry.name and str(getattr(entry, name, "") or "") == author:
            return entry.name
    return author


_MENTION = re.compile(r"<@[UW][A-Z0-9_-]{1,20}(?:\|[^>]*)?>")


def without_bot(text: str, bot: str) -> str:
    """``text`` with the bot's own ``<@id>`` mentions taken out (someone else's mention stays)."""
    return re.sub(rf"<@{re.escape(bot)}(?:\|[^>]*)?>", "", text).strip() if bot else text


def _drop(channel: Channel, message: InboundMessage, reason: str, ref: str = "", level: str = "info") -> str:
    events.emit(
        "channel.dropped",
        level=level,
        channel=channel.name,
        reason=reason,
        work_item=ref or None,
        channel_id=message.channel_id,
        thread=message.thread_id,
        message=message.message_id,
        author=message.author_id if reason != "self-authored" else None,
    )
    return reason


def dedupe_key(name: str, message: InboundMessage) -> str:
    return f"{name}:{message.channel_id}:{message.message_id}"


def _inbound(
    channel: Channel, message: InboundMessage, ref: str, transport: str, permalink: str, bot: str
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
        received_at=events.timestamp(),
    )


def find_ref(config: LoadedConfig, name: str, channel_id: str, thread: str) -> tuple[str, dict[str, Any]] | None:
    """The work item bound to ``thread`` in ``channel_id`` (a bound thread only: never guessed)."""
    for ref, bound in bindings(config, name):
        if bound["channel"] == channel_id and bound["thread"] == thread:
            return ref, bound
    return None


def accept(
    config: LoadedConfig,
    channel: Channel,
    message: InboundMessage,
    transport: str,
    *,
    bound: tuple[str, dict[str, Any]] | None = None,
    bot_id: str | None = None,
    later: Callable[[Callable[[], None]], None] | None = None,
) -> str:
    """Take one read message through the inbound pipeline; its outcome (``accepted``, ``duplicate`` or a drop
    reason). Claimed — inbox write and cursor advance under one flock — before it is acknowledged. What follows
    the claim (the reaction, a relayed command, a private note) goes to ``later`` when given, so a listener can
    acknowledge the platform's delivery at once (Slack wants it within 3 s)."""
    run = later or (lambda work: work())
    if message.subtype not in PROCESSED_SUBTYPES:  # edits, deletes, joins: never new input
        return _drop(channel, message, "unsupported-subtype", level="debug")
    if message.message_id == message.thread_id:  # top-level: kickoff is later; no record is read for it
        return _drop(channel, message, "unmapped", level="debug")
    bound = bound or find_ref(config, channel.name, message.channel_id, message.thread_id)
    if bound is None:
        return _drop(channel, message, "unmapped", level="debug")
    ref, conversation = bound
    bot = channel.bot_identity() if bot_id is None else bot_id
    reason, speaker, kind = "", "", ""
    if message.is_bot or (bot and message.author_id == bot):
        reason = "self-authored"  # before anyone's identity is read
    elif not message.author_id or not (speaker := _speaker(config, channel.name, ref, message.author_id)):
        reason = "unauthorized-actor"  # before the text is read
    elif not bot and _MENTION.search(message.text):
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
            if newer(message.message_id, cursor(config, channel.name, ref, message.thread_id)):
                claimed = reason or "accepted"
                if claimed == "accepted" and kind == REPLY_KIND:
                    from the_loop.ingress.inbox import Inbox

                    event = _inbound(channel, message, ref, transport, conversation.get("permalink", ""), bot)
                    if not Inbox.for_config(config).put(event.dedupe_key, event.inbox_entry()):
                        claimed = "duplicate"
                _advance(config, channel.name, ref, message.thread_id, message.message_id)
    except (StateError, OSError) as exc:  # not claimed: not acknowledged either, so a later read retries it
        events.emit("channel.claim_failed", level="error", channel=channel.name, work_item=ref, error=str(exc))
        return "claim-failed"
    if claimed == "duplicate":
        return _drop(channel, message, "duplicate", ref, level="debug")
    if claimed == "no-bot-id":
        run(lambda: _tell(channel, message, "the-loop could not read this message just now; please send it again."))
    if claimed != "accepted":
        return _drop(channel, message, claimed, ref, level="warning" if claimed == "unauthorized-actor" else "info")
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
        _acknowledge(config, channel, message, "received")
        if kind == COMMAND_KIND:
            _relay_command(config, channel, message, ref, without_bot(message.text, bot))

    run(after_claim)
    return "accepted"


def _tell(channel: Channel, message: InboundMessage, text: str) -> None:
    try:
        channel.tell(message, text)
    except Exception as exc:
        events.emit("channel.tell_failed", level="warning", channel=channel.name, error=f"{type(exc).__name__}")


def _acknowledge(config: LoadedConfig, channel: Channel, message: InboundMessage, state: str) -> None:
    try:
        channel.acknowledge(message, state)  # type: ignore[arg-type]
    except Exception as exc:
        events.emit(
            "channel.reaction_failed",
            level="warning",
            channel=channel.name,
            message=message.message_id,
            state=state,
            error=f"{type(exc).__name__}: {exc}",
        )


def read_cycle(config: LoadedConfig, channel: Channel) -> dict[str, int]:
    """One poll over every bound conversation of a work item that has not ended (each read costs a call against
    the platform's rate limit; a reopen resumes it, from its cursor): read what is newer than its cursor (all
    pages) and accept it. A conversation whose read fails is skipped this cycle, its cursor untouched; a refusal
    with a wait (HTTP 429) ends the cycle, as every further read would be refused too."""
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
    return counts


def listen(config: LoadedConfig, channel: Channel, should_stop: Callable[[], bool]) -> None:
    """Run ``channel``'s listener, every pushed message through :func:`accept`. Beside it, a catch-up read (what
    was written while nobody listened) runs each time the listener connects (a reconnect too) and again every
    ``catch_up_interval()`` seconds, so a delivery Slack gave up on is still read. The caller holds the channel's
    single-listener lock."""
    connected = threading.Event()

    def catch_up() -> None:
        counts = read_cycle(config, channel)
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
            return accept(config, channel, message, "socket", later=jobs.put)  # the channel caches its own id
        except Exception as exc:  # one bad message never ends the listener
            events.emit("channel.handler_failed", level="error", channel=channel.name, error=f"{exc}"[:500])
            return "error"

    channel.listen(sink, should_stop, connected.set)


# --------------------------------------------------------------------------------------------- the ticket

_HTML_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
_BROADCAST = re.compile(r"<!(channel|here|everyone)(\|[^>]*)?>")
_TOKEN = re.compile(r"\b(xox[abpr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,})")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")


_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE|CREDENTIAL", re.IGNORECASE)
_USER_PATH = re.compile(r"(/(?:home|Users)/)[^/\s]+")


def scrub(text: str) -> str:
    """Text safe to quote on a ticket: pasted markers and envelopes stripped, broadcasts neutralised, the values of
    secret-named environment variables, token-shaped strings and e-mail addresses replaced, the home directory,
    other users' home paths and this host's name hidden."""
    import os
    import socket

    text = _HTML_COMMENT.sub("", text)
    text = _BROADCAST.sub(lambda m: f"@{m.group(1)}", text)
    for variable, value in os.environ.items():
        if _SECRET_NAME.search(variable) and len(value) >= 8:
            text = text.replace(value, "[redacted]")
    text = _TOKEN.sub("[redacted]", text)
    text = _EMAIL.sub("[email]", text)
    home = os.path.expanduser("~")
    if len(home) > 1:
        text = text.replace(home, "~")
    text = _USER_PATH.sub(r"\1[user]", text)
    host = socket.gethostname()
    if len(host) >= 4:
        text = re.sub(rf"\b{re.escape(host)}\b", "[host]", text)
    return text


def defang(text: str, configured: Mapping[str, str]) -> str:
    """Control keywords in quoted text shown as code, so a quote never reads as a command."""
    for keyword in control.keywords(configured).values():
        pattern = re.escape(keyword).replace(r"\ ", r"[ \t]+")
        text = re.sub(rf"(?<!`)\b({pattern})\b(?!`)", r"`\1`", text, flags=re.IGNORECASE)
    return text


ENVELOPE = "<!-- the-loop:event "


def envelope(kind: str, source: str, actor: str) -> str:
    data = {"actor": {"ids": {source: actor}}, "source": source, "ts": events.timestamp(), "type": kind}
    return ENVELOPE + json.dumps(data, sort_keys=True).replace(">", "\\u003e") + " -->"


def mirror_text(config: LoadedConfig, name: str, message_text: str, author: str) -> str:
    """The ticket record of a reply: who wrote it (label and ``<channel>:<member id>``), the words quoted after
    scrubbing, keywords defanged, then the envelope (the caller adds the self-authored marker)."""
    text = defang(scrub(message_text), config.core.routing.control.keywords)
    quoted = "\n".join(f"> {line}" for line in text.splitlines() or [""])
    who = f"{label(config, name, author)} ({name}:{author})"
    return f"Reply from {who} in the work item's {name} thread:\n\n{quoted}\n\n" + envelope(REPLY_KIND, name, author)


def _ticket(config: LoadedConfig, ref: WorkItemRef) -> Any:
    from the_loop.plugins import ticket_provider

    return ticket_provider(config, ref)


def _relay_command(config: LoadedConfig, channel: Channel, message: InboundMessage, ref: str, text: str) -> None:
    """A granted control keyword goes onto the ticket unmarked, words first (issue-498), so the ticket ingress acts
    on it; nothing is delivered into the session from here."""
    item = parse_ref(ref)
    provider = _ticket(config, item)
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
        _acknowledge(config, channel, message, "error")
        return
    events.emit("channel.mirrored", channel=channel.name, work_item=ref, kind=COMMAND_KIND, message=message.message_id)
    _acknowledge(config, channel, message, "completed")


def routed(router: Router, event: InboundEvent, target: WorkItemRef) -> Outcome | None:
    """The router's one call into channels, at delivery: a channel reply is mirrored and delivered here (the
    outcome); a person's ticket comment is published as ``comment.human`` and delivery goes on (None)."""
    names = installed()
    if event.kind == "reply" and event.provider in names:
        return _deliver_reply(router, event, target)
    body = event.body or ""
    if event.kind in CONTENT_KINDS and event.provider not in names and ENVELOPE not in body and _live(router, target):
        # Only into a live session's conversation: a comment that starts the work is in its boot prompt, and the
        # start opens the thread itself (origin start). A record carrying an envelope came from a channel.
        actor = event.actor.id if event.actor else ""
        # Keyed by the event: an inbox retry of a failed dispatch does not post it again.
        publish(router.config, "comment.human", target, text=body, url=event.url, actor=actor, key=event.dedupe_key)
    return None


def _live(router: Router, target: WorkItemRef) -> bool:
    record = router.registry.load(str(target))
    return record is not None and record.own is not None and record.own.live


def _deliver_reply(router: Router, event: InboundEvent, target: WorkItemRef) -> Outcome:
    from the_loop.sessions.dispatcher import Outcome

    config = router.config
    name = event.provider
    _, channel_id, ts = event.dedupe_key.split(":", 2)
    author = event.actor.id if event.actor else ""
    message = InboundMessage(channel_id=channel_id, thread_id="", message_id=ts, author_id=author, text="")
    channel = channel_named(config, name)
    provider = _ticket(config, target)
    try:
        if provider is None:
            raise ChannelError(f"no ticket provider for {target.provider}:")
        provider.post_comment(target, provider.mark(mirror_text(config, name, event.body or "", author)))
        events.emit("channel.mirrored", channel=name, work_item=str(target), kind=REPLY_KIND, message=ts)
    except Exception as exc:  # the ticket record failed: logged, the reply is still delivered
        events.emit("channel.mirror_failed", level="warning", channel=name, work_item=str(target), error=str(exc))
    outcome = router.dispatcher.dispatch(router._work_event(event, target, spawn=False))
    state = "completed" if outcome.ok else "error"
    if outcome.status == "dropped" and outcome.reason in ("no-session", "session-paused"):
        _drop_undeliverable(name, str(target), channel_id, ts, outcome.reason)
    if channel is not None:
        _acknowledge(config, channel, message, state)
    if outcome.status == "failed":  # at most once: a failed delivery is logged, never replayed
        return Outcome("failed", reason=outcome.reason, error=outcome.error, will_retry=False)
    return outcome


def _drop_undeliverable(name: str, ref: str, channel_id: str, ts: str, why: str) -> None:
    events.emit(
        "channel.dropped",
        level="warning",
        channel=name,
        reason="undeliverable",
        work_item=ref,
        channel_id=channel_id,
        message=ts,
        detail=why,
    )


# ------------------------------------------------------------------------------------------- background


def start_background(config: LoadedConfig, should_stop: Callable[[], bool]) -> list[threading.Thread]:
    """The daemons' channel threads: the undelivered-queue drainer (once a minute) and a poll reader per channel
    whose ``read_mode`` is ``poll``. Nothing when no channel is enabled."""
    channels = enabled_channels(config)
    if not channels:
        return []
    threads = [_every(channel_outbox.DRAIN_INTERVAL, should_stop, lambda: drain(config), "the-loop-channel-drain")]
    for channel in channels:
        if channel.read_mode() == "poll":
            interval = channel.read_interval()
            cycle = lambda channel=channel: read_cycle(config, channel)  # noqa: E731
            threads.append(_every(interval, should_stop, cycle, f"the-loop-{channel.name}-reader"))
    return threads


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
