"""Control keywords: ``the-loop start|stop|pause|resume|cleanup|choose|interrupt|budget|answer`` and the grants
(``add-collaborator|remove-collaborator|add-channel|remove-channel``) typed on a ticket.

Parsing is anchored (A §2.6 C2): case-insensitive; the comment, after leading whitespace, must open with a keyword,
and further keywords count only at the start of a line; a keyword must not run on into ``[\\w:-]``. Prose, quotes
(``> the-loop stop``), inline code and list items never match. Two different commands in one comment execute nothing
(the comment is then ordinary conversation). Only comment and review bodies are parsed, never an issue or PR body.
The commands that take words (:data:`WORDED`) may be followed by a colon (``the-loop interrupt: use the other API``);
:func:`argument` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

GRANTS = ("add-collaborator", "remove-collaborator", "add-channel", "remove-channel")
COMMANDS = ("start", "stop", "pause", "resume", "cleanup", "choose", "interrupt", "budget", "answer", *GRANTS)
# The commands whose words follow them: the interrupt's next turn, the budget's raise, the answer's option, the
# person or channel a grant names.
WORDED = ("interrupt", "budget", "answer", *GRANTS)


def keywords(configured: Mapping[str, str]) -> dict[str, str]:
    """Command → keyword: ``the-loop <command>`` unless ``routing.control.keywords`` says otherwise (``""`` turns
    one off)."""
    found = {}
    for command in COMMANDS:
        keyword = configured.get(command, f"the-loop {command}")
        if keyword.strip():
            found[command] = " ".join(keyword.split())
    return found


@dataclass(frozen=True)
class ControlParse:
    """What a body asks for: one ``command``, nothing, or an ambiguous mix (``commands`` lists them)."""

    command: str | None = None
    commands: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return len(self.commands) > 1


def parse(body: str | None, configured: Mapping[str, str] | None = None) -> ControlParse:
    """The control command ``body`` carries, if any."""
    if not body:
        return ControlParse()
    table = keywords(configured or {})
    if not table:
        return ControlParse()
    text = body.lstrip()
    by_keyword = {" ".join(k.lower().split()): c for c, k in table.items()}
    found: list[str] = []
    for index, match in enumerate(_pattern(table).finditer(text)):
        if index == 0 and match.start() != 0:
            return ControlParse()  # the comment must open with a keyword
        command = by_keyword[" ".join(match.group(1).lower().split())]
        if match.group(2) and command not in WORDED:
            continue  # "the-loop start:now" is not the start command
        if command not in found:
            found.append(command)
    if not found:
        return ControlParse()
    return ControlParse(command=found[0] if len(found) == 1 else None, commands=tuple(found))


def _pattern(table: Mapping[str, str]) -> re.Pattern[str]:
    """A keyword at the start of a line, not running on into a word (``the-loop started``); group 2 is a colon
    right after it, which only the worded commands take."""
    alternatives = "|".join(
        re.escape(keyword).replace(r"\ ", r"[ \t]+") for keyword in sorted(table.values(), key=len, reverse=True)
    )
    return re.compile(rf"^[ \t]*({alternatives})(?:(:)|(?![\w:-]))", re.IGNORECASE | re.MULTILINE)


def argument(
    body: str | None, command: str, configured: Mapping[str, str] | None = None, *, lines: bool = False
) -> str:
    """The words after ``command``'s keyword where the comment opens with it (a colon after it dropped): the
    rest of its line, or with ``lines`` the rest of the comment. "" when there are none."""
    table = keywords(configured or {})
    if command not in table or not body:
        return ""
    text = body.lstrip()
    match = _pattern({command: table[command]}).match(text)
    if match is None:
        return ""
    rest = text[match.end() :]
    return (rest if lines else rest.split("\n", 1)[0]).strip()


# ------------------------------------------------------------------------------------------- recording and status


def record(config: LoadedConfig, ref: WorkItemRef, command: str, *, source: str, actor: str, note: str = "") -> None:
    """Write the portable ``control`` section: what an authorized person last asked for this work item (seed 004).
    It is what keeps an armed item armed across a restart, and what lets a stop durably disarm it."""
    from the_loop.state.registry import now_iso

    control = {
        "command": command,
        "source": source,
        "actor": actor,
        "requestedAt": now_iso(),
        "note": note,
        "instance": config.core.instance.name,
    }
    store = config.store
    store.update_section(ref, "control", control)
    if command in ("stop", "cleanup"):  # disarmed: the next arming asks work_item_start again (lifecycle hooks)
        store.update_section(ref, "lifecycle", None)


def recorded(config: LoadedConfig, ref: WorkItemRef) -> str:
    """The last control command recorded for ``ref`` ("" when none; an unreadable record reads as none)."""
    control = (config.store.read(ref) or {}).get("control")
    return str(control.get("command", "")) if isinstance(control, dict) else ""


def set_session_status(config: LoadedConfig, ref: WorkItemRef, status: str) -> bool:
    """Flip the work item's own session to ``status`` (pause and resume touch nothing else, tmux included).
    False when there is no live session to flip."""
    from the_loop import events
    from the_loop.state.registry import SessionRecord

    changed = False

    def change(record: SessionRecord) -> None:
        nonlocal changed
        own = record.own
        if own is not None and own.live and own.status != status:
            own.status = status  # type: ignore[assignment]
            changed = True

    registry = config.registry
    if registry.load(str(ref)) is None:
        return False
    registry.update(str(ref), change)
    if changed and status == "paused":
        events.emit("session.paused", work_item=str(ref))
    elif changed:
        events.emit("session.resumed", work_item=str(ref))
    return changed


@dataclass(frozen=True)
class Principal:
    """Who may direct the loop: one ``routing.authorizedUsers`` entry, by provider."""

    ids: dict[str, str]

    def matches(self, provider: str, actor_id: str) -> bool:
        """GitHub logins compare case-insensitively (GitHub treats them so); every other provider's id exactly
        (a Jira account id, a Slack user id: J14)."""
        known = self.ids.get(provider, "")
        if not known or not actor_id:
            return False
        return known.casefold() == actor_id.casefold() if provider == "github" else known == actor_id


def principals(config: LoadedConfig) -> list[Principal]:
    """``routing.authorizedUsers``: a plain string is a GitHub login; a mapping names one per provider."""
    found = []
    for entry in config.core.routing.authorized_users:
        if isinstance(entry, str):
            found.append(Principal({"github": entry}))
        else:
            found.append(Principal({k: v for k, v in entry.model_dump().items() if k != "name" and v}))
    return found


def is_principal(found: Iterable[Principal], provider: str, actor_id: str) -> bool:
    """Whether ``actor_id`` (of ``provider``) is one of ``found`` (:func:`principals`): allowed to steer and to
    arm. Nobody without an id is."""
    return bool(actor_id) and any(p.matches(provider, actor_id) for p in found)


def standing(
    config: LoadedConfig, refs: Iterable[WorkItemRef | str], provider: str, actor_id: str
) -> Literal["allowed", "collaborator", ""]:
    """Who ``actor_id`` (of ``provider``) is for ``refs``, the one answer every ingress and channel asks:
    ``allowed`` (named in ``routing.authorizedUsers``), ``collaborator`` (on one of the items' ``collaborators``
    list: its input is delivered, its control keywords are not) or "" (a stranger)."""
    if is_principal(principals(config), provider, actor_id):
        return "allowed"
    return "collaborator" if is_collaborator(config, refs, provider, actor_id) else ""


def is_collaborator(config: LoadedConfig, refs: Iterable[WorkItemRef | str], provider: str, actor_id: str) -> bool:
    """Whether ``actor_id`` (of ``provider``) is on the ``collaborators`` list of one of ``refs``: input only, never
    control (issue-307). A GitHub grant names a ``login`` (case-insensitive); other providers' ids sit under the
    provider's own key (``{"slack": "U123"}``) and compare exactly."""
    if not actor_id:
        return False
    store = config.store
    for ref in refs:
        for user in ((store.read(ref) or {}).get("collaborators") or {}).get("users") or []:
            if not isinstance(user, dict):
                continue
            if provider == "github" and str(user.get("login", "")).casefold() == actor_id.casefold():
                return True
            if provider != "github" and user.get(provider) == actor_id:
                return True
    return False


def arming_refusal(config: LoadedConfig, ref: WorkItemRef, labels: Iterable[str] | None = None) -> str | None:
    """Why ``routing.spawnOnUnmatched`` does not arm ``ref`` (A §2.7 S1), or None when it does.

    ``labels`` are the item's current labels when the event carries them (so a comment event works); otherwise they
    are read through the ref's ticketing provider. With ``labeled`` every ``routing.autoExecuteLabels`` label is
    required, and an empty list arms nothing (issue-381).
    """
    routing = config.core.routing
    policy = routing.spawn_on_unmatched
    if policy == "always":
        return None
    if policy == "never":
        return "routing.spawnOnUnmatched is never: no work item can be started (set it to labeled or always)"
    if not routing.auto_execute_labels:
        return "routing.autoExecuteLabels is empty: no label arms a work item"
    if labels is None:
        try:
            tickets = config.tickets(ref)
            if tickets is None:
                return f"cannot read the labels of {ref}: no ticketing provider for {ref.provider!r} is installed"
            labels = tickets.labels(ref)
        except Exception as exc:
            return f"cannot read the labels of {ref}: {exc}"
    present = set(labels)
    missing = [label for label in routing.auto_execute_labels if label not in present]
    if missing:
        return f"{ref} does not carry the label(s) {', '.join(repr(m) for m in missing)} (routing.autoExecuteLabels)"
    return None


def explain_refusal(config: LoadedConfig, ref: WorkItemRef, reason: str, text: str, detail: str = "") -> bool:
    """R3: one self-marked ``⚠️`` reply on the work item saying what was refused and what to do; ``detail`` (a
    hook's own reason, never payload text) is flattened and capped. Best-effort: a failure is logged as
    ``control.reply_failed`` and False returned; nothing else changes."""
    from the_loop import events

    body = f"⚠️ {text}"
    if detail:
        body += f"\n\nReason given: {' '.join(detail.split())[:300]}"
    try:
        return post_marked(config, ref, body) is not None
    except Exception as exc:
        events.emit("control.reply_failed", level="warning", work_item=str(ref), reason=reason, error=str(exc)[:300])
        return False


def post_marked(config: LoadedConfig, ref: WorkItemRef, text: str) -> str | None:
    """Post a self-marked comment on ``ref`` through its ticketing provider; the comment id, or None when no
    provider for its scheme is installed. Raises what the provider raises."""

    provider = config.tickets(ref)
    if provider is None:
        return None
    return provider.post_comment(ref, provider.mark(text))
