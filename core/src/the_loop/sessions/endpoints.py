"""A pull request's own session: which endpoint an event is for, and the lazy spawn of a pull request's session.

A work item's session record holds one entry per ref it serves (:mod:`the_loop.state.registry`): its own, and one per
pull request delivering it. Which pull requests get a conversation of their own is the work item's ``sessionPerPr``
(:func:`the_loop.sessions.choices.pull_request_gets_session`): under ``cross-repository`` (the default) a pull request
in another repository than the work item's, ``always`` every one, ``never`` none. Every other entry is a binding —
no tmux session, no conversation — and its events reach the work item's session.

- :func:`endpoint_for` — the router's choice as it builds the work event: the pull request's ref, or the work item's.
  A spawn is always the work item's: an event on a pull request never starts a session of its own for an item that
  has no live session — it starts the work item's, exactly as it did before pull requests had sessions.
- :func:`route` — the dispatcher's, under the work item's lock. A pull request's endpoint is served only while the
  work item's own session is active (a paused or closed item suppresses its pull requests too); a closed endpoint
  (its pull request merged or closed) hands later events back to the work item's session; an endpoint with no
  session yet gets one here, in a checkout of the pull request's repository (its head branch when the event named
  it); one closed with its work item, whose pull request is still open, gets a fresh one when the work item runs
  again. A session declined for want of a checkout of its own (no workspace root, a checkout git refused, its tmux name
  taken) leaves the binding as it is and the event reaches the work item's session; ``session.pr_session_declined``
  says why. A spawned endpoint is delivered into, respawned and resumed exactly like the work item's own.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.hooks import lifecycle
from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.sessions import models, workspace
from the_loop.sessions.harness import HarnessError, adapter_for
from the_loop.sessions.outcomes import Outcome, fail, launched, not_started, session_fields
from the_loop.sessions.prompts import BOOT_PROMPT_CAP, cap, load_template, render_spawn_prompt
from the_loop.sessions.tmux import SpawnResult
from the_loop.state.registry import Endpoint, SessionRecord, canonical
from the_loop.state.slugs import SlugCollision, tmux_name_of
from the_loop.state.store import provider_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from the_loop.config import LoadedConfig
    from the_loop.models import WorkEvent
    from the_loop.sessions.launch import Launcher

    # the dispatcher's refusal: a lifecycle hook said no (event, reason, what, detail, target=…, harness=…)
    Refuse = Callable[..., Outcome]

TEMPLATE = "pull-request.md"


def endpoint_for(config: LoadedConfig, work_item: WorkItemRef, pull_request: str | None, *, spawn: bool) -> str:
    """The endpoint an event on ``pull_request`` routed to ``work_item`` is for: the pull request's own ref when the
    work item's ``sessionPerPr`` gives it a session, else the work item's (and always the work item's for a spawn)."""
    own = str(work_item)
    if spawn or not pull_request or canonical(pull_request) == own:
        return own
    try:
        pull = parse_ref(pull_request)
    except RefError:
        return own
    if pull.key_form:
        return own
    from the_loop.sessions import choices

    return str(pull) if choices.pull_request_gets_session(config, work_item, pull) else own


def route(
    config: LoadedConfig, event: WorkEvent, record: SessionRecord | None, *, launcher: Launcher, refuse: Refuse
) -> Outcome | WorkEvent:
    """For an event whose endpoint is a pull request's: the event to dispatch as every other one (for the pull
    request's spawned session, or handed back to the work item's), or what spawning the pull request's session did.
    ``launcher`` starts it; ``refuse`` is how the dispatcher settles a spawn a lifecycle hook refused."""
    own = record.own if record is not None else None
    entry = record.sessions.get(event.endpoint) if record is not None else None
    if record is None or own is None or own.status != "active":
        return to_work_item(event)
    if entry is not None and entry.status == "closed":
        # Closed when its pull request ended — or with its work item, which runs again now: only the tracker knows
        # which, and only an open pull request gets a session again (a fresh one, like its work item's).
        if not workspace.enabled(config) or _upstream(config, event.endpoint) != "open":
            return to_work_item(event)
    elif entry is not None and (entry.tmux_target or entry.harness_session_id):
        return event  # spawned once: delivered into, respawned or resumed like the work item's own
    return _spawn(config, event, record, entry, launcher, refuse)


def _upstream(config: LoadedConfig, pull_request: str) -> str:
    """The pull request's state as its tracker answers now (``open``, ``merged``, ``closed``…; ``unknown`` when it
    cannot say): asked only for an endpoint that was closed, while its work item's session is active."""
    try:
        pull = parse_ref(pull_request)
        provider = config.tickets(pull)
        return str(provider.item_state(pull)) if provider is not None else "unknown"
    except Exception:  # a tracker that cannot answer keeps the event with the work item's session
        return "unknown"


def to_work_item(event: WorkEvent) -> WorkEvent:
    """``event`` for the work item's own session."""
    return event.model_copy(update={"endpoint": event.work_item, "branch": ""})


def _declined(event: WorkEvent, reason: str, detail: str, *, report: bool = True, level: str = "info") -> WorkEvent:
    """The pull request's session was not made: its binding stays as it is, and the event goes to the work item."""
    if report:
        events.emit(
            "session.pr_session_declined",
            level=level,
            work_item=event.work_item,
            pull_request=event.endpoint,
            reason=reason,
            detail=detail,
            delivery_id=event.delivery_id,
        )
    return to_work_item(event)


def _spawn(
    config: LoadedConfig,
    event: WorkEvent,
    record: SessionRecord,
    entry: Endpoint | None,
    launcher: Launcher,
    refuse: Refuse,
) -> Outcome | WorkEvent:
    """The pull request's first session, in a checkout of its repository, with the event inside its boot prompt."""
    pull = parse_ref(event.endpoint)
    if not workspace.enabled(config):  # a fact of the config: said once, when the pull request is first seen
        detail = "routing.workspace.root is not set, so the pull request has no checkout of its own"
        return _declined(event, "no-workspace", detail, report=entry is None)
    try:
        checkout = workspace.prepare(config, pull, branch=event.branch)
        target = tmux_name_of(config.state, pull)
    except workspace.WorkspaceError as exc:
        return _declined(event, "no-checkout", str(exc), level="warning")
    except SlugCollision as exc:
        return _declined(event, "no-name", str(exc), level="warning")
    own = record.own
    harness = (own.harness if own is not None else "") or config.core.routing.default_harness
    try:
        adapter = adapter_for(harness, config)
    except HarnessError as exc:
        return fail(event, str(exc), will_retry=False, spawn_failed=harness)
    cwd = str(checkout.path)
    prompt = boot_prompt(config, event, pull, checkout)
    spawn = lifecycle.run(lifecycle.session_spawn(config, event, str(pull), adapter.name, cwd, prompt), config)
    if spawn.proceed is False:
        what = f"start a session for {pull}"
        return refuse(event, "hook-refused", what, spawn.reason, target=target, harness=adapter.name)
    prompt = cap(spawn.prompt, BOOT_PROMPT_CAP)  # a hook may have replaced it
    session_id = str(uuid.uuid4())
    chosen = models.for_work_item(config, adapter, event.work_item)
    args = chosen.args
    result = launcher.launch(event.work_item, adapter, target, cwd, session_id, prompt, resume=False, args=args)
    if isinstance(result, SpawnResult):  # the name is held: never cleared for a pull request, the item gets it
        return _declined(event, "name-taken", result.remedy or f"tmux session {target} is taken", level="warning")
    if result is not None:
        return not_started(event, adapter.name, target, result.reason, result.last_lines)
    linked = False

    def change(current: SessionRecord) -> None:
        nonlocal linked
        before = current.sessions.get(str(pull))
        linked = before is None
        created = before.created_at if before is not None else ""
        current.sessions[str(pull)] = launched(adapter.name, session_id, cwd, target, chosen, event, created_at=created)

    config.registry.update(event.work_item, change)
    if linked:
        events.emit("session.pr_linked", work_item=event.work_item, pull_request=str(pull))
    events.emit(
        "session.spawned",
        **models.launch_fields(chosen),
        cwd=cwd,
        branch=checkout.branch or None,
        **session_fields(event, adapter.name, session_id, target),
    )
    lifecycle.run(lifecycle.session_spawned(spawn, session_id, target), config)
    return Outcome("spawned", tmux_target=target)


def boot_prompt(config: LoadedConfig, event: WorkEvent, pull: WorkItemRef, checkout: workspace.Checkout) -> str:
    """The pull request session's boot prompt (``pull-request.md``): which pull request, the work item it delivers,
    where the checkout stands, and the event as untrusted data."""
    work_item = parse_ref(event.work_item)
    where = f"Your working directory, {checkout.path}, is a checkout of {pull.repository}"
    if checkout.branch:
        where += f" on the pull request's head branch, {checkout.branch}."
    else:
        base = checkout.base or "its default branch"
        where += (
            f" at {base}, not at the pull request's head: fetch its head branch from origin and check it out before "
            f"you change anything (for a GitHub pull request: gh pr checkout {pull.number})."
        )
    template = load_template("", config.ref.path.parent, TEMPLATE)
    return render_spawn_prompt(
        template,
        work_item=str(work_item),
        url=provider_url(work_item, config) or "",
        event=event.text,
        pull_request=str(pull),
        pull_request_url=provider_url(pull, config) or "no link",
        repository=pull.repository,
        checkout=where,
    )
