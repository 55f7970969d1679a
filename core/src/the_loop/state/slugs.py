"""Which slug a work item owns: the name of its record files, its checkout and its tmux session.

The slug rule (:func:`the_loop.refs.slug_for`) is not injective: ``acme/web-app#1`` and ``acme-web/app#1`` both
give ``github-acme-web-app-1``, and tmux spells ``octo/a.b#1`` and ``octo/a_b#1`` alike (``.`` is its own target
grammar). So a slug is owned, not assumed: the ref recorded in ``portable/<slug>.json`` or ``local/<slug>.json``
(``ref`` / ``workItem``) says whose it is.

A work item keeps the slug its records are under, also one spelled before refs were lower-cased (its tmux session
kept that spelling too). One with no record yet gets the plain slug when no other work
item's record holds it or one of its tmux aliases, else its *qualified* slug, the plain one with a digest of its
ref before the number (``github-acme-web-app--3f9a2c1b7d-1``), which no other ref shares. When even that is held
(only a name crafted to collide could do it) :class:`SlugCollision` is raised: the work item is refused, never
given another's files.

Writers choose and write under the item's :func:`alias_key` lock, which every alias of a name shares, so two
aliases cannot both take a free name at once; they check the owner again under that lock before they change a
file (:func:`check_owner`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from the_loop.refs import WorkItemRef, canonical_ref, normalize_tmux_target, parse_ref, slug_for, tmux_name
from the_loop.state import StateError, StateLayout, StatMemo, load_json

__all__ = [
    "SlugCollision",
    "alias_key",
    "check_owner",
    "owner_of",
    "qualified_slug",
    "slug_of",
    "tmux_name_of",
    "work_item_lock",
]

_DIGEST_CHARS = 10

# directory → ((inode, mtime_ns), {alias key: [stems]}): adding or removing a file changes the directory's mtime.
_ALIASES: dict[str, tuple[tuple[int, int], dict[str, list[str]]]] = {}


class SlugCollision(StateError):
    """Every name this work item could own is held by another work item's records."""


def qualified_slug(ref: WorkItemRef) -> str:
    """The plain slug with ``--<digest of the ref>`` before the number: unique to ``ref``."""
    head, _, number = slug_for(ref).rpartition("-")
    digest = hashlib.sha256(str(ref).encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{head}--{digest}-{number}"


def alias_key(ref: WorkItemRef) -> str:
    """The name every slug tmux would spell alike shares: the lock a writer of ``ref``'s records holds."""
    return _alias(slug_for(ref))


def work_item_lock(layout: StateLayout, ref: WorkItemRef | str, purpose: str = "") -> Path:
    """``local/locks/<alias key>[.<purpose>].lock``: the lock ``ref``'s writers of one kind hold."""
    key = alias_key(parse_ref(ref) if isinstance(ref, str) else ref)
    return layout.lock_for(f"{key}.{purpose}" if purpose else key)


def _alias(slug: str) -> str:
    # Case too: a record written before refs were lower-cased (``github-Octo-Repo-1``) is found as an alias.
    return normalize_tmux_target(slug).casefold()


def named_in(data: Any) -> str | None:
    """The work item a record's contents name, canonical: ``ref`` (portable) or ``workItem`` (local; version 1
    held it as ``{"ref": …}``)."""
    if not isinstance(data, dict):
        return None
    named = data.get("ref", data.get("workItem"))
    return canonical_ref(named.get("ref") if isinstance(named, dict) else named)


# Corrupt files are moved aside by their readers, not claimed by anyone: they name nobody.
_OWNERS: StatMemo[str | None] = StatMemo(lambda path: named_in(load_json(path)))


def owner_of(path: Path) -> str | None:
    """The work item the record file at ``path`` names (its canonical ref), or None: no file, or it names nobody."""
    return _OWNERS.get(path)


def _owners(layout: StateLayout, slug: str) -> set[str]:
    found = {owner_of(layout.portable_record(slug)), owner_of(layout.local_record(slug))}
    found.discard(None)
    return found  # type: ignore[return-value]


def _aliases(directory: Path, slug: str) -> list[str]:
    """The record stems in ``directory`` tmux would spell like ``slug`` (``slug`` itself excluded)."""
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return []
    stamp = (info.st_ino, info.st_mtime_ns)
    cached = _ALIASES.get(str(directory))
    if cached is None or cached[0] != stamp:
        groups: dict[str, list[str]] = {}
        for name in os.listdir(directory):
            if name.endswith(".json") and not name.startswith("."):
                stem = name[: -len(".json")]
                groups.setdefault(_alias(stem), []).append(stem)
        cached = (stamp, groups)
        _ALIASES[str(directory)] = cached
    return [stem for stem in cached[1].get(_alias(slug), []) if stem != slug]


def _alias_owners(layout: StateLayout, slug: str) -> Iterator[tuple[str, str | None]]:
    """Each record of a name tmux spells like ``slug``, in either directory, with the work item it names."""
    for directory, record in ((layout.portable_dir, layout.portable_record), (layout.local_dir, layout.local_record)):
        for alias in _aliases(directory, slug):
            yield alias, owner_of(record(alias))


def _held_by_another(layout: StateLayout, slug: str, key: str) -> bool:
    if _owners(layout, slug) - {key}:
        return True
    return any(owner is not None and owner != key for _, owner in _alias_owners(layout, slug))


def slug_of(layout: StateLayout, ref: WorkItemRef | str) -> str:
    """The slug ``ref``'s records are (or will be) under; raises :class:`SlugCollision` when none is free."""
    item = parse_ref(ref) if isinstance(ref, str) else ref
    key = str(item)
    plain, qualified = slug_for(item), qualified_slug(item)
    for slug in (plain, qualified):
        if key in _owners(layout, slug):
            return slug
    for alias, owner in _alias_owners(layout, plain):
        if owner == key:
            return alias  # its own record under an older spelling (before refs were lower-cased): kept
    for slug in (plain, qualified):
        if not _held_by_another(layout, slug, key):
            return slug
    raise SlugCollision(
        f"{key}: its record names {plain} and {qualified} are both held by other work items' records "
        f"(under {layout.portable_dir} and {layout.local_dir}); rename or remove those records to start it"
    )


def tmux_name_of(layout: StateLayout, ref: WorkItemRef | str) -> str:
    """``loop-<slug>`` for the slug ``ref`` owns (see :func:`slug_of`)."""
    return tmux_name(slug_of(layout, ref))


def check_owner(path: Path, data: Any, ref: WorkItemRef | str) -> None:
    """Refuse to act on ``data`` read from ``path`` when it names another work item than ``ref``; reported."""
    owner = named_in(data)
    key = str(parse_ref(ref) if isinstance(ref, str) else ref)
    if owner is not None and owner != key:
        from the_loop import events

        events.emit("state.record_foreign", level="error", path=str(path), work_item=key, found=owner)
        raise SlugCollision(f"{path} holds the record of {owner}, not of {key}: left untouched")
