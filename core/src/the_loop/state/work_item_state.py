"""``docs/specs/<id>/work-item-state.json``: the work item's own file, in its checkout, on its branch.

It is the one of the three per-work-item files a reviewer sees in a pull request, and it carries the human
decisions about the work (which model and effort it runs on, how many sessions its pull requests get, which
repositories it contributes to), where the start gate stands, and the pull requests a session said deliver it.

The file is agent-writable and proposable by anyone who can open a pull request, so it is a cache of decisions,
never an authority: every value is re-validated on read against what the operator allows *now*
(:class:`Allowed`). A value that does not pass is dropped (and named in :attr:`WorkItemState.problems`); an entry
that does not parse is skipped while the rest of the file is honoured. Nothing read here can introduce a model,
a repository or a path the operator did not declare.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.state import Corrupt, StateLayout, atomic_write_json, load_json, locked, quarantine
from the_loop.state.slugs import work_item_lock

FILE_NAME = "work-item-state.json"
DEFAULT_SPEC_DIR = "docs/specs"
VERSION = 1
START_GATE = "phase-selection"
PHASES = (START_GATE, "work")
SESSION_PER_PR = ("never", "cross-repository", "always")
PR_STATES = ("open", "merged", "closed")
LINKED_BY = ("session", "event")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\[\]-]{0,127}$")
_REPOSITORY = re.compile(r"^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/)?[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
_TEXT_CAP = 500  # a reason, an actor or a URL is a line, not a document


@dataclass(frozen=True)
class Allowed:
    """What the operator allows now: declared ``models`` and ``effort``, the ``repositories`` bound (empty: any
    usable repository path) and ``routing.tmux.sessionPerPr``, the default a bad or missing choice falls back to."""

    models: frozenset[str] = frozenset()
    efforts: frozenset[str] = frozenset()
    repositories: tuple[str, ...] = ()
    session_per_pr: str = "cross-repository"

    def repository(self, value: object) -> str:
        """``value`` as a repository this work item may contribute to, or "" (the comparison ignores case and the
        default host, as routing's does)."""
        if not isinstance(value, str) or not _REPOSITORY.match(value) or ".." in value:
            return ""
        if not self.repositories:
            return value.lower()
        wanted = same_repository(value)
        return next((bound.lower() for bound in self.repositories if same_repository(bound) == wanted), "")


def same_repository(repository: str) -> str:
    """``[HOST/]OWNER/REPO`` lower-cased, ``github.com/`` left out: the form two spellings are compared in."""
    parts = repository.casefold().split("/")
    if len(parts) == 3 and parts[0] == "github.com":
        parts = parts[1:]
    return "/".join(parts)


@dataclass(frozen=True)
class PullRequestRow:
    """One pull request delivering the work item (``self``: the pull request *is* the work item)."""

    ref: str
    repository: str
    number: int
    url: str = ""
    state_dir: str = ""
    state: str = "open"
    linked_at: str = ""
    linked_by: str = "session"
    is_self: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ref": self.ref,
            "repository": self.repository,
            "number": self.number,
            "url": self.url,
            "stateDir": self.state_dir,
            "state": self.state,
            "linkedAt": self.linked_at,
            "linkedBy": self.linked_by,
        }
        if self.is_self:
            data["self"] = True
        return data


@dataclass(frozen=True)
class WorkItemState:
    """The validated content of one work item's file. ``problems``: what was dropped on read, and why."""

    work_item: str
    phase: str = ""
    parked: dict[str, Any] | None = None
    decisions: tuple[dict[str, Any], ...] = ()
    session_per_pr: str = ""  # "" = no choice: the operator's default applies
    model: str = ""
    effort: str = ""
    repos: tuple[str, ...] = ()
    pull_requests: tuple[PullRequestRow, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)

    @property
    def decided(self) -> bool:
        """Whether the start gate's choice has been frozen (an authorized person answered it)."""
        return any(decision.get("gate") == START_GATE for decision in self.decisions)

    def pull_request(self, ref: str) -> PullRequestRow | None:
        return next((row for row in self.pull_requests if row.ref == ref), None)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": VERSION, "workItem": self.work_item}
        if self.phase:
            data["phase"] = self.phase
        data["parked"] = self.parked
        data["decisions"] = [dict(decision) for decision in self.decisions]
        if self.session_per_pr:
            data["sessionPerPr"] = self.session_per_pr
        if self.model:
            data["model"] = self.model
        if self.effort:
            data["effort"] = self.effort
        data["repos"] = list(self.repos)
        data["pullRequests"] = [row.to_dict() for row in self.pull_requests]
        return data


def spec_id(ref: WorkItemRef) -> str:
    """The work item's directory name under the spec directory: ``issue-<n>``, or ``<provider>-<key>-<n>``."""
    if ref.key_form:
        return f"{ref.provider}-{ref.owner.lower()}-{ref.number}"
    return f"issue-{ref.number}"


def relative_path(ref: WorkItemRef, spec_dir: str = DEFAULT_SPEC_DIR) -> Path:
    """Where the file sits inside a checkout."""
    return Path(spec_dir or DEFAULT_SPEC_DIR) / spec_id(ref) / FILE_NAME


def state_dir(work_item: WorkItemRef, pull_request: WorkItemRef) -> str:
    """Where a pull request's inner loop keeps its pointer, derived from its repository and number."""
    if same_repository(pull_request.repository) == same_repository(work_item.repository):
        return f"pr-loops/pr-{pull_request.number}"
    return f"pr-loops/{pull_request.owner}__{pull_request.repo}/pr-{pull_request.number}"


# ------------------------------------------------------------------------------------------------- reading


def parse(data: object, ref: WorkItemRef, allowed: Allowed) -> WorkItemState:
    """The file's content re-validated: each value either passes or is dropped and named in ``problems``."""
    problems: list[str] = []
    if not isinstance(data, dict):
        return WorkItemState(str(ref), problems=("the file is not a JSON object",) if data is not None else ())
    named = data.get("workItem")
    if named not in (None, "") and _ref_text(named) != str(ref):
        return WorkItemState(str(ref), problems=(f"workItem {_short(named)} is not {ref}: the file was ignored",))
    phase = data.get("phase")
    if phase not in (None, "", *PHASES):
        problems.append(f"phase {_short(phase)} is not one of {', '.join(PHASES)}")
        phase = ""
    parked = data.get("parked")
    if parked is not None and not (isinstance(parked, dict) and parked.get("gate") == START_GATE):
        problems.append("parked names no gate this release has")
        parked = None
    decisions = []
    for entry in data.get("decisions") or [] if isinstance(data.get("decisions"), list) else []:
        decision = _decision(entry, allowed)
        if decision is None:
            problems.append("a decision without gate, by and at was skipped")
        else:
            decisions.append(decision)
    session_per_pr = data.get("sessionPerPr")
    if session_per_pr not in (None, "", *SESSION_PER_PR):
        problems.append(f"sessionPerPr {_short(session_per_pr)} is not never, cross-repository or always")
        session_per_pr = ""
    model = _choice(data.get("model"), allowed.models, "model", problems)
    effort = _choice(data.get("effort"), allowed.efforts, "effort", problems)
    repos: list[str] = []
    for value in data.get("repos") or [] if isinstance(data.get("repos"), list) else []:
        repository = allowed.repository(value)
        if not repository:
            problems.append(f"repository {_short(value)} is not one this installation works on")
        elif repository not in repos:
            repos.append(repository)
    rows: list[PullRequestRow] = []
    for entry in data.get("pullRequests") or [] if isinstance(data.get("pullRequests"), list) else []:
        row = _pull_request(entry, ref, allowed, problems)
        if row is not None and all(row.ref != seen.ref for seen in rows):
            rows.append(row)
    return WorkItemState(
        str(ref),
        phase=str(phase or ""),
        parked=dict(parked) if parked else None,
        decisions=tuple(decisions),
        session_per_pr=str(session_per_pr or ""),
        model=model,
        effort=effort,
        repos=tuple(repos),
        pull_requests=tuple(rows),
        problems=tuple(problems),
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _ref_text(value: object) -> str:
    try:
        return str(parse_ref(str(value)))
    except RefError:
        return ""


def _choice(value: object, declared: frozenset[str], what: str, problems: list[str]) -> str:
    """A model or effort name the operator declares now, else ""."""
    if value in (None, ""):
        return ""
    if isinstance(value, str) and _NAME.match(value) and value in declared:
        return value
    problems.append(f"{what} {_short(value)} is not declared in {'models' if what == 'model' else 'effort'}")
    return ""


def _decision(entry: object, allowed: Allowed) -> dict[str, Any] | None:
    """A decision kept for its provenance; the choices in it are re-validated like the top-level ones."""
    if not isinstance(entry, dict):
        return None
    gate, by, at = entry.get("gate"), entry.get("by"), entry.get("at")
    if not all(isinstance(value, str) and value for value in (gate, by, at)):
        return None
    decision: dict[str, Any] = {"gate": gate, "by": str(by)[:_TEXT_CAP], "at": str(at)[:_TEXT_CAP]}
    for key in ("provider", "source", "url"):
        if isinstance(entry.get(key), str):
            decision[key] = entry[key][:_TEXT_CAP]
    choices = entry.get("choices")
    if isinstance(choices, dict):
        decision["choices"] = clean_choices(choices, allowed)
    return decision


def clean_choices(choices: dict[str, Any], allowed: Allowed) -> dict[str, Any]:
    """The gate's choices, each re-validated; what does not pass is left out."""
    kept: dict[str, Any] = {}
    ignored: list[str] = []
    if model := _choice(choices.get("model"), allowed.models, "model", ignored):
        kept["model"] = model
    if effort := _choice(choices.get("effort"), allowed.efforts, "effort", ignored):
        kept["effort"] = effort
    if choices.get("sessionPerPr") in SESSION_PER_PR:
        kept["sessionPerPr"] = choices["sessionPerPr"]
    if isinstance(choices.get("repos"), list):
        kept["repos"] = [repository for value in choices["repos"] if (repository := allowed.repository(value))]
    return kept


def _pull_request(
    entry: object, work_item: WorkItemRef, allowed: Allowed, problems: list[str]
) -> PullRequestRow | None:
    if not isinstance(entry, dict):
        problems.append("a pullRequests entry that is not an object was skipped")
        return None
    try:
        ref = parse_ref(str(entry.get("ref") or ""))
    except RefError:
        problems.append(f"pullRequests entry {_short(entry.get('ref'))} is not a ref: skipped")
        return None
    if ref.key_form or ref == work_item:
        problems.append(f"pullRequests entry {ref} cannot be a pull request of {work_item}: skipped")
        return None
    repository = allowed.repository(entry.get("repository") or ref.repository)
    if not repository or same_repository(repository) != same_repository(ref.repository):
        named = _short(entry.get("repository") or ref.repository)
        problems.append(f"pullRequests entry {ref}: repository {named} refused: skipped")
        return None
    is_self = entry.get("self") is True
    derived = "" if is_self else state_dir(work_item, ref)
    if entry.get("stateDir") not in (None, "", derived):
        problems.append(f"pullRequests entry {ref}: stateDir {_short(entry.get('stateDir'))} recomputed")
    state = entry.get("state") if entry.get("state") in PR_STATES else "open"
    linked_by = entry.get("linkedBy") if entry.get("linkedBy") in LINKED_BY else "event"
    url = entry.get("url") if isinstance(entry.get("url"), str) and entry["url"].startswith("https://") else ""
    linked_at = entry.get("linkedAt") if isinstance(entry.get("linkedAt"), str) else ""
    return PullRequestRow(
        str(ref), repository, ref.number, url[:_TEXT_CAP], derived, str(state), linked_at[:64], str(linked_by), is_self
    )


# ------------------------------------------------------------------------------------------------- the file


def read(path: Path, ref: WorkItemRef, allowed: Allowed) -> WorkItemState:
    """The validated file at ``path``; an absent or unreadable one reads as "no choice yet" (an unreadable one
    is named in ``problems``; it is moved aside only by the next write, never overwritten)."""
    data = load_json(path)
    if data is Corrupt:
        return WorkItemState(str(ref), problems=(f"{path} is not a JSON object: read as empty",))
    return parse(data, ref, allowed)


def update(
    path: Path,
    layout: StateLayout,
    ref: WorkItemRef,
    allowed: Allowed,
    change: Callable[[WorkItemState], WorkItemState],
) -> WorkItemState:
    """Read-modify-write under the item's lock. What is written is the validated state ``change`` returns, so a
    value the file held that no longer passes is gone from it after the write (an old ``session`` block too)."""
    with locked(work_item_lock(layout, ref, "work-item-state")):
        if load_json(path) is Corrupt:
            quarantine(path)  # moved aside and reported, never overwritten
        current = read(path, ref, allowed)
        updated = replace(change(current), problems=())
        atomic_write_json(path, updated.to_dict(), mode=0o644)  # checked in: readable like any repository file
        return updated
