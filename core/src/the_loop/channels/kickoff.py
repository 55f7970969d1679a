"""Kickoff: a top-level message in a channel's central conversation becomes a new work item (an issue).

The claim (the ``channel:<id>`` cursor in ``channels/<name>.json``) is taken under the channel lock before anything
else, so a retry never opens a second issue. Nothing from the message becomes an argument but the words of the
issue: the repository comes from the declared set, and refusals echo only the quoted prefix and declared names.
Where a press can reach this instance, a message naming no usable repository is asked about instead (the picker:
its questions in :mod:`~the_loop.channels.picker`, the answer in :func:`answer`); files are named, never fetched.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.channels import picker
from the_loop.channels.attachments import mirror_names
from the_loop.channels.conversations import PROCESSED_SUBTYPES, _lock, bindings, label
from the_loop.channels.inbound import acknowledge, advance_shared, drop, newer, shared_cursor
from the_loop.channels.ticket import envelope, scrub
from the_loop.interfaces import ChannelError, InboundMessage, Press, ReadingChannel
from the_loop.state import StateError, locked

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

CREATE_KIND = "work-item.create"
TITLE_LIMIT = 80
LISTED = 12
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_PREFIX = re.compile(rf"^\s*({_SEGMENT}(?:/{_SEGMENT}){{0,2}}):(?:\s+|$)(.*)$", re.DOTALL)
PICKED = "kickoff-repo"  # the action of a press on the repository picker
clock: Callable[[], float] = time.time  # a test seam for the picker's TTL


def settings(channel: ReadingChannel) -> dict[str, Any]:
    """The channel's kickoff settings, {} when it has no central conversation (or it cannot be found)."""
    try:
        return dict(channel.kickoff())
    except ChannelError:
        return {}


def is_central(channel: ReadingChannel, message: InboundMessage) -> bool:
    found = settings(channel)
    return bool(found) and found.get("conversation") == message.channel_id


def resolve(text: str, declared: Sequence[str], fallback: str) -> tuple[str, str, str, str]:
    """(outcome, repository, quoted prefix, remaining text) for a kickoff message. A one-word prefix that names
    no declared repository is prose, not a prefix; a longer one is an unknown repository."""
    lines = text.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return "empty-message", "", "", ""
    prefix, rest = "", "\n".join(lines[first:])
    if m := _PREFIX.match(lines[first]):
        wanted = m[1].lower().split("/")
        matches = [repo for repo in declared if repo.lower().split("/")[-len(wanted) :] == wanted]
        if matches or len(wanted) > 1:
            prefix, rest = m[1], "\n".join([m[2], *lines[first + 1 :]])
            if len(matches) > 1:
                return "ambiguous-repo", "", prefix, rest
            if not matches:
                return "unknown-repo", "", prefix, rest
            return ("resolved" if rest.strip() else "empty-message"), matches[0], prefix, rest
    if not rest.strip():
        return "empty-message", "", prefix, rest
    return ("fallback", fallback, "", rest) if fallback else ("no-target", "", "", rest)


def title_of(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return line.strip().lstrip("#").strip()[:TITLE_LIMIT].rstrip()


def _listing(declared: Sequence[str]) -> str:
    if not declared:
        return "none are declared"
    shown = ", ".join(f"`{repo}`" for repo in declared[:LISTED])
    more = len(declared) - LISTED
    return shown + (f" …and {more} more" if more > 0 else "")


def refusal(outcome: str, prefix: str, declared: Sequence[str]) -> str:
    """The fixed answer for a kickoff that opens nothing: the quoted prefix and the declared names only."""
    known = f"Declared repositories: {_listing(declared)}."
    hint = "Start the message with `<repo>: ` to open an issue there."
    if outcome == "unknown-repo":
        return f"the-loop: `{prefix}` is not a declared repository. {known} {hint}"
    if outcome == "ambiguous-repo":
        return f"the-loop: `{prefix}` matches more than one declared repository; name it in full. {known}"
    if outcome == "empty-message":
        return "the-loop: there is nothing to open an issue with: write what it is about after the repository."
    return f"the-loop: this message names no repository and no default is set. {known} {hint}"


def _key(conversation: str) -> str:
    return f"channel:{conversation}"


def _claim(config: LoadedConfig, name: str, message: InboundMessage) -> bool:
    """Advance the central cursor to the message (under the channel lock); False when it was already read."""
    key = _key(message.channel_id)
    with locked(_lock(config, name)):
        if not newer(message.message_id, shared_cursor(config, name, key)):
            return False
        advance_shared(config, name, key, message.message_id)
    return True


def _baseline(config: LoadedConfig, name: str, conversation: str, newest: str) -> None:
    """Record where the central conversation stands on first sight (a cursor already there is kept)."""
    key = _key(conversation)
    with locked(_lock(config, name)):
        if not shared_cursor(config, name, key):
            advance_shared(config, name, key, newest)


def read(config: LoadedConfig, channel: ReadingChannel, bot: str) -> dict[str, int]:
    """One poll of the central conversation: a first read only records where it stands (a backlog never becomes
    issues); later ones take each new top-level message through :func:`accept`."""
    found = settings(channel)
    if not found or CREATE_KIND not in channel.granted():
        return {}
    conversation = str(found["conversation"])
    after = shared_cursor(config, channel.name, _key(conversation))
    try:
        messages = channel.read_top_level(conversation, after)
    except Exception as exc:
        events.emit(
            "channel.read_failed",
            level="warning",
            channel=channel.name,
            channel_id=conversation,
            error=f"{type(exc).__name__}: {exc}"[:500],
            retry_after=getattr(exc, "retry_after", None),
        )
        return {"kickoff_failed": 1}
    if not after:
        newest = max((m.message_id for m in messages), key=_as_float, default=f"{time.time():.6f}")
        _baseline(config, channel.name, conversation, newest)
        return {"kickoff_baselined": 1}
    counts = {"kickoff_messages": 0, "kickoff_created": 0}
    for message in messages:
        counts["kickoff_messages"] += 1
        if accept(config, channel, message, bot) == "created":
            counts["kickoff_created"] += 1
    return counts


def _as_float(ts: str) -> float:
    try:
        return float(ts)
    except ValueError:
        return 0.0


def accept(
    config: LoadedConfig,
    channel: ReadingChannel,
    message: InboundMessage,
    bot: str,
    later: Callable[[Callable[[], None]], None] | None = None,
) -> str:
    """A top-level message in the central conversation: claimed first, then the drops in order, then the issue
    (what calls the platform or the tracker goes to ``later`` when given, as for a reply)."""
    if message.subtype not in PROCESSED_SUBTYPES:
        return drop(channel, message, "unsupported-subtype", level="debug")
    if any(
        b["channel"] == message.channel_id and b["thread"] == message.message_id
        for _, b in bindings(config, channel.name)
    ):
        return drop(channel, message, "unmapped", level="debug")  # a root already bound to a work item
    try:
        if not _claim(config, channel.name, message):
            return drop(channel, message, "duplicate", level="debug")
    except (StateError, OSError) as exc:
        events.emit("channel.claim_failed", level="error", channel=channel.name, error=str(exc))
        return "claim-failed"
    if message.is_bot or (bot and message.author_id == bot):
        return drop(channel, message, "self-authored", level="debug")
    if CREATE_KIND not in channel.granted():
        return drop(channel, message, "unpublishable-event")
    if not control.is_principal(control.principals(config), channel.name, message.author_id):
        return drop(channel, message, "unauthorized-actor", level="warning")  # the roster does not count here
    text = re.sub(rf"<@{re.escape(bot)}(?:\|[^>]*)?>", "", message.text).strip() if bot else message.text
    if not text.strip():
        return drop(channel, message, "unmapped")
    run = later or (lambda work: work())
    outcome: list[str] = []
    run(lambda: outcome.append(_kick(config, channel, message, text)))
    return outcome[0] if outcome else "claimed"


def _kick(config: LoadedConfig, channel: ReadingChannel, message: InboundMessage, text: str) -> str:
    acknowledge(channel, message, "received")
    found = settings(channel)
    declared = list(config.core.repositories)
    outcome, repository, prefix, rest = resolve(text, declared, str(found.get("repo") or ""))
    rest += mirror_names(message.files)  # a kickoff names its files, never fetches them
    if outcome not in ("resolved", "fallback"):
        options = picker.options_for(channel, outcome, declared)
        if options:
            return _ask(config, channel, message, rest, options)
        try:
            channel.reply(message, refusal(outcome, prefix, declared))
        except Exception as exc:
            events.emit("channel.post_failed", level="warning", channel=channel.name, error=type(exc).__name__)
        acknowledge(channel, message, "error")
        return drop(channel, message, f"kickoff-{outcome}")
    return open_issue(config, channel, message, repository, rest, outcome)[0]


def open_issue(
    config: LoadedConfig, channel: ReadingChannel, message: InboundMessage, repository: str, text: str, outcome: str
) -> tuple[str, str]:
    """The issue a kickoff opens in ``repository`` (resolved, or picked): bound to the message's thread, linked in
    a reply; ("created", its ref) or ("create-failed", "")."""
    try:
        ref = _create(config, channel, message, repository, text, list(settings(channel).get("labels") or []))
    except Exception as exc:
        events.emit(
            "channel.create_failed",
            level="warning",
            channel=channel.name,
            message=message.message_id,
            repository=repository,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        acknowledge(channel, message, "error")
        return drop(channel, message, "create-failed", level="warning"), ""
    bound = {
        "channel": message.channel_id,
        "thread": message.message_id,
        "opened": events.timestamp(),
        "origin": "kickoff",
        "permalink": "",
    }
    config.store.update_section(ref, "channels", lambda current: {**(current or {}), channel.name: bound})
    provider = config.tickets(ref)
    url = (provider.url(ref) if provider is not None else None) or ""
    try:
        channel.reply(message, f"the-loop opened {ref}" + (f": {url}" if url else ""))
    except Exception as exc:
        events.emit("channel.post_failed", level="warning", channel=channel.name, work_item=str(ref), error=str(exc))
    events.emit(
        "channel.created",
        channel=channel.name,
        work_item=str(ref),
        repository=repository,
        outcome=outcome,
        channel_id=message.channel_id,
        message=message.message_id,
        author=message.author_id,
    )
    acknowledge(channel, message, "completed")
    return "created", str(ref)


def _ask(config: LoadedConfig, channel: ReadingChannel, message: InboundMessage, text: str, options: list[str]) -> str:
    """Park the question, then post the picker; a question that could not be posted is forgotten."""
    try:
        if not picker.park(config, channel.name, message, text, options):
            return drop(channel, message, "kickoff-already-asked", level="debug")
    except (StateError, OSError) as exc:
        events.emit("channel.claim_failed", level="error", channel=channel.name, error=str(exc))
        return "claim-failed"
    try:
        channel.ask(message, options)
    except Exception as exc:
        picker.forget(config, channel.name, message.message_id)
        events.emit("channel.post_failed", level="warning", channel=channel.name, error=type(exc).__name__)
        acknowledge(channel, message, "error")
        return drop(channel, message, "kickoff-ask-failed", level="warning")
    events.emit(
        "channel.kickoff_asked",
        channel=channel.name,
        channel_id=message.channel_id,
        message=message.message_id,
        author=message.author_id,
        options=len(options),
    )
    return "asked"


def answer(config: LoadedConfig, channel: ReadingChannel, press: Press) -> str:
    """A press on the repository picker: refused (each a ``channel.dropped``) unless the grant is still held, the
    presser is allow-listed and wrote the kickoff, its question is live and the repository was offered and is still
    declared; the question is popped before the issue is created (issue-349) and restored if creation fails."""
    pressed = InboundMessage(press.channel_id, press.message_id, press.message_id, press.author_id, "")
    if press.action != PICKED:
        return drop(channel, pressed, "unmapped", level="debug")
    if CREATE_KIND not in channel.granted():
        return drop(channel, pressed, "unpublishable-event")
    if not control.is_principal(control.principals(config), channel.name, press.author_id):
        return drop(channel, pressed, "unauthorized-actor", level="warning")
    declared = list(config.core.repositories)
    try:
        refused, record = picker.claim(
            config, channel.name, press.message_id, press.author_id, press.value, declared, clock()
        )
    except (StateError, OSError) as exc:
        events.emit("channel.claim_failed", level="error", channel=channel.name, error=str(exc))
        return "claim-failed"
    if refused:
        return drop(channel, pressed, refused, level="warning" if refused == "not-your-kickoff" else "info")
    kickoff = InboundMessage(
        str(record.get("channel") or press.channel_id), press.message_id, press.message_id, press.author_id, ""
    )
    outcome, ref = open_issue(config, channel, kickoff, press.value, str(record.get("text") or ""), "picked")
    if outcome != "created":
        picker.restore(config, channel.name, press.message_id, record)
        return outcome
    try:
        channel.settle(press, f"the-loop opened {ref} in `{press.value}`")
    except Exception as exc:
        events.emit("channel.post_failed", level="warning", channel=channel.name, work_item=ref, error=str(exc))
    return outcome


def _create(
    config: LoadedConfig, channel: ReadingChannel, message: InboundMessage, repository: str, text: str, labels: list
) -> Any:
    """The new issue's ref: title from the first line, body scrubbed with attribution and envelope, and no
    self-authored marker (a person asked for it, so it can be armed like any issue)."""
    providers = config.host.ticket_providers()
    cls = providers.get("github") or next(iter(providers.values()), None)
    if cls is None:
        raise ChannelError("no ticket provider installed")
    who = f"{label(config, channel.name, message.author_id)} ({channel.name}:{message.author_id})"
    body = f"{scrub(text).strip()}\n\n(opened from {channel.name} by {who})\n\n" + envelope(
        CREATE_KIND, channel.name, message.author_id
    )
    return cls(config).create_issue(repository, title_of(text) or "Untitled", body, labels)
