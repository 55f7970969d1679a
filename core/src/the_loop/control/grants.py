"""Grants on one work item: its ``collaborators`` (issue-307) and its ``collaborationChannels`` (issue-375).

Both are lists in the portable record, written by an authorized person — ``the-loop add-collaborator @dana`` or
``the-loop add-channel slack@C0TMP375`` on the ticket, or ``the-loop sessions add-collaborator|add-channel`` on the
command line — and both grant input only: a collaborator's comments reach the item's session, a room's messages
reach the item, and nothing here lets anyone start, stop, arm or grant. Arguments are grammar-checked tokens, and
the run of tokens stops at the first word that is not one (A §2.6 C7), so no prose becomes a grant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")  # GitHub's login grammar
SLACK_MEMBER = re.compile(r"^[UW][A-Z0-9_-]{1,20}$")
CHANNEL_TYPES = {"slack": re.compile(r"^[CGD][A-Z0-9_-]{1,20}$")}  # type → its conversation-id grammar
LISTEN_MODES = ("mentions", "all")


@dataclass(frozen=True)
class Grantee:
    """One person a grant names: a GitHub ``login`` (canonical: no ``@``, lower-case) or another provider's id."""

    provider: str
    id: str

    def entry(self) -> dict[str, str]:
        return {"login": self.id} if self.provider == "github" else {self.provider: self.id}

    def __str__(self) -> str:
        return f"@{self.id}" if self.provider == "github" else f"{self.provider}:{self.id}"


def grantees(words: str) -> list[Grantee]:
    """``@dana slack:U0DANA1 thanks`` → dana, U0DANA1: the leading run of grant tokens, each once."""
    found: list[Grantee] = []
    for word in words.split():
        if word.startswith("@") and LOGIN.match(word[1:]):
            person = Grantee("github", word[1:].lower())
        elif word.startswith("slack:") and SLACK_MEMBER.match(word[6:]):
            person = Grantee("slack", word[6:])
        else:
            break
        if person not in found:
            found.append(person)
    return found


@dataclass(frozen=True)
class ChannelArgs:
    """What ``add-channel`` / ``remove-channel`` was given: the channel (``slack@C0TMP375``) and its listen mode;
    ``problem`` names a refusal (``missing-channel``, ``unknown-listen-mode``) instead."""

    type: str = ""
    target: str = ""
    listen: str = "mentions"
    problem: str = ""

    @property
    def ref(self) -> str:
        return f"{self.type}@{self.target}"


def channel_args(words: str) -> ChannelArgs:
    """``slack@C0TMP375 --listen all`` (``slack://C0TMP375`` is the same channel). A name (``slack@#eng``) is not
    an id and is refused, as is an unknown type: a room's messages must never be attributed by a guess."""
    tokens = words.split()
    listen = "mentions"
    if "--listen" in tokens:
        at = tokens.index("--listen")
        mode = tokens[at + 1] if at + 1 < len(tokens) else ""
        if mode not in LISTEN_MODES:
            return ChannelArgs(problem="unknown-listen-mode")
        listen = mode
        del tokens[at : at + 2]
    if not tokens:
        return ChannelArgs(problem="missing-channel")
    kind, sep, target = tokens[0].replace("://", "@", 1).partition("@")
    grammar = CHANNEL_TYPES.get(kind.lower())
    if not sep or grammar is None or not grammar.match(target):
        return ChannelArgs(problem="missing-channel")
    return ChannelArgs(kind.lower(), target, listen)


def _stamp(by: str, source: str, note: str) -> dict[str, str]:
    from the_loop.state.registry import now_iso

    return {"addedBy": by, "addedAt": now_iso(), "source": source, "note": note}


def _same(entry: Any, person: Grantee) -> bool:
    if not isinstance(entry, dict):
        return False
    if person.provider == "github":
        return str(entry.get("login", "")).casefold() == person.id
    return entry.get(person.provider) == person.id


def add_collaborators(
    config: LoadedConfig, ref: WorkItemRef, people: Iterable[Grantee], *, by: str, source: str, note: str = ""
) -> list[Grantee]:
    """Put ``people`` on ``ref``'s ``collaborators`` list; those that were not on it already."""
    added: list[Grantee] = []

    def change(current: Any) -> dict[str, Any]:
        users = [u for u in ((current or {}).get("users") or []) if isinstance(u, dict)]
        for person in people:
            if not any(_same(user, person) for user in users):
                users.append({**person.entry(), **_stamp(by, source, note)})
                added.append(person)
        return {**(current or {}), "users": users}

    config.store.update_section(ref, "collaborators", change)
    return added


def remove_collaborators(config: LoadedConfig, ref: WorkItemRef, people: Iterable[Grantee]) -> list[Grantee]:
    """Take ``people`` off ``ref``'s list; those that were on it. An emptied list removes the section."""
    wanted = list(people)
    removed: list[Grantee] = []
    if not ((config.store.read(ref) or {}).get("collaborators") or {}).get("users"):
        return removed

    def change(current: Any) -> dict[str, Any] | None:
        kept = []
        for user in (current or {}).get("users") or []:
            gone = next((person for person in wanted if _same(user, person)), None)
            if gone is None:
                kept.append(user)
            elif gone not in removed:
                removed.append(gone)
        return {**(current or {}), "users": kept} if kept else None

    config.store.update_section(ref, "collaborators", change)
    return removed


def declared_channels(config: LoadedConfig, ref: WorkItemRef | str) -> list[dict[str, Any]]:
    """``ref``'s ``collaborationChannels``: only entries with a valid type and id count (a hand-edited one without
    an id is ignored)."""
    found = ((config.store.read(ref) or {}).get("collaborationChannels") or {}).get("channels") or []
    return [entry for entry in found if _valid(entry)]


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    grammar = CHANNEL_TYPES.get(str(entry.get("type", "")))
    return grammar is not None and bool(grammar.match(str(entry.get("target", ""))))


def holder(config: LoadedConfig, channel_ref: str) -> list[str]:
    """Every work item (that has not ended) declaring ``channel_ref``: one item per channel, so more than one means
    a contested room, which attributes nothing."""
    found = []
    for record in config.store.list():
        if record.get("ended"):
            continue
        for entry in (record.get("collaborationChannels") or {}).get("channels") or []:
            if _valid(entry) and f"{entry['type']}@{entry['target']}" == channel_ref:
                found.append(str(record.get("ref", "")))
    return found


def rooms(config: LoadedConfig, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every room of type ``kind`` declared by exactly one open work item: (ref, declaration), one scan of the
    records. A room two items claim is left out: a contested room attributes nothing."""
    claims: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for record in config.store.list():
        if record.get("ended"):
            continue
        for entry in (record.get("collaborationChannels") or {}).get("channels") or []:
            if _valid(entry) and entry["type"] == kind:
                claims.setdefault(str(entry["target"]), []).append((str(record.get("ref", "")), entry))
    return [found[0] for found in claims.values() if len(found) == 1]


def declare_channel(
    config: LoadedConfig, ref: WorkItemRef, args: ChannelArgs, *, by: str, source: str, note: str = ""
) -> str:
    """Declare ``args``' channel for ``ref``: ``declared``, ``already-declared`` (same channel, same mode) or
    ``channel-taken`` (another work item holds it; nothing written). One channel per type per item: a second
    declaration of a type replaces the first."""
    others = [item for item in holder(config, args.ref) if item != str(ref)]
    if others:
        return "channel-taken"
    entry = {"ref": args.ref, "type": args.type, "target": args.target, **_stamp(by, source, note)}
    entry["listen"] = args.listen
    effect = "declared"

    def change(current: Any) -> dict[str, Any]:
        nonlocal effect
        kept = []
        for found in (current or {}).get("channels") or []:
            if (
                isinstance(found, dict)
                and found.get("ref") == args.ref
                and found.get("listen", "mentions") == args.listen
            ):
                effect = "already-declared"
                return dict(current)
            if not (isinstance(found, dict) and found.get("type") == args.type):
                kept.append(found)
        return {**(current or {}), "channels": [*kept, entry]}

    config.store.update_section(ref, "collaborationChannels", change)
    return effect


def undeclare_channel(config: LoadedConfig, ref: WorkItemRef, args: ChannelArgs) -> str:
    """``undeclared``, or ``not-a-channel`` when ``ref`` did not declare it."""
    if not any(entry.get("ref") == args.ref for entry in declared_channels(config, ref)):
        return "not-a-channel"

    def change(current: Any) -> dict[str, Any] | None:
        kept = [
            c for c in (current or {}).get("channels") or [] if not (isinstance(c, dict) and c.get("ref") == args.ref)
        ]
        return {**(current or {}), "channels": kept} if kept else None

    config.store.update_section(ref, "collaborationChannels", change)
    return "undeclared"
