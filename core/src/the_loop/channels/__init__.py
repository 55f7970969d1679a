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
  only then acknowledged. The router later mirrors it onto the ticket and delivers it
  (:func:`the_loop.routing.replies.routed`); a work item with no session is never first-spawned by a reply.

Events carry ids (work item, channel, thread, message), never message text or tokens.

The parts: :mod:`~the_loop.channels.conversations` (lookup, binding, opening), :mod:`~the_loop.channels.publish`,
:mod:`~the_loop.channels.read`, :mod:`~the_loop.channels.kickoff` (a message opens an issue) with its
:mod:`~the_loop.channels.picker` (the repository question), :mod:`~the_loop.channels.ticket` (scrubbing, mirroring),
:mod:`~the_loop.channels.background`; the router's side is :mod:`the_loop.routing.replies`.
"""

from __future__ import annotations

from the_loop.channels.background import start_background
from the_loop.channels.conversations import (
    BOUND_ONLY,
    COMMAND_KIND,
    CONTENT_KINDS,
    PROCESSED_SUBTYPES,
    PUBLISHED_CAP,
    REPLY_KIND,
    binding,
    bindings,
    channel_named,
    enabled_channels,
    installed,
    label,
    open_conversation,
    open_for_start,
    state_path,
)
from the_loop.channels.kickoff import answer as answer_press
from the_loop.channels.publish import drain, publish
from the_loop.channels.read import accept, cursor, dedupe_key, find_ref, listen, newer, read_cycle, without_bot
from the_loop.channels.ticket import ENVELOPE, defang, envelope, mirror_text, scrub

__all__ = [
    "BOUND_ONLY",
    "COMMAND_KIND",
    "CONTENT_KINDS",
    "ENVELOPE",
    "PROCESSED_SUBTYPES",
    "PUBLISHED_CAP",
    "REPLY_KIND",
    "accept",
    "answer_press",
    "binding",
    "bindings",
    "channel_named",
    "cursor",
    "dedupe_key",
    "defang",
    "drain",
    "enabled_channels",
    "envelope",
    "find_ref",
    "installed",
    "label",
    "listen",
    "mirror_text",
    "newer",
    "open_conversation",
    "open_for_start",
    "publish",
    "read_cycle",
    "scrub",
    "start_background",
    "state_path",
    "without_bot",
]
