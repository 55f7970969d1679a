"""The dispatcher: the one place that wires a work event to a live session.

For each :class:`~the_loop.models.WorkEvent` it decides, under the work item's cross-process lock: deliver into
the live session, respawn a crashed one (resuming its conversation), spawn a first one, or drop the event with a
machine-readable reason. Every decision writes one ``events.jsonl`` line.

Outcomes are *settled* (done, or deliberately not done: never replayed) or *failed* (the delivery id is released so
a redelivery or the next poll retries it); they and their event-log lines are :mod:`the_loop.sessions.outcomes`.
Starting a harness and waiting until it is ready is :mod:`the_loop.sessions.launch`. :class:`DispatchQueue` runs
dispatches with one FIFO per work item and at most ``routing.maxConcurrentDispatches`` at once.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.hooks import lifecycle
from the_loop.interfaces import HarnessAdapter, Launch
from the_loop.refs import parse_ref
from the_loop.sessions import endpoints, gate
from the_loop.sessions.harness import HarnessError, adapter_for, spawn_workdir
from the_loop.sessions.launch import Launcher
from the_loop.sessions.models import for_work_item, launch_fields
from the_loop.sessions.outcomes import Outcome, drop, fail, launched, name_taken, not_started, session_fields
from the_loop.sessions.prompts import BOOT_PROMPT_CAP, cap, clean, load_template, render_spawn_prompt
from the_loop.sessions.steering import admission, interrupt, stuck
from the_loop.sessions.tmux import DeliveryError, SpawnResult, TargetError, TmuxRunner, runner_for
from the_loop.state import locked
from the_loop.state.registry import Endpoint, SessionRecord, now_iso
from the_loop.state.slugs import SlugCollision, tmux_name_of, work_item_lock
from the_loop.state.store import provider_url

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import WorkEvent
    from the_loop.state.work_item_state import WorkItemState

# What a person writes: delivered into a session, it answers the agent's open question (`the-loop ask`).
ANSWERING_KINDS = ("comment", "review", "review-comment", "reply", "text")


class Dispatcher:
    def __init__(
        self,
        config: LoadedConfig,
        *,
        runner: TmuxRunner | None = None,
    ) -> None:
        self.config = config
        self.routing = config.core.routing
        self.runner = runner or runner_for(config)
        self.registry = config.registry
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_lock = threading.Lock()

    def _launcher(self) -> Launcher:
        # Made per use, never kept: ``runner`` may be replaced on a live dispatcher, and the launch must use it.
        return Launcher(self.config, self.runner, self.registry)

    # ---------------------------------------------------------------------------------------------- dedupe

    def _claim(self, delivery_id: str) -> bool:
        """Mark an id as in flight in this process (LRU of ``routing.dedupCacheSize``); false when already seen."""
        with self._seen_lock:
            if delivery_id in self._seen:
                return False
            self._seen[delivery_id] = None
            while len(self._seen) > self.routing.dedup_cache_size:
                self._seen.popitem(last=False)
            return True

    def _release(self, delivery_id: str) -> None:
        with self._seen_lock:
            self._seen.pop(delivery_id, None)

    # ---------------------------------------------------------------------------------------------- entry

    def dispatch(self, event: WorkEvent) -> Outcome:
        """Decide and act on one event, holding the work item's lock across processes."""
        if not self._claim(event.delivery_id):
            return drop(event, "duplicate-delivery")
        try:
            with locked(work_item_lock(self.config.state, event.work_item, "dispatch")):
                outcome = self._dispatch_locked(event)
        except Exception as exc:  # a bug or an unexpected fault: never lose the event silently
            events.emit(
                "dispatch.error",
                level="error",
                work_item=event.work_item,
                delivery_id=event.delivery_id,
                error=f"{type(exc).__name__}: {exc}",
                will_retry=True,
            )
            outcome = Outcome("failed", error=str(exc), will_retry=True)
        if outcome.again:
            self._release(event.delivery_id)
        return outcome

    def _dispatch_locked(self, event: WorkEvent) -> Outcome:
        record = self._load_or_recover(event.work_item)
        if event.endpoint and event.endpoint != event.work_item:  # a pull request's own session (sessions.endpoints)
            routed = endpoints.route(self.config, event, record, launcher=self._launcher(), refuse=self._hook_refused)
            if isinstance(routed, Outcome):
                return routed
            event = routed
        endpoint_ref = event.endpoint or event.work_item
        endpoint = record.sessions.get(endpoint_ref) if record else None
        if endpoint is not None and event.delivery_id in endpoint.recent_deliveries:
            return drop(event, "already-processed")
        if endpoint is None or endpoint.status == "closed":
            if not event.spawn:
                return drop(event, "no-session")
            return self._spawn(event, endpoint_ref)
        if endpoint.status == "paused":
            return drop(event, "session-paused")
        if event.kind == interrupt.KIND:
            return self._interrupt(event, endpoint_ref, endpoint)
        text = event.text
        if event.kind in lifecycle.INPUT_KINDS and text.strip():  # a person's words, not a machine event
            asked = lifecycle.run(lifecycle.input_received(self.config, event, endpoint_ref), self.config)
            if asked.proceed is False:
                return self._hook_refused(event, "input-refused", "deliver this input", asked.reason)
            text = asked.text
        return self._deliver(event, endpoint_ref, endpoint, clean(text))

    def _load_or_recover(self, work_item: str) -> SessionRecord | None:
        """The item's session record. A corrupt one is moved aside (never overwritten), and when a live tmux session
        holds the item's name it is registered again as the item's session (``session.record_recovered``), so
        the item's events keep reaching the agent instead of colliding with it."""
        record, moved = self.registry.load_or_quarantine(work_item)
        if moved is None:
            return record
        target = tmux_name_of(self.config.state, work_item)
        if self.runner.probe(target) != "live":
            return None  # nothing to find: the item starts over as it would with no record

        def adopt(blank: SessionRecord) -> None:
            blank.sessions[work_item] = Endpoint(
                harness=self.routing.default_harness, status="active", created_at=now_iso(), tmux_target=target
            )

        recovered = self.registry.update(work_item, adopt)
        events.emit(
            "session.record_recovered",
            level="warning",
            work_item=work_item,
            tmux_target=target,
            moved_to=str(moved),
        )
        return recovered

    def relaunch(self, event: WorkEvent) -> Outcome:
        """The work item's choice changed under its live session: end the harness and resume the conversation on
        the arguments the choice resolves to now, with ``event.text`` as the next turn (``session.choice_changed``).
        Settled as ``choice-unchanged`` when they are what it runs on, and left alone (``cannot-relaunch``) when
        its harness cannot resume a conversation: it takes the choice at its next respawn."""
        if not self._claim(event.delivery_id):
            return drop(event, "duplicate-delivery")
        with locked(work_item_lock(self.config.state, event.work_item, "dispatch")):
            record = self.registry.load(event.work_item)
            own = record.own if record else None
            if own is None or own.status != "active" or not own.tmux_target:
                return drop(event, "no-session")
            try:
                adapter = adapter_for(own.harness or self.routing.default_harness, self.config)
            except HarnessError as exc:
                return fail(event, f"relaunch: {exc}", will_retry=False)
            chosen = for_work_item(self.config, adapter, event.work_item, Path(own.cwd) if own.cwd else None)
            if list(chosen.args) == own.harness_args:
                return drop(event, "choice-unchanged")
            if not adapter.capabilities.can_resume or not own.harness_session_id:
                return drop(event, "cannot-relaunch", detail=f"{adapter.name} cannot resume this conversation")
            ended = self.runner.terminate_harness(own.tmux_target, self.routing.tmux.harness_kill_grace_seconds)
            if not ended.ok:
                return fail(event, f"relaunch: {ended.error}", will_retry=False, tmux_target=own.tmux_target)
            events.emit(
                "session.choice_changed",
                work_item=event.work_item,
                harness=adapter.name,
                tmux_target=own.tmux_target,
                was=own.harness_args or None,
                harness_args=list(chosen.args) or None,
                model=chosen.model or None,
                effort=chosen.effort or None,
                actor=event.actor or None,
            )
            return self._respawn(event, event.work_item, own, clean(event.text))

    # -------------------------------------------------------------------------------------------- interrupt

    def _interrupt(self, event: WorkEvent, endpoint_ref: str, endpoint: Endpoint) -> Outcome:
        """Stop the live session's turn with the harness's own interrupt, then deliver the words that came with
        it as the next turn (:mod:`the_loop.sessions.steering.interrupt`). A dead session is not respawned."""
        if not endpoint.tmux_target or self.runner.probe(endpoint.tmux_target) != "live":
            return drop(event, "no-session", detail="its session is not running")
        try:
            adapter = adapter_for(endpoint.harness or self.routing.default_harness, self.config)
        except HarnessError as exc:
            return fail(event, str(exc), will_retry=False)
        pressed = interrupt.press(self.config, self.runner, adapter, endpoint)
        interrupt.logged(event.work_item, endpoint, pressed, event.delivery_id, event.actor)
        if event.text.strip():
            return self._deliver(event, endpoint_ref, endpoint, clean(event.text))
        self._record_delivery(event, endpoint_ref)
        return Outcome("delivered", reason="interrupted", tmux_target=endpoint.tmux_target)

    # --------------------------------------------------------------------------------------------- deliver

    def _deliver(self, event: WorkEvent, endpoint_ref: str, endpoint: Endpoint, text: str) -> Outcome:
        if not endpoint.tmux_target:
            return self._respawn(event, endpoint_ref, endpoint, text)
        if stuck.at_prompt(self.config, self.runner, event.work_item, endpoint_ref, endpoint):
            # A paste's closing Enter would pick the prompt's highlighted option (Claude Code: "Yes"): the event
            # waits, its item's later ones behind it, until a person answered (the-loop answer).
            return self._blocked()
        try:
            self.runner.deliver(endpoint.tmux_target, text)
        except DeliveryError as exc:
            if exc.reason == "session_missing":
                return self._respawn(event, endpoint_ref, endpoint, text)
            return fail(event, str(exc), will_retry=True, tmux_target=endpoint.tmux_target)
        except TargetError as exc:
            return fail(event, str(exc), will_retry=False)
        self._record_delivery(event, endpoint_ref)
        events.emit(
            "dispatch.succeeded",
            work_item=event.work_item,
            endpoint=endpoint_ref if endpoint_ref != event.work_item else None,
            harness=endpoint.harness,
            via="tmux",
            delivery_id=event.delivery_id,
            source=None,
        )
        return Outcome("delivered", tmux_target=endpoint.tmux_target)

    def waits_at_prompt(self, work_item: str) -> Outcome | None:
        """The ``queued`` outcome a delivery to ``work_item``'s live session would get now because its pane shows a
        decision prompt, else None: a caller with work to do before the delivery (a reply's ticket mirror) asks
        first, so a retry does not do it twice."""
        record = self.registry.load(work_item)
        own = record.own if record else None
        if own is None or own.status != "active" or not own.tmux_target:
            return None
        return self._blocked() if stuck.at_prompt(self.config, self.runner, work_item, work_item, own) else None

    def _blocked(self) -> Outcome:
        return Outcome("queued", reason="session-blocked", retry_in=self.routing.capacity.recheck_seconds)

    def _record_delivery(self, event: WorkEvent, endpoint_ref: str, target: str = "") -> None:
        """``target``: the live session delivered into, recorded when the endpoint has none yet (it heals)."""

        taken: dict[str, Any] | None = None

        def change(record: SessionRecord) -> None:
            nonlocal taken
            endpoint = record.sessions.get(endpoint_ref)
            if endpoint is not None:
                endpoint.last_event_at = now_iso()
                endpoint.remember(event.delivery_id)
                if target and not endpoint.tmux_target:
                    endpoint.tmux_target = target
            if event.actor and event.source != "agent" and event.kind in ANSWERING_KINDS:
                taken = record.take_question()  # a person's words reached the session: the question is answered

        self.registry.update(event.work_item, change)
        if taken is not None:
            events.emit(
                "question.answered",
                work_item=event.work_item,
                question=taken.get("id"),
                source=event.source,
                actor=event.actor,
                delivery_id=event.delivery_id,
            )

    # --------------------------------------------------------------------------------------------- respawn

    def _respawn(self, event: WorkEvent, endpoint_ref: str, endpoint: Endpoint, text: str) -> Outcome:
        """The session is gone (or was never spawned): bring it back with ``text`` as its boot prompt, resuming
        the recorded conversation when it can, and never over a live occupant."""
        try:
            target = endpoint.tmux_target or tmux_name_of(self.config.state, endpoint_ref)
        except SlugCollision as exc:
            return fail(event, str(exc), will_retry=False)
        launcher = self._launcher()
        held = launcher.held_by_another(event.work_item, target)
        if held:
            return name_taken(event, target, held.remedy)
        if self.runner.probe(target) == "live":  # also for a record without a target: never replace a live pane
            return self._averted(event, endpoint_ref, endpoint, target, text)
        try:  # a record that names no harness (written before harnesses were named) gets the default one
            adapter = adapter_for(endpoint.harness or self.routing.default_harness, self.config)
        except HarnessError as exc:
            return fail(event, f"respawn: {exc}", will_retry=True, tmux_target=target)
        cwd = endpoint.cwd or str(spawn_workdir(self.config))
        if not os.path.isdir(cwd):
            # The recorded checkout was removed under a live record: make it again (same path, so a resume can
            # still find its conversation) rather than fail this event on every retry: the endpoint's own ref's.
            from the_loop.sessions import workspace

            try:
                cwd = str(workspace.spawn_cwd(self.config, parse_ref(endpoint_ref)).path)
            except workspace.WorkspaceError as exc:
                return fail(event, f"respawn: workspace: {exc}", will_retry=exc.transient, tmux_target=target)
        waiting = admission.admit(self.config, parse_ref(event.work_item), respawn=True)
        if waiting is not None:  # too little memory even for a respawn: it is first in line
            return Outcome("queued", reason=waiting.reason, retry_in=waiting.retry_in, tmux_target=target)
        spawn = lifecycle.run(
            lifecycle.session_spawn(self.config, event, endpoint_ref, adapter.name, cwd, text, respawn=True),
            self.config,
        )
        if spawn.proceed is False:
            return self._hook_refused(
                event, "hook-refused", "respawn its session", spawn.reason, target=target, harness=adapter.name
            )
        text = cap(spawn.prompt, BOOT_PROMPT_CAP)  # the boot prompt is one argv word: tmux refuses ~16 KB
        session_id = endpoint.harness_session_id
        resumed = False
        checkout = Path(cwd) if endpoint_ref == event.work_item else None  # a pull request's: its item's file
        chosen = for_work_item(self.config, adapter, event.work_item, checkout)
        recorded = Launch(text, session_id, Path(cwd), tuple(chosen.args))
        why_not = launcher.why_not_resume(adapter, recorded)
        last_lines: list[str] = []
        if not why_not:
            result = launcher.launch(
                event.work_item, adapter, target, cwd, session_id, text, resume=True, args=chosen.args
            )
            if isinstance(result, SpawnResult):
                return self._occupied(event, adapter, target, text, result)
            resumed = result is None
            if result is not None:
                why_not, last_lines = result.reason, result.last_lines
        if not resumed:
            events.emit(
                "session.resume_failed",
                level="warning",
                work_item=event.work_item,
                harness=adapter.name,
                harness_session_id=session_id or None,
                error=why_not,
                last_lines=last_lines or None,
            )
            # A fresh conversation at once, with this event as its boot prompt; the fresh spawn clears a dead
            # resume pane and verifies it (never a live one).
            session_id = str(uuid.uuid4())
            result = launcher.launch(
                event.work_item, adapter, target, cwd, session_id, text, resume=False, args=chosen.args
            )
            if isinstance(result, SpawnResult):
                return self._occupied(event, adapter, target, text, result)
            if result is not None:
                return not_started(event, adapter.name, target, f"respawn: {result.reason}", result.last_lines)

        def change(record: SessionRecord) -> None:
            current = record.sessions.get(endpoint_ref) or endpoint
            current.harness = adapter.name
            current.harness_session_id = session_id
            current.tmux_target = target
            current.cwd = cwd
            current.status = "active"
            current.last_event_at = now_iso()
            current.model, current.effort, current.harness_args = chosen.model, chosen.effort, list(chosen.args)
            current.remember(event.delivery_id)
            record.sessions[endpoint_ref] = current

        self.registry.update(event.work_item, change)
        events.emit("session.respawned", resumed=resumed, **session_fields(event, adapter.name, session_id, target))
        lifecycle.run(lifecycle.session_spawned(spawn, session_id, target), self.config)  # nothing to announce
        return Outcome("respawned", tmux_target=target)

    def _averted(self, event: WorkEvent, endpoint_ref: str, endpoint: Endpoint, target: str, text: str) -> Outcome:
        """The name is held by a live pane: deliver into it instead of replacing it (never into a decision prompt)."""
        if stuck.at_prompt(
            self.config, self.runner, event.work_item, endpoint_ref, replace(endpoint, tmux_target=target)
        ):
            return self._blocked()
        try:
            self.runner.deliver(target, text)
        except (DeliveryError, TargetError) as exc:
            return fail(event, str(exc), will_retry=True, tmux_target=target)
        self._record_delivery(event, endpoint_ref, target)
        events.emit(
            "session.respawn_averted",
            work_item=event.work_item,
            harness=endpoint.harness,
            tmux_target=target,
            delivery_id=event.delivery_id,
        )
        return Outcome("delivered", tmux_target=target)

    def _occupied(
        self, event: WorkEvent, adapter: HarnessAdapter, target: str, text: str, result: SpawnResult
    ) -> Outcome:
        """A respawn found the name held: deliver into a live occupant, or drop the event naming the remedy."""
        if result.occupant == "live":
            return self._averted(event, event.endpoint or event.work_item, Endpoint(adapter.name), target, text)
        return name_taken(event, target, result.remedy)

    # ---------------------------------------------------------------------------------------------- spawn

    def _spawn(self, event: WorkEvent, endpoint_ref: str) -> Outcome:
        """The first session of a work item: open its conversation, render the boot prompt, start the harness."""
        ref = parse_ref(event.work_item)
        disarmed = self._disarmed_by(event)
        if disarmed:
            admission.forget(self.config, ref)  # stopped while it waited in line: it waits no more
            return drop(event, "awaiting-start", detail=f"the last control command is {disarmed}")
        harness_name = self.routing.default_harness
        started = lifecycle.ask_work_item_start(self.config, ref, actor=event.actor, harness=harness_name)
        if started is not None and started.proceed is False:  # None: this arming was asked already
            lifecycle.disarm(self.config, ref)
            return self._hook_refused(event, "hook-refused", "start work on this item", started.reason)
        try:  # a start is accepted only with a usable default harness: then the channels open (R6)
            adapter = adapter_for(harness_name, self.config)
        except HarnessError as exc:
            return fail(event, str(exc), will_retry=False, spawn_failed=harness_name)
        waiting = admission.admit(self.config, ref)
        if waiting is not None:  # past routing.capacity: in line, tried again without counting a failure
            return Outcome("queued", reason=waiting.reason, retry_in=waiting.retry_in)
        self._open_channels(event)
        from the_loop.sessions import workspace

        try:  # the work item's checkout when routing.workspace.root is set, else routing.spawnWorkdir
            cwd = workspace.spawn_cwd(self.config, ref).path
        except workspace.WorkspaceError as exc:
            return fail(event, f"workspace: {exc}", will_retry=exc.transient, spawn_failed=adapter.name)
        state = gate.before_first_spawn(self.config, ref, cwd)
        if gate.parks(self.config, state):  # no session until an authorized person answers the start gate
            gate.park(self.config, ref, cwd, state, delivery_id=event.delivery_id)
            return drop(event, "spawn-deferred", detail="parked at the start gate")
        url = provider_url(ref, self.config) or ""
        template = load_template(self.routing.spawn_prompt_template, self.config.ref.path.parent, "spawn.md")
        prompt = render_spawn_prompt(
            template, work_item=event.work_item, url=url, event=event.text, repositories=_contributes_to(state)
        )
        session_id = str(uuid.uuid4())
        try:
            target = tmux_name_of(self.config.state, ref)
        except SlugCollision as exc:
            return fail(event, str(exc), will_retry=False, spawn_failed=adapter.name)
        spawn = lifecycle.run(
            lifecycle.session_spawn(self.config, event, endpoint_ref, adapter.name, str(cwd), prompt), self.config
        )
        if spawn.proceed is False:
            return self._hook_refused(
                event, "hook-refused", "start a session", spawn.reason, target=target, harness=adapter.name
            )
        prompt = cap(spawn.prompt, BOOT_PROMPT_CAP)  # a hook may have replaced it
        chosen = for_work_item(self.config, adapter, event.work_item, cwd, state)
        args = chosen.args
        launcher = self._launcher()
        result = launcher.launch(event.work_item, adapter, target, cwd, session_id, prompt, resume=False, args=args)
        if isinstance(result, SpawnResult):
            return fail(event, result.remedy, will_retry=False, tmux_target=target, spawn_failed=adapter.name)
        if result is not None:
            return not_started(event, adapter.name, target, result.reason, result.last_lines)

        def change(record: SessionRecord) -> None:
            record.sessions[endpoint_ref] = launched(adapter.name, session_id, str(cwd), target, chosen, event)

        self.registry.update(event.work_item, change)
        events.emit(
            "session.spawned", **launch_fields(chosen), **session_fields(event, adapter.name, session_id, target)
        )
        spawned = lifecycle.run(lifecycle.session_spawned(spawn, session_id, target), self.config)
        if spawned.announce and self.routing.announce.enabled:
            self._announce(event.work_item, adapter.name, target)
        return Outcome("spawned", tmux_target=target)

    def _disarmed_by(self, event: WorkEvent) -> str:
        """The recorded control command that disarms the item (stop, cleanup; see the_loop.sessions.closing), or ""."""
        from the_loop.control import recorded
        from the_loop.sessions.closing import DISARMING

        command = recorded(self.config, parse_ref(event.work_item))
        return command if command in DISARMING else ""

    def _open_channels(self, event: WorkEvent) -> None:
        """Ask each enabled channel to open the work item's conversation first; a failure never stops the spawn."""
        from the_loop import channels

        channels.open_for_start(self.config, parse_ref(event.work_item))

    def _announce(self, work_item: str, harness: str, target: str) -> None:
        """One self-marked comment with the attach commands, built from registry fields only; best-effort."""

        ref = parse_ref(work_item)
        tmux = " ".join(self.runner.command_prefix)
        body = (
            f"the-loop started a {harness} session for {work_item}.\n\n"
            f"Watch or steer it on the host running the-loop:\n\n"
            f"    {tmux} attach -t {target}\n"
            f"    the-loop sessions attach --work-item {work_item} --read-only\n"
        )
        try:
            provider = self.config.tickets(ref)
            if provider is None:
                return  # no ticketing provider for this scheme: nothing to announce on
            provider.post_comment(ref, provider.mark(body))
        except Exception as exc:
            events.emit(
                "session.announce_failed",
                level="warning",
                work_item=work_item,
                tmux_target=target,
                error=f"{type(exc).__name__}: {exc}",
            )
            if getattr(exc, "status", 0) == 404:  # R2: the tracker has no such item; the session is kept
                events.emit("session.work_item_missing", level="error", work_item=work_item, tmux_target=target)
            return
        events.emit("session.announced", work_item=work_item, tmux_target=target)

    # -------------------------------------------------------------------------------------------- refusals

    def _hook_refused(
        self, event: WorkEvent, reason: str, what: str, detail: str, *, target: str = "", harness: str = ""
    ) -> Outcome:
        """A lifecycle hook said no: nothing launches or is delivered, one explanation goes on the ticket, and the
        event is settled (never retried). ``target``/``harness``: the spawn that was refused."""
        if target:
            events.emit(
                "session.spawn_failed",
                level="error",
                work_item=event.work_item,
                harness=harness or None,
                error=f"refused by a lifecycle hook: {detail or 'no reason given'}",
                will_retry=False,
                tmux_target=target,
            )
        lifecycle.explain_refusal(self.config, parse_ref(event.work_item), what, detail)
        return drop(event, reason, detail=detail)


def _contributes_to(state: WorkItemState) -> str:
    """The spawn prompt's line naming the repositories the work item was chosen to contribute to ("" for none)."""
    if not state.repos:
        return ""
    return (
        "\n- This work item contributes to these repositories (open a pull request in each that needs one, and "
        "record it with `the-loop sessions link-pr`): " + ", ".join(state.repos)
    )


class DispatchQueue:
    """One FIFO per work item, served by one worker at a time, at most ``routing.maxConcurrentDispatches`` items
    in flight. ``submit`` returns a future of the event's :class:`Outcome`."""

    def __init__(self, dispatcher: Dispatcher, max_workers: int | None = None) -> None:
        self.dispatcher = dispatcher
        self._pool = ThreadPoolExecutor(max_workers=max_workers or dispatcher.routing.max_concurrent_dispatches)
        self._queues: dict[str, deque[tuple[WorkEvent, Future[Outcome]]]] = {}
        self._lock = threading.Lock()

    def submit(self, event: WorkEvent) -> Future[Outcome]:
        future: Future[Outcome] = Future()
        with self._lock:
            queue = self._queues.get(event.work_item)
            start = queue is None
            if queue is None:
                queue = self._queues[event.work_item] = deque()
            queue.append((event, future))
        events.emit("dispatch.queued", work_item=event.work_item, delivery_id=event.delivery_id, spawn=event.spawn)
        if start:
            self._pool.submit(self._drain, event.work_item)
        return future

    def _drain(self, work_item: str) -> None:
        while True:
            with self._lock:
                queue = self._queues[work_item]
                if not queue:
                    del self._queues[work_item]
                    return
                event, future = queue.popleft()
            try:
                future.set_result(self.dispatcher.dispatch(event))
            except Exception as exc:  # dispatch() already contains its faults; this is belt and braces
                future.set_exception(exc)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
