"""Which channels are enabled, and each work item's conversation in them: looked up, bound, opened."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import Channel, ChannelError
from the_loop.refs import WorkItemRef
from the_loop.state import locked, read_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


PROCESSED_SUBTYPES = ("", "thread_broadcast", "file_share")
CONTENT_KINDS = ("comment", "review", "review-comment")
REPLY_KIND = "work-item.reply"
COMMAND_KIND = "control.command"
BOUND_ONLY = ("work-item.closed",)  # published only into a conversation that already exists
PUBLISHED_CAP = 500


def installed(config: LoadedConfig) -> dict[str, type[Channel]]:
    return config.host.channels()


def enabled_channels(config: LoadedConfig) -> list[Channel]:
    """Every installed channel ``config`` turns on; a channel whose check raises counts as off."""
    found = []
    for cls in installed(config).values():
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

    return config.store


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


def declared_room(config: LoadedConfig, name: str, ref: WorkItemRef | str) -> str:
    """The room ``ref`` declared on channel ``name`` (``collaborationChannels``: its home), "" for none."""
    from the_loop.control.grants import declared_channels

    return next((str(e["target"]) for e in declared_channels(config, ref) if e["type"] == name), "")


def _place(bound: dict[str, Any]) -> str:
    """Where a binding is: the room's id for a room (``mode: channel``), "" for a thread in the central channel."""
    return str(bound["channel"]) if bound.get("mode") == "channel" else ""


def open_conversation(config: LoadedConfig, channel: Channel, ref: WorkItemRef, origin: str) -> dict[str, Any]:
    """The work item's binding, posting its root first when it has none (idempotent: a bound item makes no call
    and emits nothing). The item's home is its declared room when it has one, else the central channel: a binding
    elsewhere is moved (D §2.7, issue-375) — the room gets one top-level intro and becomes the conversation, and
    the old thread a pointer, so its replies are unmapped from then on. Raises :class:`ChannelError` when no root
    could be made."""
    with locked(_open_lock(config, channel.name)):
        found = binding(config, channel.name, ref)
        room = declared_room(config, channel.name, ref)
        if found is not None and _place(found) == room:
            return found
        made = dict(channel.open_room(ref, room) if room else channel.open_conversation(ref, str(ref)))
        if not made:
            return {}  # a channel with no conversations to bind (nothing to remember)
        if not made.get("channel") or (not room and not made.get("thread")):
            raise ChannelError(f"{channel.name} made no root for {ref}")
        bound = {
            "channel": str(made["channel"]),
            "thread": "" if room else str(made["thread"]),
            "opened": events.timestamp(),
            "origin": "declared" if room else origin,
            "permalink": str(made.get("permalink") or ""),
        }
        if room:
            bound["mode"] = "channel"
        _store(config).update_section(ref, "channels", lambda current: {**(current or {}), channel.name: bound})
    events.emit(
        "channel.thread_opened",
        channel=channel.name,
        work_item=str(ref),
        thread=bound["thread"],
        channel_id=bound["channel"],
        origin=bound["origin"],
    )
    if found is not None:
        _point(channel, found, bound, ref)
    return bound


def _point(channel: Channel, old: dict[str, Any], new: dict[str, Any], ref: WorkItemRef) -> None:
    """One message in the conversation left behind saying where it went (best-effort)."""
    from the_loop.interfaces import ChannelMessage

    where = f"<#{new['channel']}>" if new.get("mode") == "channel" else "a thread in the central channel"
    text = f"The conversation about {ref} moved to {where}; messages here no longer reach it."
    try:
        channel.publish(old, ChannelMessage("channel.moved", str(ref), text=text, max_chars=channel.max_chars()))
    except Exception as exc:
        events.emit(
            "channel.post_failed",
            level="warning",
            channel=channel.name,
            work_item=str(ref),
            event_type="channel.moved",
            error=f"{type(exc).__name__}: {exc}"[:300],
        )


def open_everywhere(config: LoadedConfig, ref: WorkItemRef, origin: str) -> list[str]:
    """Open (or move) the item's conversation on every enabled channel: ``start`` on an accepted start, before
    the checkout; ``declared`` when ``add-channel`` changed its home. A failure is logged
    (``channel.open_failed``) and never affects what asked; the next event opens it lazily. One line per failure."""
    problems = []
    for channel in enabled_channels(config):
        try:
            open_conversation(config, channel, ref, origin)
        except Exception as exc:
            events.emit(
                "channel.open_failed",
                level="warning",
                channel=channel.name,
                work_item=str(ref),
                error=f"{type(exc).__name__}: {exc}",
            )
            problems.append(f"{channel.name}: {exc}")
    return problems


def open_for_start(config: LoadedConfig, ref: WorkItemRef) -> None:
    open_everywhere(config, ref, "start")


def relocate(config: LoadedConfig, ref: WorkItemRef) -> str:
    """A declaration changed: the conversation moves now. A warning for a person when it could not ("" when all
    went well)."""
    problems = open_everywhere(config, ref, "declared")
    return f"could not open the conversation ({'; '.join(problems)}); the next update tries again" if problems else ""


def _shared(config: LoadedConfig, name: str) -> dict[str, Any]:
    return read_json(state_path(config, name)) or {}


def label(config: LoadedConfig, name: str, author: str) -> str:
    """The person's name from the allow-list (``dana``), else their member id."""
    for entry in config.core.routing.authorized_users:
        if not isinstance(entry, str) and entry.name and str(getattr(entry, name, "") or "") == author:
            return entry.name
    return author
