"""What a person does to a work item from outside its ticket: say, answer, pause, resume, stop, clean up, and
steer: interrupt a turn, raise a budget, answer a decision prompt on the session's screen.

The CLI's ``sessions say|pause|resume|stop|cleanup`` and the web control plane's actions are two surfaces over
these functions, so both take one path: the same control record, the same dispatcher (FIFO and dedupe with every
other event), the same ``control.command`` line with its ``source`` and ``actor``, the same ticket comment. Each
returns a :class:`Done` saying what happened; the surface decides how to show it.

The agent's side of a question lives here too: ``the-loop ask`` records the question on this machine's session
record (``question``), and it stays open until somebody answers — through :func:`answer`, or any person's input
delivered into the session (the dispatcher clears it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from the_loop import events

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import SessionRecord

QUESTION_TEXT_CAP = 4000  # the question shown to the humans; the ticket has it whole
SURFACES = {"cli": "the CLI", "web": "the web control plane"}


@dataclass
class Done:
    """One action's outcome: ``ok`` (the surface's exit status), the ``control.command`` effect, one line for a
    person, and the close or cleanup result where there is one."""

    ok: bool
    effect: str
    message: str
    tmux_target: str = ""
    result: Any = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"ok": self.ok, "effect": self.effect, "message": self.message}
        if self.tmux_target:
            data["tmuxTarget"] = self.tmux_target
        if self.result is not None and hasattr(self.result, "to_dict"):
            data["result"] = self.result.to_dict()
        if self.warnings:
            data["warnings"] = self.warnings
        return data


def _logged(ref: WorkItemRef, command: str, effect: str, source: str, actor: str, **fields: Any) -> None:
    events.emit(
        "control.command", work_item=str(ref), command=command, source=source, actor=actor, effect=effect, **fields
    )


def _tell_ticket(config: LoadedConfig, ref: WorkItemRef, did: str, source: str, actor: str) -> str | None:
    """Best effort: say on the ticket what was done (``did``: "paused this work item"); the warning when it
    could not be said."""
    from the_loop.control import post_marked

    surface = SURFACES.get(source, source)
    try:
        post_marked(config, ref, f"the-loop: {actor or 'an operator'} {did} from {surface}.")
    except Exception as exc:
        return f"could not comment on {ref}: {exc}"
    return None


# ------------------------------------------------------------------------------------------------ input


def say(config: LoadedConfig, ref: WorkItemRef, text: str, *, source: str, actor: str, kind: str = "text") -> Done:
    """Deliver ``text`` into ``ref``'s session through the dispatcher, as any event is delivered."""
    from the_loop.models import WorkEvent
    from the_loop.sessions.dispatcher import Dispatcher

    event = WorkEvent(
        delivery_id=f"{source}-say-{uuid.uuid4()}", work_item=str(ref), text=text, source=source, actor=actor
    )
    outcome = Dispatcher(config).dispatch(event)
    if outcome.ok:
        return Done(True, outcome.status, f"{outcome.status} to {outcome.tmux_target}", outcome.tmux_target or "")
    if outcome.reason == "no-session":
        message = f"{ref} has no session; start it with: the-loop sessions start --work-item {ref}"
    elif outcome.reason == "session-paused":
        message = f"{ref} is paused; resume it with: the-loop sessions resume --work-item {ref}"
    elif outcome.reason == "session-blocked":
        message = (
            f"{ref} waits at a decision prompt and was not typed into; answer it with: "
            f"the-loop sessions answer --work-item {ref} <option>"
        )
    else:
        message = f"not delivered to {ref}: {outcome.error or outcome.reason}"
    return Done(False, outcome.reason or "failed", message)


def ask(config: LoadedConfig, ref: WorkItemRef, text: str, comment_id: str | None) -> None:
    """Record the agent's open question on the session record (``question``): what a web page shows and answers."""
    from the_loop.state.registry import now_iso

    question = {
        "id": str(uuid.uuid4()),
        "text": text[:QUESTION_TEXT_CAP],
        "commentId": comment_id or "",
        "askedAt": now_iso(),
    }

    def change(record: SessionRecord) -> None:
        record.extra["question"] = question

    if config.registry.load(str(ref)) is not None:  # no session record: nothing on this machine waits for it
        config.registry.update(str(ref), change)


def open_question(config: LoadedConfig, ref: WorkItemRef) -> dict[str, Any] | None:
    record = config.registry.load(str(ref))
    found = record.extra.get("question") if record is not None else None
    return found if isinstance(found, dict) and isinstance(found.get("id"), str) else None


def answer(config: LoadedConfig, ref: WorkItemRef, text: str, *, question_id: str, source: str, actor: str) -> Done:
    """Deliver ``text`` as the answer to the open question ``question_id``, then mark it answered."""
    question = open_question(config, ref)
    if question is None or question.get("id") != question_id:
        return Done(False, "no-such-question", f"{ref} has no open question {question_id or ''}".rstrip())
    done = say(config, ref, f"Answer to your question ({actor or 'an operator'}): {text}", source=source, actor=actor)
    if done.ok:
        config.registry.update(str(ref), lambda record: record.take_question(question_id))
    return done


# ------------------------------------------------------------------------------------------------ steering


def interrupt(config: LoadedConfig, ref: WorkItemRef, text: str, *, source: str, actor: str) -> Done:
    """Stop the session's current turn with the harness's own interrupt; ``text`` (if any) is the next turn."""
    from the_loop.models import WorkEvent
    from the_loop.sessions.dispatcher import Dispatcher
    from the_loop.sessions.steering.interrupt import KIND, next_turn

    event = WorkEvent(
        delivery_id=f"{source}-interrupt-{uuid.uuid4()}",
        work_item=str(ref),
        text=next_turn(text, actor, source),
        source=source,
        actor=actor,
        kind=KIND,
    )
    outcome = Dispatcher(config).dispatch(event)
    if outcome.ok:
        _logged(ref, "interrupt", "interrupted", source, actor, tmux_target=outcome.tmux_target or None)
        said = " and delivered the text as its next turn" if text.strip() else ""
        return Done(True, "interrupted", f"interrupted {ref}'s turn{said}", outcome.tmux_target)
    effect = outcome.reason or "failed"
    _logged(ref, "interrupt", effect, source, actor)
    if effect == "session-paused":
        return Done(False, effect, f"{ref} is paused: there is no turn to interrupt")
    if effect == "no-session":
        return Done(False, effect, f"{ref} has no running session to interrupt")
    return Done(False, effect, f"not interrupted: {outcome.error or effect}")


def raise_budget(config: LoadedConfig, ref: WorkItemRef, amount: str, *, source: str, actor: str) -> Done:
    """Add ``amount`` (``+5usd``, ``+200000tokens``, ``+30min``) to the work item's budget; a session paused by
    its budget resumes once every measure is under its limit again."""
    from the_loop.sessions.steering import budgets
    from the_loop.state import locked
    from the_loop.state.slugs import work_item_lock

    with locked(work_item_lock(config.state, str(ref), "dispatch")):
        raised = budgets.raise_budget(config, ref, amount, actor=actor, source=source)
    _logged(ref, "budget", raised.effect, source, actor)
    return Done(raised.ok, raised.effect, raised.message)


def answer_prompt(config: LoadedConfig, ref: WorkItemRef, option: str, *, source: str, actor: str) -> Done:
    """Press ``option`` of the decision prompt the session's screen shows (posted as ``session.blocked``)."""
    from the_loop.sessions.steering import stuck
    from the_loop.sessions.tmux import runner_for

    done, what = stuck.answer(config, runner_for(config), ref, option, actor)
    effect = "answered" if done else what.split(":", 1)[0]
    _logged(ref, "answer", effect, source, actor)
    if not done and effect == "nothing-to-answer":
        what = f"no session of {ref} is waiting for a decision on its screen"
    return Done(done, effect, what)


# ------------------------------------------------------------------------------------------------ control


def pause(config: LoadedConfig, ref: WorkItemRef, *, source: str, actor: str, comment: bool) -> Done:
    """Hold off deliveries: events are dropped (never replayed) until resume; tmux is left as it is."""
    from the_loop.control import record, set_session_status

    record(config, ref, "pause", source=source, actor=actor)  # recorded even with no session: the intent outlives it
    found = config.registry.load(str(ref))
    own = found.own if found else None
    if own is None or not own.live:
        _logged(ref, "pause", "no-session", source, actor)
        return Done(
            False, "no-session", f"{ref} has no live session to pause (the pause is recorded in its control state)"
        )
    if own.status == "paused":
        _logged(ref, "pause", "noop", source, actor)
        return Done(True, "noop", f"{ref} is already paused", own.tmux_target)
    set_session_status(config, ref, "paused")
    _logged(ref, "pause", "paused", source, actor, tmux_target=own.tmux_target or None)
    done = Done(True, "paused", f"paused {ref}: events are dropped until resumed", own.tmux_target)
    return _commented(config, ref, done, "paused", source, actor, comment)


def resume(config: LoadedConfig, ref: WorkItemRef, *, source: str, actor: str, comment: bool) -> Done:
    """Deliver events again (those dropped while paused are not replayed)."""
    from the_loop.control import record, recorded, set_session_status

    found = config.registry.load(str(ref))
    own = found.own if found else None
    paused = own is not None and own.status == "paused"
    if not paused and recorded(config, ref) != "pause":
        _logged(ref, "resume", "nothing-to-resume", source, actor)
        return Done(False, "nothing-to-resume", f"nothing to resume: {ref} is not paused")
    record(config, ref, "resume", source=source, actor=actor)
    if paused and own is not None:
        set_session_status(config, ref, "active")
        _logged(ref, "resume", "resumed", source, actor, tmux_target=own.tmux_target or None)
        target = own.tmux_target
        done = Done(True, "resumed", f"resumed {ref}: events are delivered to {target or 'its session'} again", target)
    else:
        _logged(ref, "resume", "recorded", source, actor)
        done = Done(True, "recorded", f"resumed {ref}: the recorded pause is lifted")
    return _commented(config, ref, done, "resumed", source, actor, comment)


def stop(config: LoadedConfig, ref: WorkItemRef, *, source: str, actor: str, comment: bool) -> Done:
    """Record ``stop`` (no event starts it again until a start), then close its session as its closing would."""
    from the_loop.control import record
    from the_loop.sessions.closing import close_session

    record(config, ref, "stop", source=source, actor=actor)  # first: from here on no event may spawn it
    result = close_session(config, ref, remove_checkout=True)
    effect = "stopped" if result.was_live else "no-session"
    _logged(ref, "stop", effect, source, actor)
    if not result.was_live:
        message = f"{ref} has no live session to stop (the stop is recorded in its control state)"
        return Done(False, effect, message, result=result, warnings=list(result.warnings))
    message = f"stopped {ref}: session closed; no event starts it again until `the-loop sessions start`"
    done = Done(True, effect, message, result=result, warnings=list(result.warnings))
    return _commented(config, ref, done, "stopped", source, actor, comment)


def cleanup(config: LoadedConfig, ref: WorkItemRef, *, source: str, actor: str, comment: bool | None = None) -> Done:
    """Kill every endpoint's tmux session, remove the checkout and the local record; keep the portable record.
    Touches nothing remote unless ``comment`` (default ``routing.cleanup.comment``)."""
    from the_loop.sessions.closing import cleanup as cleanup_item

    report = cleanup_item(config, ref, actor=actor, source=source)
    effect = "partial" if report.errors else "cleaned"
    _logged(ref, "cleanup", effect, source, actor, endpoints=report.endpoints or None)
    message = f"cleaned up {ref}" if report.found else f"cleaned up {ref}: nothing was left on this machine"
    done = Done(
        not report.errors, effect, message, result=report, warnings=[f"cleanup of {ref}: {e}" for e in report.errors]
    )
    if comment is None:
        comment = config.core.routing.cleanup.comment
    if comment:
        warning = _tell_ticket(config, ref, "cleaned up this work item's local resources", source, actor)
        if warning:
            done.warnings.append(warning)
    return done


def _commented(
    config: LoadedConfig, ref: WorkItemRef, done: Done, did: str, source: str, actor: str, comment: bool
) -> Done:
    if comment:
        warning = _tell_ticket(config, ref, f"{did} this work item", source, actor)
        if warning:
            done.warnings.append(warning)
    return done
