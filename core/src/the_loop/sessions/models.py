"""Models and effort levels a session runs on: what this machine's harnesses accept, and a choice resolved at spawn.

The config declares provider-named models and effort levels (top-level ``models`` and ``effort``, issue-358) with no
harness attached; each harness adapter maps a name to its own arguments
(:meth:`~the_loop.interfaces.HarnessAdapter.model_args`, :meth:`~the_loop.interfaces.HarnessAdapter.effort_args`).
Whether a harness on this machine accepts a name is measured, not declared:

- :func:`check` (``the-loop models check``) asks every adapter that can host a session
  (:meth:`~the_loop.interfaces.HarnessAdapter.check_choice`) about every declared name and records one verdict per
  harness x kind x name in ``local/model-verdicts.json`` (seed 004's shape), each with the digest of the argv it was
  taken against. A verdict is re-measured when it is older than :data:`MAX_AGE_SECONDS` or its argv changed.
- :func:`resolve` turns a work item's choice into a launch's arguments — the harness's own, then the model's, then the
  effort's — re-validating each name on the way in: still declared, mapped by this harness, and not ``refused`` by
  a verdict taken against this very argv. It only reads the file (a spawn never measures); ``unknown`` and no
  verdict at all withhold nothing. What it drops is said out loud by :func:`emit_refusals`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from the_loop import events
from the_loop.interfaces import ChoiceKind, HarnessAdapter, Verdict
from the_loop.state import Corrupt, atomic_write_json, load_json, locked, quarantine, read_json

if TYPE_CHECKING:
    from pathlib import Path

    from the_loop.config import LoadedConfig
    from the_loop.state.work_item_state import WorkItemState

__all__ = [
    "KINDS",
    "MAX_AGE_SECONDS",
    "Resolved",
    "VerdictRow",
    "args_digest",
    "check",
    "emit_refusals",
    "harnesses",
    "listing",
    "read_verdicts",
    "resolve",
]

MAX_AGE_SECONDS = 24 * 60 * 60
KINDS: tuple[ChoiceKind, ...] = ("model", "effort")
VERDICTS: tuple[Verdict, ...] = ("ok", "refused", "unknown")
LOCK_NAME = "model-verdicts"
Reason = Literal["undeclared", "unsupported", "refused"]


def _now() -> float:
    """The clock every verdict is dated and aged with (tests move it)."""
    return time.time()


@dataclass(frozen=True)
class VerdictRow:
    """One verdict: whether ``harness`` accepts model or effort ``name`` with the argv digested as ``args_digest``.
    ``measured`` is true for a verdict a :func:`check` took just now, false for one it kept (never stored)."""

    harness: str
    kind: ChoiceKind
    name: str
    args_digest: str
    verdict: Verdict
    checked_at: float
    measured: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "kind": self.kind,
            "name": self.name,
            "argsDigest": self.args_digest,
            "verdict": self.verdict,
            "checkedAt": self.checked_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> VerdictRow | None:
        """The row ``data`` records, or None when it is not one (a bad row is skipped, the rest honoured)."""
        if not isinstance(data, dict):
            return None
        texts = [data.get(key) for key in ("harness", "name", "argsDigest")]
        checked_at = data.get("checkedAt")
        if (
            not all(isinstance(text, str) and text for text in texts)
            or data.get("kind") not in KINDS
            or data.get("verdict") not in VERDICTS
            or not isinstance(checked_at, (int, float))
            or isinstance(checked_at, bool)
        ):
            return None
        return cls(data["harness"], data["kind"], data["name"], data["argsDigest"], data["verdict"], float(checked_at))

    def stale(self, digest: str, now: float) -> bool:
        """Due for re-measuring: taken against another argv, older than a day, or dated in the future (a clock
        that moved back)."""
        return self.args_digest != digest or not 0 <= now - self.checked_at < MAX_AGE_SECONDS


def args_digest(argv: Sequence[str]) -> str:
    """The fingerprint of the argv a verdict is taken against: 16 hex digits of the SHA-256 of its JSON list."""
    return hashlib.sha256(json.dumps(list(argv), ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def declared(config: LoadedConfig, kind: ChoiceKind) -> list[str]:
    """The names the config declares for ``kind`` (``models`` or ``effort``)."""
    return list(config.core.models if kind == "model" else config.core.effort)


def mapped_args(adapter: HarnessAdapter, kind: ChoiceKind, name: str) -> list[str] | None:
    """The adapter's own arguments for ``name``; None when it takes no such choice (or its mapping is broken: it
    raised, or answered something other than a list of strings)."""
    try:
        args = adapter.model_args(name) if kind == "model" else adapter.effort_args(name)
    except Exception:
        return None
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        return None
    return list(args)


def _base_args(config: LoadedConfig, harness: str) -> list[str]:
    from the_loop.config import harness_args

    return list(harness_args(config, harness))


def choice_digest(config: LoadedConfig, adapter: HarnessAdapter, kind: ChoiceKind, name: str) -> str:
    """The digest of the argv a verdict on ``name`` is taken against: ``routing.harnessArgs`` and the mapping."""
    return args_digest([*_base_args(config, adapter.name), *(mapped_args(adapter, kind, name) or [])])


def _rows(data: Any) -> list[VerdictRow]:
    entries = data.get("verdicts") if isinstance(data, dict) else None
    found = [VerdictRow.from_json(entry) for entry in entries] if isinstance(entries, list) else []
    return [row for row in found if row is not None]


def read_verdicts(config: LoadedConfig) -> list[VerdictRow]:
    """Every well-formed verdict recorded; a file that does not parse warns once and reads as none."""
    return _rows(read_json(config.state.model_verdicts_path))


def harnesses(config: LoadedConfig, harness: str | None = None) -> dict[str, type[HarnessAdapter]]:
    """The harnesses verdicts are kept for: every installed adapter a session can run on (tmux-hostable, with a
    pre-assignable id), by name; with ``harness``, that one alone (:class:`~the_loop.sessions.harness.HarnessError`
    when it is not installed or cannot host a session)."""
    if harness is not None:
        from the_loop.sessions.harness import adapter_for

        return {harness: type(adapter_for(harness, config))}
    return {
        name: cls
        for name, cls in sorted(config.host.harnesses().items())
        if cls.capabilities.tmux_hostable and cls.capabilities.preassigned_session_id
    }


def _measure(adapter: HarnessAdapter, kind: ChoiceKind, name: str) -> Verdict:
    """The adapter's verdict; ``unknown`` when it raised or answered something that is not a verdict."""
    try:
        verdict = adapter.check_choice(kind, name)
    except Exception:
        return "unknown"
    return verdict if verdict in VERDICTS else "unknown"


def check(config: LoadedConfig, *, harness: str | None = None, force: bool = False) -> list[VerdictRow]:
    """One verdict per harness (:func:`harnesses`) x declared model and effort level, measuring the stale ones (or,
    with ``force``, every one), recorded in ``local/model-verdicts.json``; returns this run's rows.

    The file is rewritten under its lock: the rows of the harnesses checked are replaced (a name no longer declared
    drops out), the other harnesses' rows are kept. A file that does not parse is moved aside first
    (``state.quarantined``), never overwritten. Nothing is written when there is no harness to check."""
    classes = harnesses(config, harness)
    if not classes:
        return []
    path = config.state.model_verdicts_path
    rows: list[VerdictRow] = []
    with locked(config.state.lock_for(LOCK_NAME)):
        data = load_json(path)
        if data is Corrupt:
            quarantine(path)
            data = None
        previous = {(row.harness, row.kind, row.name): row for row in _rows(data)}
        for name, cls in classes.items():
            adapter = cls(config)
            for kind in KINDS:
                for choice in declared(config, kind):
                    digest = choice_digest(config, adapter, kind, choice)
                    old = previous.get((name, kind, choice))
                    if old is not None and not force and not old.stale(digest, _now()):
                        rows.append(old)
                        continue
                    verdict = _measure(adapter, kind, choice)
                    rows.append(VerdictRow(name, kind, choice, digest, verdict, _now(), measured=True))
        kept = [row for row in previous.values() if row.harness not in classes]
        atomic_write_json(path, {"verdicts": [row.to_json() for row in [*kept, *rows]]})
    counts = {verdict: sum(row.verdict == verdict for row in rows) for verdict in VERDICTS}
    events.emit(
        "models.checked",
        harnesses=sorted(classes),
        measured=sum(row.measured for row in rows),
        kept=sum(not row.measured for row in rows),
        **counts,
    )
    return rows


def listing(config: LoadedConfig) -> list[dict[str, Any]]:
    """Per harness x declared name, its recorded verdict (``None`` when never checked), when it was taken, its age
    in seconds and whether the next check re-measures it (``stale``); for ``the-loop models list``."""
    recorded = {(row.harness, row.kind, row.name): row for row in read_verdicts(config)}
    now = _now()
    found = []
    for harness, cls in harnesses(config).items():
        adapter = cls(config)
        for kind in KINDS:
            for name in declared(config, kind):
                row = recorded.get((harness, kind, name))
                digest = choice_digest(config, adapter, kind, name)
                found.append(
                    {
                        "harness": harness,
                        "kind": kind,
                        "name": name,
                        "args": mapped_args(adapter, kind, name),
                        "verdict": row.verdict if row else None,
                        "checkedAt": row.checked_at if row else None,
                        "ageSeconds": round(now - row.checked_at, 1) if row else None,
                        "stale": row.stale(digest, now) if row else True,
                    }
                )
    return found


# ------------------------------------------------------------------------------------------------ at spawn


@dataclass(frozen=True)
class Resolved:
    """A work item's choice as a launch applies it: ``args`` (the harness's own ``routing.harnessArgs``, then the
    model's, then the effort's), the ``model`` and ``effort`` actually applied ("" when none), and what was left
    out, each as ``(kind, name, reason)`` with reason ``undeclared``, ``unsupported`` or ``refused``."""

    args: list[str]
    model: str = ""
    effort: str = ""
    refused: list[tuple[ChoiceKind, str, Reason]] = field(default_factory=list)


def resolve(config: LoadedConfig, adapter: HarnessAdapter, model: str, effort: str) -> Resolved:
    """Re-validate a work item's ``model`` and ``effort`` ("" = no choice) for a spawn on ``adapter`` and return the
    arguments to launch with. A name is left out when the config no longer declares it (``undeclared``), the
    adapter maps it to nothing (``unsupported``), or ``local/model-verdicts.json`` holds a ``refused`` verdict for
    this harness, name and argv digest, however old (``refused``). A verdict taken against another argv, an
    ``unknown`` one or none applies the name. Reads the verdicts file only, and only when there is a choice."""
    base = _base_args(config, adapter.name)
    args = list(base)
    applied = {"model": "", "effort": ""}
    refused: list[tuple[ChoiceKind, str, Reason]] = []
    recorded: dict[tuple[str, str], VerdictRow] | None = None
    choices: tuple[tuple[ChoiceKind, str], ...] = (("model", model), ("effort", effort))
    for kind, name in choices:
        if not name:
            continue
        mapped = mapped_args(adapter, kind, name)
        reason: Reason | None = None
        if name not in declared(config, kind):
            reason = "undeclared"
        elif mapped is None:
            reason = "unsupported"
        else:
            if recorded is None:
                recorded = {(row.kind, row.name): row for row in read_verdicts(config) if row.harness == adapter.name}
            row = recorded.get((kind, name))
            if row is not None and row.verdict == "refused" and row.args_digest == args_digest([*base, *mapped]):
                reason = "refused"
        if reason is not None:
            refused.append((kind, name, reason))
            continue
        args += mapped or []
        applied[kind] = name
    return Resolved(args=args, model=applied["model"], effort=applied["effort"], refused=refused)


def emit_refusals(work_item: str, harness: str, resolved: Resolved) -> None:
    """Say out loud what a spawn left out: one ``session.model_refused`` warning per refusal of ``resolved``."""
    for kind, name, reason in resolved.refused:
        events.emit(
            "session.model_refused",
            level="warning",
            work_item=work_item,
            harness=harness,
            kind=kind,
            name=name,
            reason=reason,
        )


def for_work_item(
    config: LoadedConfig,
    adapter: HarnessAdapter,
    work_item: str,
    checkout: Path | None = None,
    state: WorkItemState | None = None,
) -> Resolved:
    """The launch arguments ``work_item``'s choice resolves to now — the harness's own, then the model's, then the
    effort's, from its ``work-item-state.json`` (read from ``checkout``, else its own) — for its own session and its
    pull requests' alike; a dropped choice is said out loud (``session.model_refused``)."""
    from the_loop.refs import parse_ref
    from the_loop.sessions import choices

    if state is None:
        state = choices.current(config, parse_ref(work_item), checkout)
    resolved = resolve(config, adapter, state.model, state.effort)
    emit_refusals(work_item, adapter.name, resolved)
    return resolved


def launch_fields(resolved: Resolved) -> dict[str, Any]:
    """What ``session.spawned`` says of the launch: the arguments, the model and the effort applied."""
    return {
        "harness_args": list(resolved.args) or None,
        "model": resolved.model or None,
        "effort": resolved.effort or None,
    }
