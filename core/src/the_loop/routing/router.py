"""The router: one normalized event in, one decision out — provider-neutral (A §2.2 to §2.8).

In this order: the repository bound, a work item to act on, the self-authored marker (before anyone's identity is
read), authorization, a CI result worth acting on (M8), the pull request's links completed and branch-only refs
checked for existence (X3, X5), then either a control command (executed in the work item's turn, never forwarded) or a
delivery — into the live session, or a spawn when the item is armed and started. Every drop writes one
``routing.dropped`` or ``dispatch.dropped`` line with a machine-readable ``reason``.

The router runs off the request path: ingresses write to the durable inbox, and the inbox worker hands each entry to
:meth:`Router.handle` in arrival order (:mod:`the_loop.routing.service`). Running a control command is
:mod:`the_loop.routing.commands`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.control import principals
from the_loop.models import InboundEvent, WorkEvent
from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.routing import commands, replies
from the_loop.sessions import endpoints, gate
from the_loop.sessions.dispatcher import Dispatcher, Outcome
from the_loop.sessions.prompts import load_template, render_event_prompt, render_excerpt
from the_loop.state.registry import SessionRegistry

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import TicketProvider

CONTENT_KINDS = ("comment", "review", "review-comment")
EXISTENCE_CACHE_SIZE = 256
# R1 (issue-371): what the triggering object shows once the router is done. Delivered, spawned, an executed command
# or a close acted on → `completed`; a failure or a refusal → `error`; a suppression (awaiting-start, session-paused,
# spawn-policy, a duplicate …) keeps only its `started` mark.
COMPLETED = frozenset({"control-executed", "work-item-ended", "pull-request-ended"})
REFUSED = frozenset({"rejected", "input-refused", "hook-refused", "session-occupied"})


class Router:
    def __init__(self, config: LoadedConfig, dispatcher: Dispatcher | None = None) -> None:
        self.config = config
        self.dispatcher = dispatcher or Dispatcher(config)
        self.registry = config.registry
        self._principals = principals(config)
        self._existence: OrderedDict[str, bool] = OrderedDict()  # X5: ref → exists, definite answers only
        self._existence_lock = threading.Lock()

    # ------------------------------------------------------------------------------------------------ entry

    def handle(self, event: InboundEvent, *, entry: str = "") -> Outcome:
        """Route one event and act on it; never raises for bad input (the outcome says what happened)."""
        refs = self._refs(event)
        if refs is None:
            return self._dropped(event, "undeclared-repository", repository=event.repository)
        if not refs:
            return self._dropped(event, "no-work-item", level="debug")
        provider = self._provider(refs[0])
        if event.body and provider is not None and provider.is_self_authored(event.body):
            return self._dropped(event, "self-authored", refs=refs)
        # X3(a), asked at most once per event: GitHub's own record of what a pull request closes
        closing_refs = functools.cache(lambda: self._closing_references(event))
        authorized, collaborator = self._authorized(event, refs, closing_refs)
        if not authorized:
            return self._dropped(event, "unauthorized-actor", refs=refs, level="warning")
        if event.kind == "ci" and not (self.config.core.routing.ci.autofix and event.conclusion == "failure"):
            # M8: passes, cancels and suite/workflow summaries are logged and settled, never a prompt
            target = self._target(event, refs)
            return self._settle(event, target, "ci-not-actionable", conclusion=event.conclusion or None)
        refs = self._linked(event, refs, closing_refs())
        if not refs:  # X5: every ref was a branch name for an item that does not exist
            events.emit(
                "dispatch.dropped",
                reason="work-item-not-found",
                work_items=list(event.work_items),
                gh_event=event.event,
                delivery_id=event.delivery_id,
            )
            return Outcome("dropped", reason="work-item-not-found")
        target = self._target(event, refs)
        actor = event.actor
        if collaborator and actor and not control.is_collaborator(self.config, [target], actor.provider, actor.id):
            # issue-307: a grant is input on that work item only, never on the one this event turned out to be about
            return self._dropped(event, "unauthorized-actor", refs=refs, level="warning")
        labeled = control.arming_refusal(self.config, target, event.labels) is None
        events.emit(
            "routing.routed",
            gh_event=event.event,
            action=event.action or None,
            delivery_id=event.delivery_id,
            actor=event.actor.id if event.actor else None,
            work_items=[str(ref) for ref in refs],
            labeled=labeled,
            collaborator=collaborator or None,
        )
        self._react(provider, event, "started")
        if event.kind == "closed":
            outcome = self._closed(event, target)  # closes never spawn or prompt
        else:
            if event.kind == "reopened":
                from the_loop.sessions import closing

                # the reopened object's own stamp: a linked pull request reopening does not reopen its issue
                with contextlib.suppress(RefError):
                    reopened = parse_ref(event.entity or str(target))
                    closing.work_item_reopened(self.config, reopened, actor=_actor(event), source=event.transport)
            parsed = control.parse(event.body, self.config.core.routing.control.keywords)
            if parsed.command is None and gate.is_ticked_reply(event.body) and gate.is_parked(self.config, target):
                parsed = control.ControlParse("choose", ("choose",))  # the start gate's checklist, ticked
            if parsed.ambiguous:
                events.emit(
                    "control.ambiguous",
                    work_item=str(target),
                    commands=list(parsed.commands),
                    delivery_id=event.delivery_id,
                )
            if parsed.command and event.kind in CONTENT_KINDS and self.config.core.routing.control.enabled:
                outcome = self._claimed_command(event, target, parsed.command, collaborator, entry)
            else:
                outcome = self._deliver(event, target, collaborator)
        acted = outcome.ok or outcome.reason == "control-executed"  # delivered, spawned, or a command ran
        if acted and event.pull_request and event.pull_request != str(target):
            self._bind_pull_request(target, event.pull_request)
        if outcome.status == "failed" or outcome.reason in REFUSED:
            self._react(provider, event, "error")
        elif outcome.ok or outcome.reason in COMPLETED:
            self._react(provider, event, "completed")
        return outcome

    # ---------------------------------------------------------------------------------------------- guards

    def _refs(self, event: InboundEvent) -> list[WorkItemRef] | None:
        """The event's work items inside the repository bound; None when the event's own repository is outside."""
        bound = {_without_default_host(repo) for repo in self.config.core.repositories}
        if bound and event.repository and _without_default_host(event.repository) not in bound:
            return None
        return self._bounded(event, event.work_items)

    def _bounded(self, event: InboundEvent, texts: Any) -> list[WorkItemRef]:
        """The refs among ``texts`` that parse and lie inside ``repositories`` (F4), each once, in order."""
        bound = {_without_default_host(repo) for repo in self.config.core.repositories}
        refs: list[WorkItemRef] = []
        for text in texts:
            try:
                ref = parse_ref(text)
            except RefError:
                continue
            if bound and not ref.key_form and _without_default_host(ref.repository) not in bound:
                events.emit(
                    "routing.dropped",
                    reason="undeclared-repository",
                    delivery_id=event.delivery_id,
                    work_items=[text],
                    repository=ref.repository,
                )
                continue
            if ref not in refs:
                refs.append(ref)
        return refs

    def _authorized(
        self, event: InboundEvent, refs: list[WorkItemRef], closing_refs: Any = lambda: []
    ) -> tuple[bool, bool]:
        """(may act, only as a collaborator). CI events carry no actor; a close can only end a session, so it
        needs none either; every other event needs a named, authorized actor (fail closed). A collaborator passes
        here when granted on any work item the event may be about — its refs, the work item its pull request is
        recorded on, the issues GitHub says the pull request closes (``closing_refs``, asked only when the cheaper
        answers said no) — and :meth:`handle` then requires the grant on the one target."""
        if event.kind in ("ci", "closed"):
            return True, False
        actor = event.actor
        if actor is None or not actor.id:
            return False, False
        if control.is_principal(self._principals, actor.provider, actor.id):
            return True, False
        # A relay is the-loop's own comment carrying the operator's words (a provider namespace no user can spell:
        # only an ingress builds actors, and it sets ``<provider>-relay`` only for the service account's relays).
        if actor.provider.endswith("-relay") and actor.id == "operator":
            return True, False
        if control.is_collaborator(self.config, refs, actor.provider, actor.id):
            return True, True
        if event.pull_request is not None:
            owner = self._owner(event, refs)
            for more in ([owner] if owner is not None else [], closing_refs()):
                extra = [ref for ref in more if ref not in refs]
                if extra and control.is_collaborator(self.config, extra, actor.provider, actor.id):
                    return True, True
        return False, False

    def _target(self, event: InboundEvent, refs: list[WorkItemRef]) -> WorkItemRef:
        """X6: the work item this event is about — the live owner of one of its refs, else the first ref."""
        return self._owner(event, refs) or refs[0]

    def _owner(self, event: InboundEvent, refs: list[WorkItemRef]) -> WorkItemRef | None:
        """The work item whose live session record owns one of ``refs``. For an event on a pull request, a live
        work item the pull request is recorded on comes first (issue-172: the binding wins, even once the linkage
        text is gone or GitHub's closing references name another item with a session); then a live record of one
        of the refs itself. Only pull requests are recorded on other items, so only their events look through the
        records."""
        if event.pull_request is not None:
            bound = self._bound_owner({str(ref) for ref in refs}, live=True)
            if bound is not None:
                return bound
        for ref in refs:
            record = self.registry.load(str(ref))
            if record is not None and record.own is not None and record.own.live:
                return ref
        return None

    def _bound_owner(self, wanted: set[str], *, live: bool) -> WorkItemRef | None:
        """The work item (with a live session when ``live``) on whose record one of ``wanted`` is a pull request."""
        for record in self.registry.records():
            own = record.own
            if own is not None and (own.live or not live) and wanted & (set(record.sessions) - {record.work_item}):
                with contextlib.suppress(RefError):
                    return parse_ref(record.work_item)
        return None

    def _closing_references(self, event: InboundEvent) -> list[WorkItemRef]:
        """X3(a): what the tracker says the event's pull request closes; [] when it cannot say (a failed lookup
        never drops the event: the event's own linkage is used as it is)."""
        if not event.pull_request:
            return []
        with contextlib.suppress(Exception):
            pull_request = parse_ref(event.pull_request)
            provider = self._provider(pull_request)
            return list(provider.delivered_items(pull_request) or ()) if provider is not None else []
        return []

    def _linked(self, event: InboundEvent, refs: list[WorkItemRef], delivered: list[WorkItemRef]) -> list[WorkItemRef]:
        """X3(a) and X5: the tracker's own record of what a pull request closes (``delivered``) goes first; a ref
        resting only on the branch convention is dropped when the tracker says, definitively, that it does not
        exist — unless a live record already owns one of the event's refs (then the record decides, and nothing
        is asked)."""
        confirmed = self._bounded(event, [str(ref) for ref in delivered])
        refs = [*confirmed, *(ref for ref in refs if ref not in confirmed)]
        unconfirmed = [ref for ref in refs if str(ref) in event.unconfirmed and ref not in confirmed]
        if not unconfirmed or self._owner(event, refs) is not None:
            return refs
        for ref in unconfirmed:
            if self._exists(ref) is False:
                events.emit(
                    "routing.linkage_dropped",
                    work_item=str(ref),
                    source="branch",
                    reason="not-found",
                    gh_event=event.event,
                    delivery_id=event.delivery_id,
                )
                refs.remove(ref)
        return refs

    def _exists(self, ref: WorkItemRef) -> bool | None:
        """X5: False only on the tracker's definitive "no such item" (GitHub's 404); None when it could not say
        (no token, timeout, 403, 5xx). Definite answers are kept in a bounded LRU, so a busy branch asks once."""
        key = str(ref)
        with self._existence_lock:
            if key in self._existence:
                self._existence.move_to_end(key)
                return self._existence[key]
        provider = self._provider(ref)
        try:
            state = provider.item_state(ref) if provider is not None else "unknown"
        except Exception:
            state = "unknown"
        if state == "unknown":
            return None
        with self._existence_lock:
            self._existence[key] = state != "missing"
            while len(self._existence) > EXISTENCE_CACHE_SIZE:
                self._existence.popitem(last=False)
        return state != "missing"

    def _bind_pull_request(self, target: WorkItemRef, pull_request: str) -> None:
        """X7: record the pull request on the work item it delivered to, so later events route by the record."""
        try:
            added = bind_pull_request(self.registry, target, pull_request)
        except Exception as exc:  # a failed write never loses the delivery
            events.emit(
                "session.link_failed", level="warning", work_item=str(target), pull_request=pull_request, error=str(exc)
            )
            return
        if added:
            events.emit("session.pr_linked", work_item=str(target), pull_request=pull_request)

    # ---------------------------------------------------------------------------------------------- closes

    def _closed(self, event: InboundEvent, target: WorkItemRef) -> Outcome:
        """A2.9: the item itself closing or merging ends it; a close names its repository and number, so a
        same-numbered item elsewhere is never closed by it."""
        from the_loop.sessions import closing

        try:
            closed = parse_ref(event.entity or "")
        except RefError:
            return self._settle(event, target, "no-work-item")
        if event.closed is None:
            return self._settle(event, target, "not-the-work-item")
        if closed != target:
            # a pull request recorded on a work item (the target's, else any record's, live or not) ends only
            # that endpoint; one recorded nowhere is a work item of its own, ended if the-loop tracks it
            if closing.pull_request_ended(
                self.config, target, closed, reason=event.closed, delivery_id=event.delivery_id
            ):
                return Outcome("dropped", reason="pull-request-ended")
            owner = self._bound_owner({str(closed)}, live=False)
            if owner is not None and closing.pull_request_ended(
                self.config, owner, closed, reason=event.closed, delivery_id=event.delivery_id
            ):
                return Outcome("dropped", reason="pull-request-ended")
        actor = _actor(event)
        authorized = bool(actor) and control.is_principal(self._principals, event.actor.provider, actor)  # type: ignore[union-attr]
        report = closing.work_item_ended(
            self.config,
            closed,
            reason=event.closed,
            actor=actor,
            authorized=authorized,
            source=event.transport,
            delivery_id=event.delivery_id,
            state_reason=_state_reason(event),
        )
        return Outcome("dropped", reason="work-item-ended" if report.tracked else "untracked")

    # -------------------------------------------------------------------------------------------- commands

    def _command(self, event: InboundEvent, target: WorkItemRef, command: str, collaborator: bool) -> Outcome:
        def spawn() -> Outcome:  # `start` on an item with no session: the same spawn a delivery would make
            return self.dispatcher.dispatch(self.work_event(event, target, spawn=True))

        def relaunch(text: str) -> Outcome:  # `choose` under a live session: resume it on the new choice
            actor = event.actor.id if event.actor else ""
            work = WorkEvent(
                delivery_id=f"{event.dedupe_key}:relaunch",
                work_item=str(target),
                text=text,
                source=event.transport,
                actor=actor,
                kind=event.kind,
            )
            return self.dispatcher.relaunch(work)

        def interrupt(text: str) -> Outcome:  # `interrupt`: the harness's own interrupt, then the words
            from the_loop.sessions.steering.interrupt import KIND, next_turn

            actor = event.actor.id if event.actor else ""
            work = WorkEvent(
                delivery_id=f"{event.dedupe_key}:interrupt",
                work_item=str(target),
                text=next_turn(text, actor, event.provider),
                source=event.transport,
                actor=actor,
                kind=KIND,
            )
            return self.dispatcher.dispatch(work)

        def answer(option: str) -> tuple[bool, str]:  # `answer`: a decision prompt's option, pressed in the pane
            from the_loop.sessions.steering import stuck

            return stuck.answer(
                self.config, self.dispatcher.runner, target, option, event.actor.id if event.actor else ""
            )

        return commands.execute(
            self.config,
            self.registry,
            event,
            target,
            command,
            collaborator,
            spawn=spawn,
            relaunch=relaunch,
            interrupt=interrupt,
            answer=answer,
        )

    def _claimed_command(
        self, event: InboundEvent, target: WorkItemRef, command: str, collaborator: bool, entry: str = ""
    ) -> Outcome:
        """J20: an object two ingresses deliver (``shared_dedupe``) runs its command once per machine; a failure
        handed back for a retry releases the claim, and ``entry`` (the inbox entry being handled) may re-take its own
        claim after a crash mid-command."""
        if not event.shared_dedupe:
            return self._command(event, target, command, collaborator)
        from the_loop.control import claims as control_claims

        if not control_claims.claim(self.config.state, event.dedupe_key, entry):
            return self._settle(event, target, "already-processed")
        try:
            outcome = self._command(event, target, command, collaborator)
        except Exception:
            control_claims.release(self.config.state, event.dedupe_key)
            raise
        if getattr(outcome, "again", False):  # a retry, or a start waiting in line: it runs again then
            control_claims.release(self.config.state, event.dedupe_key)
        return outcome

    # ------------------------------------------------------------------------------------------- delivery

    def _deliver(self, event: InboundEvent, target: WorkItemRef, collaborator: bool) -> Outcome:
        # A channel reply is mirrored and delivered there; a person's comment is published (comment.human) first.
        if (handled := replies.routed(self, event, target)) is not None:
            return handled
        record = self.registry.load(str(target))
        own = record.own if record else None
        if own is not None and own.live:
            work = self.work_event(event, target, spawn=False)
            return self.dispatcher.dispatch(self._with_files(event, target, work, own.status))
        refusal = control.arming_refusal(self.config, target, event.labels)
        if refusal is not None:
            return self._settle(event, target, "spawn-policy")
        if collaborator:
            return self._settle(event, target, "collaborator-no-spawn")
        routing = self.config.core.routing
        needs_start = routing.control.enabled and routing.control.require_start_command
        if needs_start and control.recorded(self.config, target) != "start":
            return self._settle(event, target, "awaiting-start")
        return self.dispatcher.dispatch(self.work_event(event, target, spawn=True))

    def _with_files(self, event: InboundEvent, target: WorkItemRef, work: WorkEvent, status: str) -> WorkEvent:
        """A person's comment linking uploads on its tracker, going into a live session (every refusal behind us):
        the uploads are fetched now and named to the pane beside it (issue-416)."""
        from the_loop.channels import CONTENT_KINDS, attachments

        provider = self.config.tickets(target)
        if provider is None or status != "active" or event.kind not in CONTENT_KINDS or not event.body:
            return work  # a paused session drops the comment: its files are left alone
        files = tuple(provider.attachments(event.body))
        if not files:
            return work
        saved = attachments.fetch_all(self.config, provider, target, files, by_channel=False)
        return work.model_copy(update={"text": work.text + "\n" + attachments.pane_frame(saved)})

    def work_event(self, event: InboundEvent, target: WorkItemRef, *, spawn: bool) -> WorkEvent:
        """The text a session gets for this event: the event prompt, or for a spawn the event inside the boot
        prompt (the dispatcher wraps it in the spawn template)."""
        routing = self.config.core.routing
        if spawn:
            text = (
                f"It was started by {event.event} ({event.action or '-'}) on {event.entity or target}; "
                f"the event, as untrusted data:\n\n```json\n{render_excerpt(event.excerpt)}\n```"
            )
        else:
            template = load_template(routing.prompt_template, self.config.ref.path.parent, "event.md")
            text = render_event_prompt(
                template,
                source=f"{event.provider} {event.transport}",
                work_item=str(target),
                event=event.event,
                action=event.action,
                repository=event.repository,
                delivery_id=event.delivery_id,
                excerpt=event.excerpt,
                origin=event.provider,
                interaction_mode=routing.interaction.mode,
            )
        # A pull request with a session of its own per the item's sessionPerPr (never for a spawn: sessions.endpoints)
        endpoint = endpoints.endpoint_for(self.config, target, event.pull_request, spawn=spawn)
        return WorkEvent(
            delivery_id=event.dedupe_key,
            work_item=str(target),
            endpoint=endpoint,
            text=text,
            spawn=spawn,
            source=event.transport,
            actor=event.actor.id if event.actor else "",
            kind=event.kind,
            branch=event.head_branch if endpoint != str(target) else "",
        )

    # ------------------------------------------------------------------------------------------- outcomes

    def _dropped(
        self,
        event: InboundEvent,
        reason: str,
        *,
        refs: list[WorkItemRef] | None = None,
        level: str = "info",
        **more: Any,
    ) -> Outcome:
        events.emit(
            "routing.dropped",
            level=level,
            reason=reason,
            gh_event=event.event,
            action=event.action or None,
            delivery_id=event.delivery_id,
            actor=event.actor.id if event.actor else None,
            work_items=[str(ref) for ref in refs] if refs else None,
            **more,
        )
        return Outcome("dropped", reason=reason)

    def _settle(self, event: InboundEvent, target: WorkItemRef, reason: str, **more: Any) -> Outcome:
        events.emit(
            "dispatch.dropped",
            reason=reason,
            work_item=str(target),
            gh_event=event.event,
            delivery_id=event.delivery_id,
            **more,
        )
        return Outcome("dropped", reason=reason)

    def _provider(self, ref: WorkItemRef) -> TicketProvider | None:

        return self.config.tickets(ref)

    def _react(self, provider: TicketProvider | None, event: InboundEvent, state: str) -> None:
        """``routing.reactions``: started → completed or error on the triggering object; best-effort."""
        reactions = self.config.core.routing.reactions
        reaction = getattr(reactions, state, "")
        if provider is None or not event.ack or not reactions.enabled or not reaction:
            return
        with contextlib.suppress(Exception):  # best-effort; the provider logs reaction.added / reaction.failed
            provider.react(event.ack, reaction)


def bind_pull_request(registry: SessionRegistry, target: WorkItemRef, pull_request: str) -> bool:
    """Record ``pull_request`` on ``target``'s session record (X7, and ``sessions link-pr``); True when it is new.
    The entry is a binding (no tmux, no id); a pull request the work item's ``sessionPerPr`` gives a session of its
    own gets it from the first event that needs one (:mod:`the_loop.sessions.endpoints`), in this same entry. Nothing
    is written for a work item without a session of its own. Raises what the registry raises."""
    from the_loop.state.registry import Endpoint, SessionRecord, now_iso

    added = False

    def change(record: SessionRecord) -> None:
        nonlocal added
        if pull_request not in record.sessions and record.own is not None:
            record.sessions[pull_request] = Endpoint(harness=record.own.harness, created_at=now_iso())
            added = True

    if registry.load(str(target)) is not None:
        registry.update(str(target), change)
    return added


def _actor(event: InboundEvent) -> str:
    return event.actor.id if event.actor else ""


def _state_reason(event: InboundEvent) -> str:
    """How the tracker says an issue was closed (GitHub's ``state_reason``: completed, not_planned, duplicate),
    when the excerpt carries it; "" otherwise. It decides ``ended.outcome``, nothing else."""
    issue = event.excerpt.get("issue") if isinstance(event.excerpt, dict) else None
    reason = issue.get("state_reason") if isinstance(issue, dict) else None
    return reason[:32] if isinstance(reason, str) else ""


def _without_default_host(repository: str) -> str:
    """``[HOST/]OWNER/REPO`` compared case-insensitively, ``github.com/octo/repo`` the same as ``octo/repo``."""
    from the_loop.refs import DEFAULT_HOSTS

    parts = repository.casefold().split("/")
    if len(parts) == 3 and parts[0] in DEFAULT_HOSTS.values():
        parts = parts[1:]
    return "/".join(parts)
