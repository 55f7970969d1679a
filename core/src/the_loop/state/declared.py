"""What the-loop writes, declared once: every generated path (:data:`GENERATED_PATHS`), every top-level key of a
per-work-item record (:data:`ATTRIBUTES`, with the fields of the sections whose entries have a fixed shape) and
which kinds of fact may live in which file (:data:`ATTRIBUTE_KINDS`). :mod:`the_loop.state` re-exports them; the
``.gitignore`` block and the docs tables are generated from, and tested against, these."""

from __future__ import annotations

from the_loop.declarations import Attribute, GeneratedPath

GENERATED_PATHS: tuple[GeneratedPath, ...] = (
    GeneratedPath(
        "portable/<slug>.json",
        True,
        "one record per work item: control, poll ledger, pull requests, collaborators, channel binding, ended",
        "facts an authorized human asked for or a provider told us; true on any machine and slow or impossible "
        "to rebuild",
    ),
    GeneratedPath(
        "portable/index.json",
        True,
        "one entry per record: ref, url, file, sections (derived by scanning the directory; nothing reads it)",
        "lets a person see what is tracked without opening every record; safe to take either side of a conflict",
    ),
    GeneratedPath(
        ".the-loop-state",
        True,
        "the layout version of this state root",
        "a future layout change is detected exactly rather than guessed, on any machine",
    ),
    GeneratedPath(
        "portable/.<name>.<random>.tmp",
        False,
        "an atomic write in progress (left behind only by a crash)",
        "half-written; never meaningful anywhere",
    ),
    GeneratedPath(
        "portable/<name>.corrupt-<timestamp>",
        False,
        "a record that did not parse, moved aside before it was replaced",
        "kept for a person to inspect on this machine; never travels",
    ),
    GeneratedPath(
        ".<name>.<random>.tmp",
        False,
        "an atomic write of a root-level file in progress (left behind only by a crash)",
        "half-written; never meaningful anywhere",
    ),
    GeneratedPath(
        "<name>.corrupt-<timestamp>",
        False,
        "a root-level file that did not parse, moved aside before it was replaced",
        "kept for a person to inspect on this machine; never travels",
    ),
    GeneratedPath(
        "local/locks/<name>.lock",
        False,
        "empty flock files: one per record or shared file, held across every read-modify-write",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "local/<slug>.json",
        False,
        "this machine's session handles for one work item: harness, conversation id, cwd, tmux target, cursors",
        "a conversation id and a cwd name things on this machine; a copied record blocks the spawn another needs",
    ),
    GeneratedPath(
        "local/index-cache.json",
        False,
        "the index builder's parse cache: per record file, its inode, mtime, size and index entry",
        "inodes and mtimes describe this machine's files; rebuilt from portable/ when missing",
    ),
    GeneratedPath(
        "local/inbox/",
        False,
        "the durable inbox: one file per accepted delivery, named in arrival order, until the worker settles it; "
        "completed.jsonl, the keys settled last",
        "what this machine accepted and still owes a dispatch; replaying it elsewhere would deliver twice",
    ),
    GeneratedPath(
        "local/control-deliveries.json",
        False,
        "the dedupe keys of the newest control comments this machine executed (bounded), each with the inbox entry "
        "that claimed it",
        "shared by the receiver and the poller so a comment both ingresses see executes once, on this machine",
    ),
    GeneratedPath(
        "local/control-deliveries.json.lock",
        False,
        "the flock the receiver and the poller take around control-deliveries.json",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "local/admission.json",
        False,
        "the work items waiting in line for a slot (routing.capacity): respawns first, then first spawns in order",
        "slots and memory are this machine's own; another machine has its own line",
    ),
    GeneratedPath(
        "local/inbox/abandoned/",
        False,
        "inbox entries that failed every attempt, kept with their last error",
        "kept for a person to inspect on this machine; never replayed",
    ),
    GeneratedPath(
        "local/poll-clocks.json",
        False,
        "per polled ref: lastPolledAt and closureCheckedAt (when this poller last listed it, or asked if it ended), "
        "and missingAt (when GitHub first answered 404/410 to that question)",
        "clock readings of a poller on this machine; elsewhere they would date a process that is not there",
    ),
    GeneratedPath(
        "local/standing/<name>.json",
        False,
        "one record per standing session: harness, conversation id, cwd, tmux target, status (running or stopped), "
        "start and last-message stamps, Slack binding and the definition it was started with",
        "a process on this machine and the conversation it holds; routed events never read it",
    ),
    GeneratedPath(
        "local/model-verdicts.json",
        False,
        "per harness, model or effort name: whether this machine's harness accepts it (ok, refused, unknown), the "
        "digest of the argv it was measured with and when (the-loop models check)",
        "a fact about this box's harness installation and this account's model access, not about the work; "
        "re-measured in seconds",
    ),
    GeneratedPath(
        "local/attachments/<slug>/",
        False,
        "files people attached to a forwarded Slack reply or linked as GitHub uploads in a comment, saved as "
        "<file id>-<name>: opaque bytes, never opened and never removed by the-loop (issue-416)",
        "a copy for this box's session to read; the path only means something to the pane it was pasted into",
    ),
    GeneratedPath(
        "logs/events.jsonl",
        False,
        "the decision trail: one JSON object per decision, drops with a machine-readable reason",
        "this machine's audit trail; paths and pids in it name this machine",
    ),
    GeneratedPath(
        "logs/<service>.out",
        False,
        "a detached service's stdout and stderr, appended",
        "this machine's process output",
    ),
    GeneratedPath(
        "<service>.pid",
        False,
        "a running service's pid, and its single-instance lock (gh-webhook.pid, poll.pid, slack-listener.pid)",
        "a pid names a process on this machine only",
    ),
    GeneratedPath(
        "poll-status.json",
        False,
        "the poller's heartbeat: startedAt, lastCycleAt, intervalSeconds, the last cycle's counters (no pid)",
        "describes this machine's poller",
    ),
    GeneratedPath(
        "channels/<name>.json",
        False,
        "per channel (slack.json): the read cursor of every thread (and of a room or the central channel, "
        "channel:<id>), the keys of events already published, the kickoff questions waiting for a repository "
        "(pending), and under conversations the threads no work item owns (a standing session's, keyed "
        "standing:<name>)",
        "a ledger of what this machine read; the threads it names are in the operator's own workspace",
    ),
    GeneratedPath(
        "channels/<name>.json.lock",
        False,
        "empty flock files: a channel's claim and publish-record lock, the undelivered queue's lock",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "channels/undelivered.json",
        False,
        "events no channel accepted, waiting for a drain: the event, channels asked, attempts, last error",
        "what this machine still owes its channels; the ticket already holds every one of them",
    ),
)

# The keys of one entry of the grant lists (``collaborators.users[]``, ``collaborationChannels.channels[]``) and of
# one channel's binding (``channels.<name>``): seed 004's field tables, and all the-loop writes there.
COLLABORATOR_FIELDS = ("login", "slack", "addedBy", "addedAt", "source", "note")
CHANNEL_DECLARATION_FIELDS = ("ref", "type", "target", "listen", "addedBy", "addedAt", "source", "note")
CONVERSATION_FIELDS = ("channel", "thread", "mode", "opened", "origin", "permalink")
# One kickoff question of ``channels/<name>.json`` ``pending[<message ts>]`` (the repository picker), at most 50.
PENDING_FIELDS = ("channel", "author", "text", "options", "asked")

ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute("repository", "version", "derived", "the file's shape (1)"),
    Attribute("repository", "workItem", "pointer", "which work item this is; a file naming another is ignored"),
    Attribute("repository", "phase", "pointer", "phase-selection while parked at the start gate, then work"),
    Attribute("repository", "parked", "pointer", "the gate it waits at, why, since when, and the checklist posted"),
    Attribute("repository", "decisions", "human-decision", "each gate's outcome: the choices, who, how, when"),
    Attribute("repository", "sessionPerPr", "human-decision", "how many sessions its pull requests get"),
    Attribute("repository", "model", "human-decision", "the model it runs on (one the operator declares)"),
    Attribute("repository", "effort", "human-decision", "the effort it runs at (one the operator declares)"),
    Attribute("repository", "repos", "human-decision", "the repositories it contributes to (within repositories)"),
    Attribute("repository", "pullRequests", "repository-entity", "each pull request a session said delivers it"),
    Attribute("portable", "ref", "derived", "the work item's identity; the file name is derived from it"),
    Attribute("portable", "url", "derived", "the work item's page, derived from the ref when it can be"),
    Attribute("portable", "sealed", "derived", "an upgrade tombstone: the legacy tree must not resurrect it"),
    Attribute("portable", "control", "operator-ledger", "the last control command an authorized user gave"),
    Attribute("portable", "poll", "operator-ledger", "what the poller has seen: comments, attempts, spawn ledger"),
    Attribute("portable", "pullRequests", "operator-ledger", "the poll ledger of each pull request delivering it"),
    Attribute(
        "portable",
        "collaborators",
        "operator-ledger",
        "who else may speak to this work item",
        fields=COLLABORATOR_FIELDS,
    ),
    Attribute(
        "portable",
        "collaborationChannels",
        "operator-ledger",
        "where this work item is worked",
        fields=CHANNEL_DECLARATION_FIELDS,
    ),
    Attribute(
        "portable",
        "channels",
        "workspace-entity",
        "the conversation (thread) opened for this work item",
        fields=CONVERSATION_FIELDS,
    ),
    Attribute("portable", "ended", "operator-ledger", "whether and how the work item ended"),
    Attribute("portable", "lifecycle", "operator-ledger", "that work_item_start was asked for the current arming"),
    Attribute("portable", "budget", "operator-ledger", "what authorized people added to its budget, who and when"),
    Attribute("local", "version", "derived", "the record's shape (2)"),
    Attribute("local", "workItem", "derived", "whose sessions these are"),
    Attribute("local", "sessions", "machine-handle", "one session per ref: harness, conversation id, cwd, tmux"),
    Attribute("local", "channels", "machine-handle", "what this machine last read of each thread (cursors)"),
    Attribute("local", "question", "machine-handle", "the agent's open question (the-loop ask) until a person answers"),
    Attribute(
        "local", "usage", "machine-handle", "what its sessions spent here (tokens, cost), read cursors, warnings"
    ),
    Attribute("local", "blocked", "machine-handle", "the decision prompt a session's screen shows, as posted"),
    Attribute("local", "idle", "machine-handle", "since when a session has been quiet, once nudged"),
)

# Which kinds may live in which file: a machine handle must never reach a tracked file.
ATTRIBUTE_KINDS: dict[str, set[str]] = {
    "repository": {"pointer", "human-decision", "repository-entity", "derived"},
    "portable": {"workspace-entity", "operator-ledger", "derived"},
    "local": {"machine-handle", "derived"},
}
