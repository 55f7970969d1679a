"""The portable work-item store: one record per work item at ``portable/<slug>.json``, and a derived index.

A record is a set of independent sections (``control``, ``poll``, ``pullRequests`` …, see ``ATTRIBUTES``). Each
writer replaces one section in a read-modify-write under an ``flock`` on ``local/locks/<alias key>.lock`` (shared
by every slug tmux would spell alike, :mod:`the_loop.state.slugs`) and keeps every other key exactly as it found it,
unknown ones included. Identity comes first in the file: ``ref``, then
``url`` when the ref's ticket provider can derive one.

Setting a section to ``None`` removes the key. The pre-issue-128 legacy tree is not read, so there is nothing a
``null`` tombstone or a ``sealed`` record would have to hold back; both arrive with that shim if it is ever built.
When nothing but the identity is left (a key holding ``null``, as an older release may have written, counts as
nothing), the file is deleted; a key nobody declares still counts, so it is never thrown away with the file.

After every change ``portable/index.json`` is rebuilt by scanning the directory. The index is derived and nothing
reads it; a failure to write it is logged and never fails the write that triggered it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.refs import WorkItemRef, parse_ref
from the_loop.state import (
    ATTRIBUTE_KINDS,
    ATTRIBUTES,
    StateError,
    StateLayout,
    atomic_write_bytes,
    atomic_write_json,
    dump_json,
    load_json,
    locked,
    quarantine_if_corrupt,
    read_json,
    read_regular,
    warn_once,
)
from the_loop.state.slugs import SlugCollision, check_owner, slug_of, work_item_lock

if TYPE_CHECKING:
    from the_loop.interfaces import Config

__all__ = ["IDENTITY", "WorkItemStore", "known_sections", "provider_url"]

IDENTITY = ("ref", "url")
INDEX_LOCK = "index"
CACHE_VERSION = 1
RECORD_MODE = 0o644  # portable files are tracked: readable like any other file in the repository


def known_sections(config: Config | None) -> tuple[str, ...]:
    """The section names a portable record may hold: every declared portable attribute that is not derived.

    Core's come from :data:`ATTRIBUTES`; a plugin adds its own through ``loop_record_attributes`` (asked of
    ``config``'s host; without a config, core's alone). A kind the portable file may not hold (a machine handle) is
    never a section, whoever declares it.
    """
    declared = list(ATTRIBUTES)
    try:
        declared += config.host.record_attributes() if config is not None else []
    except Exception as exc:  # a broken host must not stop core's own sections from being written
        warn_once("store:attributes", f"cannot read plugin record attributes: {exc}")
    allowed = ATTRIBUTE_KINDS["portable"] - {"derived"}
    names: list[str] = []
    for item in declared:
        if item.file == "portable" and item.kind in allowed and item.key not in names:
            names.append(item.key)
    return tuple(names)


def provider_url(ref: WorkItemRef, config: Config | None = None) -> str | None:
    """The work item's page as its ticket provider (built with ``config``) derives it, or None.

    None when no provider for the ref's scheme is installed, when it cannot say, or when asking fails (a provider
    that needs a config it was not given, say): a link somewhere other than the work item is worse than no link.
    """
    if config is None:
        return None
    try:
        provider = config.tickets(ref)
        url = provider.url(ref) if provider is not None else None
    except Exception:
        return None
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def as_ref(ref: WorkItemRef | str) -> WorkItemRef:
    return ref if isinstance(ref, WorkItemRef) else parse_ref(ref)


class WorkItemStore:
    """Read and write the portable records under ``layout.portable_dir``.

    ``url_for`` defaults to the installed ticket providers, built with ``config``; ``sections`` to the declared
    attributes. Tests and tools may pass their own.
    """

    def __init__(
        self,
        layout: StateLayout,
        *,
        config: Config | None = None,
        url_for: Callable[[WorkItemRef], str | None] | None = None,
        sections: Iterable[str] | None = None,
    ) -> None:
        self.layout = layout
        self._config = config
        self._url_for = url_for or functools.partial(provider_url, config=config)
        self._sections = tuple(sections) if sections is not None else None
        self._urls: dict[str, str | None] = {}
        self._marker_ensured = False

    @property
    def sections(self) -> tuple[str, ...]:
        if self._sections is None:
            self._sections = known_sections(self._config)
        return self._sections

    # ---------------------------------------------------------------------------------------------- reading

    def path_for(self, ref: WorkItemRef | str) -> Path:
        """Where ``ref``'s record is (or will be): under the slug it owns (:mod:`the_loop.state.slugs`)."""
        return self.layout.portable_record(slug_of(self.layout, as_ref(ref)))

    def read(self, ref: WorkItemRef | str) -> dict[str, Any] | None:
        """The record, or None when there is none. A corrupt file warns once and reads as None (fail closed); one
        that names another work item is reported and never returned."""
        try:
            path = self.path_for(ref)
            record = read_json(path)
            check_owner(path, record, as_ref(ref))
        except SlugCollision:
            return None  # no name of its own, or a file naming another item: it has no record to act on
        return record

    # ---------------------------------------------------------------------------------------------- writing

    def update_section(self, ref: WorkItemRef | str, section: str, value: Any) -> dict[str, Any] | None:
        """Replace one section and return the record as written (None when the file was removed).

        ``value`` may be a callable: it gets the section's current value (None when absent) and returns the new
        one, inside the lock. A new value of None removes the section. A section name nobody declared is refused
        with :class:`ValueError`; keys already on disk that nobody declared are kept untouched.
        """
        self._check_sections([section])

        def change(body: dict[str, Any]) -> None:
            new = value(body.get(section)) if callable(value) else value
            if new is None:
                body.pop(section, None)
            else:
                body[section] = new

        return self._modify(ref, change)

    def clear_sections(self, ref: WorkItemRef | str, sections: Iterable[str]) -> list[str]:
        """Remove several sections in one write (what a reset does); return those that were present."""
        names = list(sections)
        self._check_sections(names)
        removed: list[str] = []

        def change(body: dict[str, Any]) -> None:
            for name in names:
                if name in body:
                    removed.append(name)
                    del body[name]

        self._modify(ref, change)
        return removed

    def _check_sections(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.sections:
                raise ValueError(
                    f"{name!r} is not a declared section of a portable record (declared: {', '.join(self.sections)})"
                )

    def _modify(self, ref: WorkItemRef | str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        item = as_ref(ref)
        identity = self._identity(item)  # asks the ticket provider: done before the lock is taken
        with locked(work_item_lock(self.layout, item)):
            path = self.path_for(item)  # chosen under the lock every alias of the name shares
            found = load_json(path)  # a corrupt file reads as nothing recorded; the write below moves it aside
            check_owner(path, found, item)
            body = {k: v for k, v in found.items() if k not in IDENTITY} if isinstance(found, dict) else {}
            change(body)
            if any(value is not None for value in body.values()):  # an older release's null markers alone: empty
                record: dict[str, Any] | None = {**identity, **body}
                changed = self._write(path, record)
            else:
                record = None
                changed = self._remove(path)
        if changed:
            self.rebuild_index()
        return record

    def _identity(self, item: WorkItemRef) -> dict[str, Any]:
        key = str(item)
        if key not in self._urls:
            self._urls[key] = self._url_for(item)
        url = self._urls[key]
        return {"ref": key, "url": url} if url else {"ref": key}

    def _write(self, path: Path, record: dict[str, Any]) -> bool:
        with contextlib.suppress(StateError):
            if read_regular(path) == dump_json(record):
                return False  # unchanged: leave the tracked file (and the git working tree) alone
        if not self._marker_ensured:
            self.layout.ensure_marker()
            self._marker_ensured = True
        atomic_write_json(path, record, mode=RECORD_MODE)
        return True

    def _remove(self, path: Path) -> bool:
        if not os.path.lexists(path):
            return False
        quarantine_if_corrupt(path)  # a record that does not parse is moved aside, never deleted
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StateError(f"cannot remove {path}: {exc.strerror or exc}") from None
        return True

    # ------------------------------------------------------------------------------------------------ index

    def rebuild_index(self) -> None:
        """Rewrite ``portable/index.json`` from a scan of the directory (delete it when no record is left)."""
        path = self.layout.index_path
        try:
            with locked(self.layout.lock_for(INDEX_LOCK)):
                self._rebuild_index(path)
        except (StateError, OSError) as exc:
            from the_loop import events

            message = str(exc) if isinstance(exc, StateError) else f"{path}: {exc.strerror or exc}"
            events.emit("state.index_failed", level="warning", path=str(path), error=message)
            warn_once(f"index:{path}", f"cannot rebuild {path}: {message}")

    def _rebuild_index(self, path: Path) -> None:
        """Parsed entries are cached in ``local/index-cache.json`` by (inode, mtime_ns, size), with the stat of the
        index as last written. The cache is on disk rather than in-process because most writers are one-shot CLI
        processes: at 10,000 records a rebuild that parses everything costs ≈0.25 s, one that stats everything
        and parses only what changed ≈0.05 s (benchmarks/bench_state.py). Every store write is a new inode
        (``os.replace``), so a rewrite inside one mtime tick still misses the cache."""
        cached_files, cached_index = self._load_cache()
        files, entries_changed = self._scan(cached_files)
        index_key = _stat_key(path)
        entries = sorted((item[3] for item in files.values() if item[3] is not None), key=lambda e: e["ref"])
        if not entries:
            path.unlink(missing_ok=True)
            index_key = None
        elif entries_changed or index_key is None or index_key != cached_index:
            data = dump_json({"workItems": entries})
            with contextlib.suppress(StateError):
                if read_regular(path) == data:
                    data = b""
            if data:
                # The index is derived: a copy that does not parse holds nothing worth moving aside.
                atomic_write_bytes(path, data, mode=RECORD_MODE)
            index_key = _stat_key(path)
        if files != cached_files or index_key != cached_index:
            self._save_cache(files, index_key)

    def _scan(self, cached: dict[str, Any]) -> tuple[dict[str, list[Any]], bool]:
        """``{file: [inode, mtime_ns, size, entry-or-None]}`` for every candidate file, and whether any entry
        differs from the cached ones (a file added, removed or parsed to something else)."""
        files: dict[str, list[Any]] = {}
        changed = False
        for name, path, info in self._record_files():
            key = [info.st_ino, info.st_mtime_ns, info.st_size]
            hit = cached.get(name)
            if isinstance(hit, list) and len(hit) == 4 and hit[:3] == key:
                entry = hit[3]
            else:
                entry = self._entry(name, Path(path))
                changed = changed or not isinstance(hit, list) or len(hit) != 4 or hit[3] != entry
            files[name] = [*key, entry]
        return files, changed or len(files) != len(cached)

    def _record_files(self) -> Iterator[tuple[str, str, os.stat_result]]:
        """Candidate record files: ``*.json`` except the index and dot-files (temporaries, quarantined files and
        anything else fall out by their names)."""
        try:
            scanner = os.scandir(self.layout.portable_dir)
        except FileNotFoundError:
            return
        with scanner:
            for found in scanner:
                name = found.name
                if not name.endswith(".json") or name.startswith(".") or name == "index.json":
                    continue
                try:
                    info = found.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    yield name, found.path, info

    def _entry(self, name: str, path: Path) -> dict[str, Any] | None:
        record = load_json(path)
        if not isinstance(record, dict) or not isinstance(record.get("ref"), str) or not record["ref"]:
            return None
        entry: dict[str, Any] = {"ref": record["ref"]}
        if isinstance(record.get("url"), str):
            entry["url"] = record["url"]
        entry["file"] = name
        entry["sections"] = [section for section in self.sections if record.get(section) is not None]
        pull_requests = record.get("pullRequests")
        if isinstance(pull_requests, dict) and pull_requests:
            entry["pullRequests"] = sorted(pull_requests)
        return entry

    def _load_cache(self) -> tuple[dict[str, Any], list[int] | None]:
        found = load_json(self.layout.index_cache_path)  # a broken cache is rebuilt silently: it is a speed-up
        if not isinstance(found, dict) or found.get("version") != CACHE_VERSION:
            return {}, None
        if found.get("sections") != list(self.sections):  # entries list sections: another set invalidates them
            return {}, None
        files, index = found.get("files"), found.get("index")
        return (files if isinstance(files, dict) else {}), (index if isinstance(index, list) else None)

    def _save_cache(self, files: dict[str, Any], index_key: list[int] | None) -> None:
        document = {"version": CACHE_VERSION, "sections": list(self.sections), "index": index_key, "files": files}
        data = (json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        try:
            atomic_write_bytes(self.layout.index_cache_path, data)
        except StateError as exc:  # only a speed-up: the next rebuild parses again
            warn_once(f"index-cache:{self.layout.index_cache_path}", str(exc))

    # ------------------------------------------------------------------------------------------------ listing

    def list(self) -> list[dict[str, Any]]:
        """Every record that parses and names its ref, sorted by ref."""
        records = []
        for _name, path, _info in self._record_files():
            record = read_json(Path(path))
            if record is not None and isinstance(record.get("ref"), str):
                records.append(record)
        return sorted(records, key=lambda record: record["ref"])


def _stat_key(path: Path) -> list[int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return [info.st_ino, info.st_mtime_ns, info.st_size]
