"""Prompt rendering: the boot prompt a session starts with, from a template an operator can override.

Templates are plain text with ``$name`` placeholders (:class:`string.Template`, unknown ones left as they are). The
boot prompt: ``$work_item``, ``$url``, ``$event``; a pull request's own session's (``pull-request.md``) also
``$pull_request``, ``$pull_request_url``, ``$repository`` and ``$checkout``. The event prompt (A §2.10 P1):
``$event_source``, ``$event_origin``, ``$work_item``, ``$event``, ``$action``, ``$repository``, ``$delivery_id``,
``$interaction_directive``, ``$graph_context`` (empty: no process graph yet) and ``$payload_excerpt``.
``routing.promptTemplate`` / ``routing.spawnPromptTemplate`` name an operator's own file (relative to the config
file's directory); when it does not exist the packaged one is used (P8).
Text that reaches a pane is stripped of control characters other than newline and tab (an escape sequence in a
comment must not drive the terminal), and the boot prompt is capped: it travels as one argv element, which tmux
limits to about 16 KB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from string import Template

BOOT_PROMPT_CAP = 12 * 1024
FIELD_CAP = 3500  # one free-text field of an excerpt (a comment body, a check summary)
EXCERPT_CAP = 4000  # the whole excerpt, as JSON
FREE_TEXT = frozenset({"body", "description", "summary"})
TRUNCATED = "… (truncated)"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def clean(text: str) -> str:
    """Drop C0/C1 control characters (ESC included) except newline and tab; CRLF becomes LF."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def remove_all(pattern: re.Pattern[str], text: str) -> str:
    """``text`` with ``pattern`` removed to a fixed point: removing one match can join the pieces of another
    (``[20[201~1~`` holds ``[201~`` once the inner one is gone)."""
    while (stripped := pattern.sub("", text)) != text:
        text = stripped
    return text


def cap(text: str, limit: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    marker = "\n[… truncated by the-loop]"
    return encoded[: limit - len(marker.encode())].decode("utf-8", errors="ignore") + marker


def load_template(override: str, config_dir: Path, default: str) -> str:
    """The operator's template file when configured and readable, else the packaged default (a missing file must
    not stop every delivery: P8)."""
    if override:
        path = Path(override).expanduser()
        try:
            return (path if path.is_absolute() else config_dir / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
    return resources.files("the_loop.sessions.templates").joinpath(default).read_text(encoding="utf-8")


# P5: what the agent is told about where the humans are, per ``routing.interaction.mode`` (fixed texts).
INTERACTION_DIRECTIVES = {
    "work-item": "Nobody watches this terminal: talk to the humans on the work item — answer with `the-loop comment "
    "--work-item $work_item`, ask with `the-loop ask --work-item $work_item` — never by waiting for an answer here.",
    "cli": "A human may be attached to this terminal and can answer you here; anything the people on the work item "
    "should read still goes there with `the-loop comment --work-item $work_item`.",
}


def interaction_directive(mode: str, work_item: str) -> str:
    """The fixed directive for ``routing.interaction.mode`` (an unknown mode reads as ``work-item``)."""
    return Template(INTERACTION_DIRECTIVES.get(mode, INTERACTION_DIRECTIVES["work-item"])).safe_substitute(
        work_item=work_item
    )


def render_spawn_prompt(template: str, *, work_item: str, url: str, event: str, **more: str) -> str:
    """The self-contained boot prompt; ``event`` is capped so the whole stays under :data:`BOOT_PROMPT_CAP`.
    ``more``: the other placeholders a template has (a pull request's: ``$pull_request``, ``$repository`` …)."""
    values = {**more, "work_item": work_item, "url": url or "no link"}
    skeleton = Template(template).safe_substitute(values, event="")
    room = max(BOOT_PROMPT_CAP - len(skeleton.encode()), 512)
    text = Template(template).safe_substitute(values, event=cap(clean(event), room))
    return cap(clean(text).strip(), BOOT_PROMPT_CAP)


def _capped(value: object, budget: int) -> object:
    if isinstance(value, Mapping):
        return {
            key: (_cap_text(item, budget) if key in FREE_TEXT else _capped(item, budget)) for key, item in value.items()
        }
    if isinstance(value, list):
        return [_capped(item, budget) for item in value]
    return value


def _cap_text(value: object, budget: int) -> object:
    if isinstance(value, str) and len(value) > budget:
        return value[: max(budget - len(TRUNCATED), 0)] + TRUNCATED
    return _capped(value, budget)


def render_excerpt(excerpt: Mapping[str, object]) -> str:
    """The allow-listed excerpt as JSON: free-text fields capped at :data:`FIELD_CAP`, the whole under
    :data:`EXCERPT_CAP` by halving the text budget, so it always parses. JSON keeps each untrusted string on one line
    with control bytes escaped (``\\u001b``): it cannot close the fence or drive the terminal."""
    budget = FIELD_CAP
    while True:
        text = json.dumps(_capped(excerpt, budget), indent=2, ensure_ascii=False)
        text = _CONTROL_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        if len(text) <= EXCERPT_CAP or budget <= 16:
            return text
        budget //= 2


# json.dumps(ensure_ascii=False) escapes C0 controls but leaves DEL and C1 controls raw.
_CONTROL_IN_JSON = re.compile(r"[\x7f-\x9f]")


def render_event_prompt(
    template: str,
    *,
    source: str,
    work_item: str,
    event: str,
    action: str,
    repository: str,
    delivery_id: str,
    excerpt: Mapping[str, object],
    origin: str = "",
    interaction_mode: str = "work-item",
) -> str:
    """The prompt pasted into a live session for one event. Every substitution but the JSON excerpt is cleaned; a
    template without ``$interaction_directive`` gets the directive appended (P5)."""
    values = {
        "event_source": source,
        "event_origin": origin or source.split(" ")[0],
        "work_item": work_item,
        "event": event,
        "action": action or "-",
        "repository": repository or "-",
        "delivery_id": delivery_id or "-",
    }
    values = {key: remove_all(_PASTE_MARKERS, clean(value)).replace("\n", " ") for key, value in values.items()}
    directive = interaction_directive(interaction_mode, values["work_item"])
    if "$interaction_directive" not in template and "${interaction_directive}" not in template:
        template = f"{template.rstrip()}\n\n$interaction_directive\n"
    return (
        Template(template)
        .safe_substitute(
            values, interaction_directive=directive, graph_context="", payload_excerpt=render_excerpt(excerpt)
        )
        .strip()
    )


_PASTE_MARKERS = re.compile(r"\[20[01]~")
