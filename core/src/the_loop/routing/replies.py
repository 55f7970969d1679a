"""The router's side of channels: a channel reply it took is mirrored onto the ticket, then delivered into the work
item's live session; a person's ticket comment is published into the work item's conversation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from the_loop import events
from the_loop.channels import attachments
from the_loop.channels.conversations import CONTENT_KINDS, REPLY_KIND, channel_named, installed
from the_loop.channels.inbound import acknowledge
from the_loop.channels.publish import publish
from the_loop.channels.ticket import ENVELOPE, mirror_text
from the_loop.interfaces import ChannelError, InboundMessage, ReadingChannel
from the_loop.refs import WorkItemRef

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import InboundEvent, WorkEvent
    from the_loop.sessions.dispatcher import Dispatcher, Outcome
    from the_loop.state.registry import SessionRegistry


class Router(Protocol):
    """What a reply needs of the router that took it (:class:`the_loop.routing.router.Router` is one)."""

    config: LoadedConfig
    registry: SessionRegistry
    dispatcher: Dispatcher

    def work_event(self, event: InboundEvent, target: WorkItemRef, *, spawn: bool) -> WorkEvent: ...


def routed(router: Router, event: InboundEvent, target: WorkItemRef) -> Outcome | None:
    """The router's one call about channels, at delivery: a channel reply is mirrored and delivered here (the
    outcome); a person's ticket comment is published as ``comment.human`` and delivery goes on (None)."""
    names = installed(router.config)
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
    provider = config.tickets(target)
    waiting = router.dispatcher.waits_at_prompt(str(target))
    if waiting is not None:  # the session waits at a decision prompt: the reply waits too, mirrored once, later
        return waiting
    try:
        if provider is None:
            raise ChannelError(f"no ticket provider for {target.provider}:")
        record = mirror_text(config, name, event.body or "", author) + attachments.mirror_names(event.attachments)
        provider.post_comment(target, provider.mark(record))
        events.emit("channel.mirrored", channel=name, work_item=str(target), kind=REPLY_KIND, message=ts)
    except Exception as exc:  # the ticket record failed: logged, the reply is still delivered
        events.emit("channel.mirror_failed", level="warning", channel=name, work_item=str(target), error=str(exc))
    work = router.work_event(event, target, spawn=False)
    # Every refusal is behind us (authorized, claimed, not held at a prompt): a reply going into a live session has
    # its files fetched now, never earlier — and never for a paused or closed one, which drops it.
    record = router.registry.load(str(target)) if event.attachments else None
    if record is not None and record.own is not None and record.own.status == "active":
        frame = attachments.pane_frame(attachments.fetch_all(config, channel, target, event.attachments))
        work = work.model_copy(update={"text": work.text + "\n" + frame})
    outcome = router.dispatcher.dispatch(work)
    state = "completed" if outcome.ok else "error"
    if outcome.status == "dropped" and outcome.reason in ("no-session", "session-paused"):
        _drop_undeliverable(name, str(target), channel_id, ts, outcome.reason)
    if isinstance(channel, ReadingChannel):  # a reply came through a channel that reads: it shows the writer
        acknowledge(channel, message, state)
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
