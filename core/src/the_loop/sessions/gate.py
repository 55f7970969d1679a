"""The start gate (``routing.startGate``): an armed work item waits, with no session, until an authorized person
chooses what it runs on.

The gate is the daemon's work, never an agent's: before a work item's first session the daemon posts one marked
checklist through the item's ticketing provider (the operator-declared ``models`` and ``effort``, ``sessionPerPr``
and the ``repositories``), records ``phase: phase-selection`` and ``parked`` in its ``work-item-state.json`` and
settles the event (``session.spawn_deferred``). An authorized person's reply — ``the-loop choose model=… …`` or a
copy of the checklist with boxes ticked — freezes the choices as a decision with its provenance and unparks it; the
first spawn already carries them.

Choices typed on the start comment (``the-loop start model=opus``) are kept in the portable ``control`` section and
frozen into the file when the checkout exists, before the gate is asked: an authorized person who armed the item
with a choice has answered the gate already. With the gate off, those choices or the operator's defaults apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.sessions import choices
from the_loop.state.registry import now_iso
from the_loop.state.work_item_state import SESSION_PER_PR, START_GATE, WorkItemState, clean_choices

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

MARKER = "<!-- the-loop:gate phase-selection -->"
KEYS = ("model", "effort", "sessionPerPr", "repos")
# `key=value` words after the keyword on its line; `repo=` and `repos=` both name repositories (comma-separated).
_ARGUMENT = re.compile(r"(?<![\w-])(model|effort|sessionPerPr|repos?)=(\S+)", re.IGNORECASE)
# A ticked box of the checklist, also inside a quote reply (`> - [x] model: opus`).
_TICKED = re.compile(
    r"^[ \t>]*[-*+][ \t]+\[[xX]\][ \t]+(model|effort|sessionPerPr|repo)[ \t]*:[ \t]*`?([^\s`]+)`?", re.M
)
_CANONICAL = {"model": "model", "effort": "effort", "sessionperpr": "sessionPerPr", "repo": "repos", "repos": "repos"}


@dataclass(frozen=True)
class Reply:
    """What a reply asked for: the choices that passed, and what did not (each a sentence)."""

    choices: dict[str, Any]
    errors: tuple[str, ...] = ()


def enabled(config: LoadedConfig) -> bool:
    return config.core.routing.start_gate.enabled


def is_ticked_reply(body: str | None) -> bool:
    """A comment carrying ticked boxes of the gate's checklist (a copy of it, or a quote reply)."""
    if not body or ("[x]" not in body and "[X]" not in body):  # most comments: no regex scan at all
        return False
    return _TICKED.search(body) is not None


def is_parked(config: LoadedConfig, ref: WorkItemRef) -> bool:
    """Whether the work item waits at the start gate now."""
    return choices.current(config, ref).parked is not None


def arguments(line_text: str) -> dict[str, Any]:
    """The ``key=value`` choices on a keyword's line (``the-loop start model=opus``); unknown words are ignored."""
    raw: dict[str, Any] = {}
    for key, value in _ARGUMENT.findall(line_text):
        name = _CANONICAL[key.lower()]
        if name == "repos":
            raw.setdefault("repos", []).extend(part for part in value.split(",") if part)
        else:
            raw[name] = value
    return raw


def keyword_line(body: str) -> str:
    """The first line of a control comment: where its keyword and the keyword's choices are."""
    return body.lstrip().splitlines()[0] if body.strip() else ""


def parse_reply(config: LoadedConfig, body: str) -> Reply:
    """The choices a reply makes (its ``the-loop choose`` line, else its ticked boxes), validated against what the
    operator declares now. Two ticks in a one-answer group, or a name nobody declared, is an error."""
    line = keyword_line(body)
    raw = arguments(line) if _ARGUMENT.search(line) else {}
    errors: list[str] = []
    if not raw:
        for key, value in _TICKED.findall(body):
            name = _CANONICAL[key.lower()]
            if name == "repos":
                raw.setdefault("repos", []).append(value)
            elif name in raw and raw[name] != value:
                errors.append(f"{name}: tick one box, not {raw[name]} and {value}")
            else:
                raw[name] = value
    if not raw:
        errors.append("it chose nothing: name at least one of model=, effort=, sessionPerPr= or repos=")
    kept = clean_choices(raw, choices.allowed(config))
    for name, value in raw.items():
        if name == "repos":
            refused = [repo for repo in value if repo.lower() not in kept.get("repos", [])]
            errors += [f"repository {repo!r} is not one this installation works on" for repo in refused]
        elif name not in kept:
            offered = _offered(config, name)
            errors.append(f"{name} {value!r} is not offered" + (f" (offered: {', '.join(offered)})" if offered else ""))
    return Reply(kept, tuple(errors))


def _offered(config: LoadedConfig, name: str) -> list[str]:
    core = config.core
    if name == "model":
        return list(core.models)
    if name == "effort":
        return list(core.effort)
    if name == "sessionPerPr":
        return list(SESSION_PER_PR)
    return list(core.repositories)


# ---------------------------------------------------------------------------------------------- freezing


def freeze(
    config: LoadedConfig,
    ref: WorkItemRef,
    chosen: dict[str, Any],
    *,
    by: str,
    provider: str,
    source: str,
    url: str = "",
    checkout: Path | None = None,
) -> WorkItemState | None:
    """Record ``chosen`` as the start gate's decision (with who, how and when), set the top-level choices and
    unpark the item. None when the item has no checkout on this machine to write its file in."""

    def edit(state: WorkItemState) -> WorkItemState:
        decision: dict[str, Any] = {"gate": START_GATE, "by": by, "at": now_iso(), "provider": provider}
        decision.update({"source": source, "url": url, "choices": dict(chosen)})
        return replace(
            state,
            phase="work",
            parked=None,
            decisions=(*state.decisions, decision),
            model=chosen.get("model", state.model),
            effort=chosen.get("effort", state.effort),
            session_per_pr=chosen.get("sessionPerPr", state.session_per_pr),
            repos=tuple(chosen["repos"]) if "repos" in chosen else state.repos,
        )

    frozen = choices.change(config, ref, edit, checkout)
    if frozen is not None:
        events.emit("gate.decided", work_item=str(ref), gate=START_GATE, actor=by, source=source, choices=chosen)
    return frozen


def remember(config: LoadedConfig, ref: WorkItemRef, chosen: dict[str, Any], *, by: str, provider: str) -> None:
    """Keep choices made before the item has a checkout (the start comment's) in the portable ``control`` section,
    where the first spawn finds them."""

    def edit(control: Any) -> Any:
        current = dict(control) if isinstance(control, dict) else {}
        current["choices"] = {**dict(chosen), "by": by, "provider": provider, "at": now_iso()}
        return current

    config.store.update_section(ref, "control", edit)


def before_first_spawn(config: LoadedConfig, ref: WorkItemRef, checkout: Path) -> WorkItemState:
    """The work item's state as its first session sees it: choices remembered from the start comment are frozen
    into the file first (once: a file with a decision keeps it)."""
    state = choices.current(config, ref, checkout)
    control = (config.store.read(ref) or {}).get("control")
    remembered = control.get("choices") if isinstance(control, dict) else None
    if state.decided or not isinstance(remembered, dict):
        return state
    chosen = clean_choices({k: v for k, v in remembered.items() if k in KEYS}, choices.allowed(config))
    if not chosen:
        return state
    frozen = freeze(
        config,
        ref,
        chosen,
        by=str(remembered.get("by") or ""),
        provider=str(remembered.get("provider") or ""),
        source="start-comment",
        url=str(control.get("note") or "") if isinstance(control, dict) else "",
        checkout=checkout,
    )
    return frozen or state


# ---------------------------------------------------------------------------------------------- parking


def parks(config: LoadedConfig, state: WorkItemState) -> bool:
    """Whether a first spawn waits at the gate: it is on and nobody has answered it for this item."""
    return enabled(config) and not state.decided


def park(config: LoadedConfig, ref: WorkItemRef, checkout: Path, state: WorkItemState, *, delivery_id: str) -> None:
    """Post the checklist (once per parking) and record where the item waits; ``session.spawn_deferred`` either
    way. A checklist that could not be posted is retried by the next event that asks for a spawn."""
    posted = state.parked.get("comment") if state.parked else None
    if not posted:
        from the_loop import control

        try:
            posted = control.post_marked(config, ref, checklist(config, ref, state)) or ""
        except Exception as exc:
            events.emit("gate.post_failed", level="warning", work_item=str(ref), error=f"{type(exc).__name__}: {exc}")
            posted = ""
        if posted:
            events.emit("gate.posted", work_item=str(ref), gate=START_GATE, comment=posted)
    reason = "waiting for an authorized person to choose the model, effort, sessions per pull request and repositories"
    parked = {"gate": START_GATE, "reason": reason, "since": (state.parked or {}).get("since") or now_iso()}
    if posted:
        parked["comment"] = posted

    def edit(current: WorkItemState) -> WorkItemState:
        return replace(current, phase=START_GATE, parked=parked)

    choices.change(config, ref, edit, checkout)
    events.emit("session.spawn_deferred", work_item=str(ref), gate=START_GATE, delivery_id=delivery_id, reason=reason)


def checklist(config: LoadedConfig, ref: WorkItemRef, state: WorkItemState) -> str:
    """The gate's comment: one group per choice, the current value ticked, and how to answer."""
    core = config.core
    default_per_pr = choices.allowed(config).session_per_pr
    lines = [
        f"the-loop is waiting for a choice before it starts a session for {ref}.",
        "",
        "Reply with a copy of this list with one box per group ticked, or with one line such as:",
        "",
        f"    the-loop choose {_example(config)}",
        "",
        "Only a reply from a person allowed to start work here counts.",
    ]

    def group(title: str, key: str, options: list[str], current: str | list[str]) -> None:
        if not options:
            return
        lines.extend(["", f"**{title}**", ""])
        picked = current if isinstance(current, list) else [current]
        lines.extend(f"- [{'x' if option in picked else ' '}] {key}: {option}" for option in options)

    group("Model", "model", list(core.models), state.model)
    group("Effort", "effort", list(core.effort), state.effort)
    group("Sessions per pull request", "sessionPerPr", list(SESSION_PER_PR), state.session_per_pr or default_per_pr)
    own = [] if ref.key_form else [ref.repository.lower()]
    group("Repositories", "repo", list(core.repositories), list(state.repos) or own)
    if not core.models:
        lines.extend(["", "No models are declared (`models:`), so the harness runs on its own default model."])
    lines.extend(["", MARKER])
    return "\n".join(lines)


def _example(config: LoadedConfig) -> str:
    core = config.core
    words = [f"model={core.models[0]}"] if core.models else []
    words += [f"effort={core.effort[0]}"] if core.effort else []
    return " ".join([*words, f"sessionPerPr={choices.allowed(config).session_per_pr}"])
