"""Control commands in a comment (``start``, ``pause``, ``resume``, ``stop``, ``cleanup``, ``choose``, and the
steering ones: ``interrupt``, ``budget``, ``answer``), executed for the router.

A command is executed in the work item's turn and never forwarded into the session: it is recorded in the portable
``control`` section and acted on (a spawn, a session status, a close, a cleanup), and one ``control.command`` or
``control.rejected`` line says what happened. The router decides that an event *is* a command and claims it once per
machine; this is what running it does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.sessions.outcomes import Outcome

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import InboundEvent
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import SessionRegistry

__all__ = ["REMEDIES", "execute"]

# R3: refusals with something the person can do about them get one marked reply on the work item, saying what.
REMEDIES = {
    "nothing-to-resume": "there is nothing to resume: this work item's session is not paused. To begin work, comment "
    "the start command instead.",
    "input-refused": "a lifecycle hook of this installation refused it. Ask the operator, or try again later.",
    "no-checkout": "this work item has no checkout on this machine to record the choice in yet. Put the choice on the "
    "start comment instead (`the-loop start model=…`).",
    "session-paused": "this work item's session is paused, so there is no turn to interrupt. Resume it first "
    "(`the-loop resume`).",
    "no-session": "this work item has no running session, so there is no turn to interrupt.",
    "bad-budget": "",  # the reason is the text: what was wrong with the amount
    "nothing-to-answer": "no session of this work item is waiting for a decision on its screen. To answer a "
    "question the agent asked, reply in words.",
    "prompt-gone": "the decision prompt is no longer on the session's screen (it was answered, or it changed).",
    "no-such-option": "",  # the reason is the text: the options there are
    "missing-collaborator": "name who to add as `@login` right after the keyword (`the-loop add-collaborator @dana`).",
    "missing-channel": "name the channel by its id right after the keyword (`the-loop add-channel slack@C0123ABCD`); "
    "a #name is not accepted.",
    "channel-taken": "that channel is already the conversation of another work item; one channel carries one work "
    "item. Remove it there first (`the-loop remove-channel`).",
    "unknown-listen-mode": "`--listen` takes `all` (every message in the room) or `mentions` (only messages that "
    "mention the bot).",
}


def execute(
    config: LoadedConfig,
    registry: SessionRegistry,
    event: InboundEvent,
    target: WorkItemRef,
    command: str,
    collaborator: bool,
    *,
    spawn: Callable[[], Outcome],
    relaunch: Callable[[str], Outcome] | None = None,
    interrupt: Callable[[str], Outcome] | None = None,
    answer: Callable[[str], tuple[bool, str]] | None = None,
) -> Outcome:
    """Run ``command`` from ``event`` on ``target``: a collaborator may not, a lifecycle hook may refuse it, then
    each command records itself and acts. ``spawn`` starts the work item's first session (``start`` on an item
    with none): the router's dispatch, with the event's spawn prompt; ``relaunch`` resumes a live session on a choice
    that changed under it (``choose``), with the given text as its next turn; ``interrupt`` stops the live session's
    turn and delivers the given text as the next; ``answer`` presses a decision prompt's option in the pane."""
    from the_loop.hooks import lifecycle

    actor = event.actor.id if event.actor else ""
    if collaborator:
        return _rejected(config, event, target, command, "unauthorized-actor")
    asked = lifecycle.run(
        lifecycle.InputReceived(
            work_item=lifecycle.work_item_facts(target, config),
            kind="command",
            actor=actor,
            source="comment",
            command=command,
            event=event.event,
            text=event.body or "",
        ),
        config,
    )
    if asked.proceed is False:  # L9: a refused command is not executed
        return _rejected(config, event, target, command, "input-refused", detail=asked.reason)
    record = registry.load(str(target))
    own = record.own if record else None
    live = own is not None and own.live
    if command in STEERING:  # never recorded in `control`: they steer a session, they do not arm or disarm
        return _steer(config, event, target, command, interrupt, answer)
    if command in control.GRANTS:  # lists in the portable record: input for others, never control
        return _grant(config, event, target, command)
    if command == "choose":
        return _choose(config, event, target, live, spawn, relaunch)
    if command == "start":
        if not live:
            refusal = control.arming_refusal(config, target, event.labels)
            if refusal is not None:
                return _rejected(config, event, target, command, "spawn-policy")
        control.record(config, target, "start", source="comment", actor=actor, note=event.url)
        _remember_choices(config, event, target)
        _set_budget(config, event, target)
        if live:
            effect = "resumed" if control.set_session_status(config, target, "active") else "noop"
            return _executed(event, target, command, effect)
        outcome = spawn()
        if outcome.reason == "spawn-deferred":  # armed, and waiting at the start gate for a choice
            return _executed(event, target, command, "parked")
        if not outcome.ok:
            return outcome
        return _executed(event, target, command, "started")
    if command == "pause":
        control.record(config, target, "pause", source="comment", actor=actor, note=event.url)
        effect = "paused" if control.set_session_status(config, target, "paused") else "noop"
        return _executed(event, target, command, effect)
    if command == "resume":
        if own is None or own.status != "paused":
            return _rejected(config, event, target, command, "nothing-to-resume")
        control.record(config, target, "resume", source="comment", actor=actor, note=event.url)
        control.set_session_status(config, target, "active")
        return _executed(event, target, command, "resumed")
    if command == "stop":
        control.record(config, target, "stop", source="comment", actor=actor, note=event.url)
        from the_loop.sessions import closing

        closed = live and closing.close_session(config, target, remove_checkout=True).closed
        effect = "stopped" if closed else "noop"
        return _executed(event, target, command, effect)
    from the_loop.sessions import closing  # cleanup records the `cleanup` control command itself

    report = closing.cleanup(config, target, actor=actor, source="comment")
    return _executed(event, target, command, _cleanup_effect(report))


STEERING = ("interrupt", "budget", "answer")


def _steer(
    config: LoadedConfig,
    event: InboundEvent,
    target: WorkItemRef,
    command: str,
    interrupt: Callable[[str], Outcome] | None,
    answer: Callable[[str], tuple[bool, str]] | None,
) -> Outcome:
    """``the-loop interrupt: …``, ``the-loop budget +5usd``, ``the-loop answer 2`` from an authorized person."""
    keywords = config.core.routing.control.keywords
    words = control.argument(event.body, command, keywords, lines=command == "interrupt")
    actor = event.actor.id if event.actor else ""
    if command == "interrupt":
        if interrupt is None:
            return _rejected(config, event, target, command, "no-session")
        outcome = interrupt(words)
        if outcome.reason in ("session-paused", "no-session"):
            return _rejected(config, event, target, command, outcome.reason)
        if not outcome.ok:
            return outcome
        return _executed(event, target, command, "interrupted")
    if command == "budget":
        from the_loop.sessions.steering import budgets

        raised = budgets.raise_budget(config, target, words, actor=actor, source="comment")
        if not raised.ok:
            return _rejected(config, event, target, command, "bad-budget", text=raised.message)
        return _executed(event, target, command, raised.effect)
    done, what = answer(words) if answer is not None else (False, "nothing-to-answer")
    if not done:
        reason = what.split(":", 1)[0]
        return _rejected(
            config, event, target, command, reason if reason in REMEDIES else "nothing-to-answer", text=what
        )
    return _executed(event, target, command, "answered")


def _grant(config: LoadedConfig, event: InboundEvent, target: WorkItemRef, command: str) -> Outcome:
    """``the-loop add-collaborator @dana``, ``the-loop add-channel slack@C0TMP375 --listen all`` and their removals."""
    from the_loop.sessions.grants import grant

    words = control.argument(event.body, command, config.core.routing.control.keywords)
    actor = event.actor.id if event.actor else ""
    done = grant(config, target, command, words, by=actor, source="comment", note=event.url)
    if not done.ok:
        return _rejected(config, event, target, command, done.effect)
    return _executed(event, target, command, done.effect)


def _remember_choices(config: LoadedConfig, event: InboundEvent, target: WorkItemRef) -> None:
    """``the-loop start model=opus …``: the armer's choices, kept for the first spawn (an invalid one is dropped
    there, re-validated like every choice)."""
    from the_loop.sessions import gate

    chosen = gate.arguments(gate.keyword_line(event.body or ""))
    if chosen:
        actor = event.actor
        gate.remember(config, target, chosen, by=actor.id if actor else "", provider=actor.provider if actor else "")


def _set_budget(config: LoadedConfig, event: InboundEvent, target: WorkItemRef) -> None:
    """``the-loop start budget=10usd``: the item's own limit, in place of ``routing.budgets``' (a bad amount is
    explained on the ticket; the start goes ahead)."""
    from the_loop.sessions import gate
    from the_loop.sessions.steering import budgets

    for word in gate.keyword_line(event.body or "").split():
        if word.lower().startswith("budget="):
            wrong = budgets.set_at_start(
                config, target, word.split("=", 1)[1], actor=event.actor.id if event.actor else "", source="comment"
            )
            if wrong:
                control.explain_refusal(config, target, "bad-budget", f"the-loop did not set the budget: {wrong}.")


def _choose(
    config: LoadedConfig,
    event: InboundEvent,
    target: WorkItemRef,
    live: bool,
    spawn: Callable[[], Outcome],
    relaunch: Callable[[str], Outcome] | None,
) -> Outcome:
    """``the-loop choose …`` (or the gate's checklist, ticked): freeze the choices; a parked, armed item then gets
    its first session, carrying them, and a live one is resumed on them (``relaunch``)."""
    from the_loop.sessions import choices, gate

    reply = gate.parse_reply(config, event.body or "")
    if reply.errors:
        _rejected(config, event, target, "choose", "bad-choice")
        text = "the-loop did not record this choice: " + "; ".join(reply.errors) + "."
        control.explain_refusal(config, target, "bad-choice", text)
        return Outcome("dropped", reason="rejected", error="bad-choice")
    actor = event.actor
    state = choices.current(config, target)
    frozen = gate.freeze(
        config,
        target,
        reply.choices,
        by=actor.id if actor else "",
        provider=actor.provider if actor else "",
        source="comment",
        url=event.url,
    )
    if frozen is None:
        return _rejected(config, event, target, "choose", "no-checkout")
    if state.parked and not live and control.recorded(config, target) == "start":
        outcome = spawn()
        return outcome if not outcome.ok else _executed(event, target, "choose", "started")
    if not live or relaunch is None:
        return _executed(event, target, "choose", "recorded" if not live else "recorded-for-next-respawn")
    chosen = ", ".join(f"{key}={value}" for key, value in reply.choices.items() if key in ("model", "effort"))
    text = (
        f"the-loop resumed this conversation on a new choice ({chosen or 'unchanged model and effort'}) made by "
        f"{actor.id if actor else 'an authorized person'}. Carry on where you left off."
    )
    outcome = relaunch(text)
    effect = {"respawned": "relaunched", "dropped": "recorded"}.get(outcome.status, "recorded-for-next-respawn")
    return _executed(event, target, "choose", effect)


def _executed(event: InboundEvent, target: WorkItemRef, command: str, effect: str) -> Outcome:
    events.emit(
        "control.command",
        work_item=str(target),
        command=command,
        source="comment",  # as the recorded `control` section says (the CLI's commands say "cli")
        actor=event.actor.id if event.actor else None,
        effect=effect,
        delivery_id=event.delivery_id,
    )
    return Outcome("dropped", reason="control-executed")


def _rejected(
    config: LoadedConfig,
    event: InboundEvent,
    target: WorkItemRef,
    command: str,
    reason: str,
    *,
    detail: str = "",
    text: str = "",
) -> Outcome:
    events.emit(
        "control.rejected",
        work_items=[str(target)],
        command=command,
        actor=event.actor.id if event.actor else None,
        reason=reason,
        delivery_id=event.delivery_id,
    )
    if reason in REMEDIES:
        remedy = REMEDIES[reason] or f"{text}."
        control.explain_refusal(config, target, reason, f"the-loop did not run `{command}`: {remedy}", detail)
    return Outcome("dropped", reason="rejected", error=reason)


def _cleanup_effect(report: Any) -> str:
    if getattr(report, "errors", None):
        return "partial"
    return "cleaned" if getattr(report, "found", True) else "nothing-to-clean"
