"""Stuck sessions: an agent waiting on a decision prompt (*blocked*) or with nothing moving (*idle*).

**Blocked**: the pane shows one of the harness's own decision prompts (a tool permission, a selection), as its
adapter recognises it from the screen (``HarnessAdapter.blocked_prompt``). The prompt's text and options are posted
once to the ticket and the item's channels (``session.blocked``) and kept on the session record (``blocked``); an
authorized ``the-loop answer <option>`` there presses the option's keys in the pane (``session.prompt_answered``).
When the prompt leaves the screen the record is cleared (``session.unblocked``).

**Idle**: nothing changed on the screen or in the transcript for ``routing.stuck.idleMinutes`` while work is pending
(the session is active, not blocked, and no question of the agent's is open already). The humans get one nudge
(``session.idle``), then the ``waiting_for_input`` lifecycle point is told (kind ``idle``). Activity clears it.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.sessions.steering import tell
from the_loop.state.registry import now_iso

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import BlockedPrompt, HarnessAdapter
    from the_loop.refs import WorkItemRef
    from the_loop.sessions.tmux import TmuxRunner
    from the_loop.state.registry import Endpoint, SessionRecord

PROMPT_TEXT_CAP = 1500


def prompt_id(prompt: BlockedPrompt) -> str:
    """The same prompt on screen twice is one prompt: posted once."""
    shape = json.dumps([prompt.text, [(o.key, o.label) for o in prompt.options]])
    return hashlib.sha256(shape.encode()).hexdigest()[:16]


def blocked_of(record: SessionRecord | None) -> dict[str, Any] | None:
    found = record.extra.get("blocked") if record is not None else None
    return found if isinstance(found, dict) and isinstance(found.get("options"), list) else None


def idle_of(record: SessionRecord | None) -> dict[str, Any] | None:
    found = record.extra.get("idle") if record is not None else None
    return found if isinstance(found, dict) else None


# ------------------------------------------------------------------------------------------------- blocked


def see_screen(
    config: LoadedConfig, ref: WorkItemRef, endpoint_ref: str, endpoint: Endpoint, prompt: BlockedPrompt | None
) -> str:
    """Record what the pane shows now: a new prompt is posted once, a gone one cleared; what changed
    ("blocked", "unblocked" or "")."""
    record = config.registry.load(str(ref))
    current = blocked_of(record)
    if prompt is None:
        if current is None or current.get("endpoint") != endpoint_ref:
            return ""
        _set(config, ref, "blocked", None)
        events.emit("session.unblocked", work_item=str(ref), tmux_target=endpoint.tmux_target, prompt=current.get("id"))
        return "unblocked"
    found = prompt_id(prompt)
    if current is not None and current.get("id") == found:
        return ""
    blocked = {
        "id": found,
        "endpoint": endpoint_ref,
        "text": prompt.text[:PROMPT_TEXT_CAP],
        "options": [{"key": o.key, "label": o.label} for o in prompt.options],
        "since": now_iso(),
    }
    _set(config, ref, "blocked", blocked)
    events.emit(
        "session.blocked",
        work_item=str(ref),
        harness=endpoint.harness,
        tmux_target=endpoint.tmux_target,
        prompt=found,
        text=prompt.text[:300],
        options=[o.key for o in prompt.options],
    )
    choices = "\n".join(f"{o.key}. {o.label}" for o in prompt.options)
    quoted = "\n".join(f"> {line}" for line in prompt.text[:PROMPT_TEXT_CAP].splitlines())
    text = (
        f"the-loop: the {endpoint.harness} session of this work item is waiting for a decision:\n\n{quoted}\n\n"
        f"{choices}\n\nAn authorized person answers with `the-loop answer <option>` (for example `the-loop answer "
        f"{prompt.options[0].key if prompt.options else '1'}`)."
    )
    tell(config, ref, "session.blocked", text)
    return "blocked"


def at_prompt(config: LoadedConfig, runner: TmuxRunner, work_item: str, endpoint_ref: str, endpoint: Endpoint) -> bool:
    """Whether ``endpoint``'s pane shows one of its harness's decision prompts now (recorded and posted when it
    does): nothing may be typed into it then, as a paste's closing Enter would pick the highlighted option."""
    from the_loop.refs import parse_ref
    from the_loop.sessions.harness import HarnessError, adapter_for
    from the_loop.sessions.tmux import TmuxError

    try:
        adapter = adapter_for(endpoint.harness or config.core.routing.default_harness, config)
    except HarnessError:
        return False
    if not adapter.capabilities.recognises_prompts:
        return False
    try:
        prompt = adapter.blocked_prompt(runner.capture(endpoint.tmux_target))
    except TmuxError:
        return False  # no pane to read: the delivery finds out what is there
    if prompt is None:
        return False
    see_screen(config, parse_ref(work_item), endpoint_ref, endpoint, prompt)
    return True


def press_answer(
    config: LoadedConfig, runner: TmuxRunner, adapter: HarnessAdapter, ref: WorkItemRef, answer: str, actor: str
) -> tuple[bool, str]:
    """Answer the recorded prompt with the option ``answer`` names, if the pane still shows it: (done, what
    happened). Called under the item's dispatch lock."""
    from the_loop.sessions.tmux import DeliveryError

    record = config.registry.load(str(ref))
    blocked = blocked_of(record)
    endpoint = record.sessions.get(blocked.get("endpoint", "")) if record and blocked else None
    if blocked is None or endpoint is None or not endpoint.tmux_target:
        return False, "nothing-to-answer"
    prompt = adapter.blocked_prompt(runner.capture(endpoint.tmux_target))
    if prompt is None or prompt_id(prompt) != blocked.get("id"):
        see_screen(config, ref, blocked["endpoint"], endpoint, prompt)  # it changed under us: record what is there
        return False, "prompt-gone"
    option = prompt.option(answer)
    if option is None:
        shown = ", ".join(f"{o.key} ({o.label})" for o in prompt.options)
        return False, f"no-such-option: {answer!r} is not one of the options shown: {shown}"
    try:
        runner.send_keys(endpoint.tmux_target, option.keys)
    except DeliveryError as exc:
        return False, f"not-pressed: {exc}"
    _set(config, ref, "blocked", None)
    events.emit(
        "session.prompt_answered",
        work_item=str(ref),
        tmux_target=endpoint.tmux_target,
        prompt=blocked.get("id"),
        option=option.key,
        actor=actor or None,
    )
    return True, f"answered {option.key} ({option.label})"


def answer(config: LoadedConfig, runner: TmuxRunner, ref: WorkItemRef, option: str, actor: str) -> tuple[bool, str]:
    """An authorized person's ``the-loop answer <option>``: pressed in the pane of the session whose prompt was
    posted, in the item's turn (its dispatch lock)."""
    from the_loop.sessions.harness import HarnessError, adapter_for
    from the_loop.state import locked
    from the_loop.state.slugs import work_item_lock

    with locked(work_item_lock(config.state, str(ref), "dispatch")):
        record = config.registry.load(str(ref))
        blocked = blocked_of(record)
        endpoint = record.sessions.get(blocked.get("endpoint", "")) if record and blocked else None
        if endpoint is None:
            return False, "nothing-to-answer"
        try:
            adapter = adapter_for(endpoint.harness or config.core.routing.default_harness, config)
        except HarnessError as exc:
            return False, f"nothing-to-answer: {exc}"
        return press_answer(config, runner, adapter, ref, option, actor)


# ---------------------------------------------------------------------------------------------------- idle


def see_quiet(
    config: LoadedConfig, ref: WorkItemRef, endpoint: Endpoint, last_change: float, now: float | None = None
) -> str:
    """Given when the session's screen or transcript last changed: nudge once when it has been quiet for
    ``routing.stuck.idleMinutes`` with work pending, clear the mark when it moved again. "idle", "active" or ""."""
    now = time.time() if now is None else now
    record = config.registry.load(str(ref))
    idle = idle_of(record)
    quiet = now - last_change >= config.core.routing.stuck.idle_minutes * 60
    if not quiet:
        if idle is not None:
            _set(config, ref, "idle", None)
            events.emit("session.active", work_item=str(ref), tmux_target=endpoint.tmux_target)
            return "active"
        return ""
    asked = record is not None and isinstance(record.extra.get("question"), dict)  # the-loop ask told the humans
    pending = endpoint.status == "active" and blocked_of(record) is None and not asked
    if idle is not None or not pending:
        return ""
    minutes = round((now - last_change) / 60)
    _set(config, ref, "idle", {"since": events.timestamp(last_change), "nudgedAt": now_iso()})
    events.emit("session.idle", work_item=str(ref), tmux_target=endpoint.tmux_target, quiet_minutes=minutes)
    text = (
        f"the-loop: the {endpoint.harness} session of this work item has shown no activity for {minutes} minutes "
        "and may be waiting for input. Reply here to steer it, or comment `the-loop interrupt: <what to do>`."
    )
    tell(config, ref, "session.idle", text)
    from the_loop.hooks.lifecycle import decide

    decide("waiting_for_input", str(ref), {"kind": "idle", "question": text}, config)  # a notification here
    return "idle"


# ---------------------------------------------------------------------------------------------------- common


def _set(config: LoadedConfig, ref: WorkItemRef, key: str, value: dict[str, Any] | None) -> None:
    def change(record: SessionRecord) -> None:
        if value is None:
            record.extra.pop(key, None)
        else:
            record.extra[key] = value

    config.registry.update(str(ref), change)
