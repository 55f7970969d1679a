"""Lifecycle points: the runner that asks each point's hooks, and what core does with their answers.

At seven points where a work item turns, core asks hooks before it acts. A hook sees a context of read-only facts
plus a few decision fields, and may change only the decisions: refuse (``proceed``/``reason``), reword
(``prompt``, ``text``, ``question``, ``summary``) or silence (``announce``, ``notify``).

Who is asked, in this order (:func:`run`):

1. plugins implementing ``loop_<point>`` — ``tryfirst`` ones, then the rest in registration order, then
   ``trylast`` ones;
2. the operator's ``hooks:`` entries from the config, in declaration order (:mod:`the_loop.hooks.executors`), so
   the operator has the last word.

Each hook is called on its own with a copy of the context carrying the decisions made so far. An answer is
``None`` (no opinion), a mapping of decision fields, a :class:`Decision`, or the context type itself; every field is
type-checked before any is applied, so a malformed answer changes nothing (``hooks.failed``). Empty strings mean
"unchanged". Once a hook refused, no later one can undo the refusal or reword its reason. A hook that raises or
answers badly is logged and skipped; a *required* one (a plugin with ``the_loop_required = True``, an entry with
``required: true``) refuses instead, at points that have ``proceed``. :func:`run` never raises.

The contexts themselves (:class:`WorkItemStart` … :class:`WorkItemComplete`, :class:`Decision`,
:class:`LifecycleHooks`) are plugin API in :mod:`the_loop.lifecycle` (docs/plugins/lifecycle.md); they are
re-exported here for hook modules that import them from this module. The ``work_item`` fact of a ref is built
here (:func:`work_item_facts`): it reads the records.

The durable "asked once per arming" mark for ``work_item_start`` (the portable ``lifecycle`` section) and the
refusal side effects (disarming, one explanation on the ticket) live here too, so every caller does the same.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

# The point contexts live in the root plugin API (the_loop.lifecycle); hook modules written against this module
# (``from the_loop.hooks.lifecycle import SessionSpawn``) keep working, so they are imported here by name.
from the_loop.hooks.chain import Hook, HookFailure
from the_loop.lifecycle import (
    CONTEXTS,
    POINTS,
    Decision,
    InputReceived,
    LifecycleContext,
    LifecycleHooks,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItemComplete,
    WorkItemFacts,
    WorkItemStart,
    known_facts,
)

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.models import WorkEvent
    from the_loop.plugins import PluginHost
    from the_loop.refs import WorkItemRef

C = TypeVar("C", bound=LifecycleContext)

__all__ = [
    "CONTEXTS",
    "POINTS",
    "Decision",
    "InputReceived",
    "LifecycleContext",
    "LifecycleHooks",
    "PhaseChanged",
    "SessionSpawn",
    "SessionSpawned",
    "WaitingForInput",
    "WorkItemComplete",
    "WorkItemFacts",
    "WorkItemStart",
    "ask_work_item_start",
    "clear_mark",
    "decide",
    "disarm",
    "explain_refusal",
    "input_received",
    "run",
    "session_spawn",
    "session_spawned",
    "work_item_facts",
]


def _slug(item: WorkItemRef, config: LoadedConfig) -> str:
    from the_loop.state.slugs import SlugCollision, slug_of

    try:
        return slug_of(config.state, item)
    except SlugCollision:
        return item.slug


def work_item_facts(ref: WorkItemRef | str, config: LoadedConfig, *, kind: str = "") -> WorkItemFacts:
    """The ``work_item`` fact for ``ref``; ``url`` from its ticket provider when one is installed."""
    from the_loop.refs import DEFAULT_HOSTS, parse_ref
    from the_loop.state.store import provider_url

    item = parse_ref(ref) if isinstance(ref, str) else ref
    host = item.host or DEFAULT_HOSTS.get(item.provider, "")
    # Key-form refs (Jira) are known by their key; the others by the slug, which names their files too.
    ident = f"{item.provider}-{item.owner}-{item.number}" if item.key_form else _slug(item, config)
    return WorkItemFacts(
        ref=str(item),
        provider=item.provider,
        host=host,
        owner=item.owner,
        repo=item.repo,
        repository=item.repository,
        number=item.number,
        kind=kind,
        url=provider_url(item, config) or "",
        id=ident,
    )


# -------------------------------------------------------------------------------------------------- answers


class AnswerError(HookFailure):
    """An answer that cannot be applied; the message names the field or the type."""


def answer_decisions(ctx: LifecycleContext, answer: object) -> dict[str, Any]:
    """The decision fields an answer sets, each type-checked, or :class:`AnswerError`. Keys that are not decisions
    of this point (facts, unknown names) are ignored: a hook can change only decisions."""
    if answer is None:
        return {}
    if isinstance(answer, LifecycleContext):
        if type(answer) is not type(ctx):
            raise AnswerError(f"answered a {type(answer).__name__} at {ctx.point} (expected {type(ctx).__name__})")
        fields: Mapping[Any, Any] = answer.decisions()
    elif isinstance(answer, Decision):
        fields = {k: v for k, v in dataclasses.asdict(answer).items() if v is not None}
    elif isinstance(answer, Mapping):
        fields = answer
    else:
        raise AnswerError(
            f"answered a {type(answer).__name__} (expected None, a mapping of decisions, a Decision "
            f"or a {type(ctx).__name__})"
        )
    defaults = type(ctx).decision_defaults()
    checked = {}
    for name, value in fields.items():
        if name not in defaults:
            continue
        if isinstance(defaults[name], bool) and not isinstance(value, bool):
            raise AnswerError(f"decision {name!r} must be a bool, not {type(value).__name__}")
        if isinstance(defaults[name], str) and not isinstance(value, str):
            raise AnswerError(f"decision {name!r} must be a string, not {type(value).__name__}")
        checked[name] = value
    return checked


def _applied(ctx: C, changes: Mapping[str, Any]) -> C:
    """``ctx`` with ``changes`` applied by the rules: a refusal sticks (its reason too), empty strings are no
    change."""
    refused = getattr(ctx, "proceed", True) is False
    update: dict[str, Any] = {}
    for name, value in changes.items():
        if name in ("proceed", "reason") and refused:
            continue
        if name == "proceed" and value is True:
            continue  # only a refusal is a decision; True is the default and cannot undo anything
        if isinstance(value, str) and not value:
            continue
        update[name] = value
    return dataclasses.replace(ctx, **update) if update else ctx


# --------------------------------------------------------------------------------------------------- runner


def _plugin_hooks(host: PluginHost, point: str) -> Iterator[Hook]:
    """Plugins' implementations of ``loop_<point>``, in the host's one order (tryfirst, registration, trylast)."""
    for impl in host.implementations(f"loop_{point}"):
        plugin = host.pm.get_plugin(impl.plugin_name)
        function, argnames = impl.function, impl.argnames
        yield Hook(
            impl.plugin_name,
            getattr(plugin, "the_loop_required", False) is True,
            lambda ctx, f=function, a=argnames: f(**dict.fromkeys(a, ctx)),
        )


def _chain(point: str, config: LoadedConfig) -> list[Hook]:
    from the_loop.hooks.executors import declared_hooks

    return [*_plugin_hooks(config.host, point), *declared_hooks(config, point)]


def run(ctx: C, config: LoadedConfig) -> C:
    """Ask every hook of ``ctx.point`` in order and return the context with their decisions applied.

    Never raises: a hook's failure is logged (``hooks.failed``) and, for a required hook at a point with
    ``proceed``, turned into a refusal. ``config`` supplies the plugins' hooks (its host) and the operator's.
    """
    from the_loop import events

    try:
        chain = _chain(ctx.point, config)
    except Exception as exc:  # a broken host or declaration must never take the caller down
        _failed(ctx, "(runner)", f"{type(exc).__name__}: {exc}", required=False)
        return ctx
    for hook in chain:
        try:
            answer = hook.call(copy.deepcopy(ctx))
            changes = answer_decisions(ctx, answer)
        except Exception as exc:
            error = str(exc) if isinstance(exc, HookFailure) else f"{type(exc).__name__}: {exc}"
            ctx = _failed(ctx, hook.name, error, required=hook.required)
            continue
        before = ctx
        ctx = _applied(ctx, changes)
        changed = [name for name in type(ctx).decision_defaults() if getattr(ctx, name) != getattr(before, name)]
        if changed:
            events.emit("hooks.decided", point=ctx.point, hook=hook.name, changed=changed, work_item=ctx.work_item.ref)
        if "proceed" in changed:
            _refused(ctx, hook.name)
    return ctx


def _failed(ctx: C, hook: str, error: str, *, required: bool) -> C:
    from the_loop import events

    events.emit(
        "hooks.failed",
        level="warning",
        point=ctx.point,
        hook=hook,
        error=error,
        required=required,
        work_item=ctx.work_item.ref,
    )
    if not required or getattr(ctx, "proceed", None) is not True:
        return ctx
    name = hook.removeprefix("hooks:")
    refused = dataclasses.replace(ctx, proceed=False, reason=f"required hook {name} failed: {error}")  # type: ignore[call-arg]
    events.emit("hooks.decided", point=ctx.point, hook=hook, changed=["proceed", "reason"], work_item=ctx.work_item.ref)
    _refused(refused, hook)
    return refused


def _refused(ctx: LifecycleContext, hook: str) -> None:
    from the_loop import events

    events.emit(
        "hooks.refused", point=ctx.point, hook=hook, work_item=ctx.work_item.ref, reason=getattr(ctx, "reason", "")
    )


# ------------------------------------------------------------------------------ contexts at the dispatcher

# Event kinds that carry a person's words; machine events (opened, labeled, CI …) are not input.
INPUT_KINDS = ("comment", "review", "review-comment", "reply", "text")


def endpoint_fact(endpoint_ref: str, work_item: str) -> dict[str, Any]:
    """The ``endpoint`` fact: which session of the work item (its own, or a pull request's)."""
    return {"ref": endpoint_ref, "kind": "work-item" if endpoint_ref == work_item else "pull-request"}


def input_received(config: LoadedConfig, event: WorkEvent, endpoint_ref: str) -> InputReceived:
    """The context for delivering ``event`` (a comment, a reply, an operator's ``sessions say``)."""
    return InputReceived(
        work_item=work_item_facts(event.work_item, config),
        kind="comment",
        actor=event.actor,
        source="verb" if event.source == "cli" else "comment",
        event=event.kind,
        endpoint=endpoint_fact(endpoint_ref, event.work_item),
        text=event.text,
    )


def session_spawn(
    config: LoadedConfig,
    event: WorkEvent,
    endpoint_ref: str,
    harness: str,
    cwd: str,
    prompt: str,
    *,
    respawn: bool = False,
) -> SessionSpawn:
    """The context before launching ``harness`` in ``cwd`` with ``prompt`` (a first spawn or a respawn)."""
    from the_loop.config import harness_args

    return SessionSpawn(
        work_item=work_item_facts(event.work_item, config),
        endpoint=endpoint_fact(endpoint_ref, event.work_item),
        harness=harness,
        cwd=cwd,
        harness_args=tuple(harness_args(config, harness)),
        respawn=respawn,
        prompt=prompt,
    )


def session_spawned(spawn: SessionSpawn, harness_session_id: str, tmux_target: str) -> SessionSpawned:
    """The context after the launch ``spawn`` described was registered."""
    return SessionSpawned(
        work_item=spawn.work_item,
        endpoint=dict(spawn.endpoint),
        harness=spawn.harness,
        harness_session_id=harness_session_id,
        tmux_target=tmux_target,
        cwd=spawn.cwd,
        model=spawn.model,
        effort=spawn.effort,
        harness_args=spawn.harness_args,
        respawn=spawn.respawn,
    )


def decide(
    point: str, work_item: str, facts: Mapping[str, Any] | None = None, config: LoadedConfig | None = None
) -> LifecycleContext:
    """Run ``point`` for ``work_item`` with the facts and decisions given in ``facts`` (keys the point does not have
    are ignored) and return the decided context. A convenience over :func:`run`; pass ``config`` so the operator's
    declared hooks are asked too."""
    cls = CONTEXTS[point]
    return run(cls(work_item=work_item_facts(work_item, config), **known_facts(cls, facts)), config)


# ------------------------------------------------------------------------------- arming mark and refusals


def ask_work_item_start(
    config: LoadedConfig, ref: WorkItemRef, *, actor: str = "", harness: str = "", loop: str = ""
) -> WorkItemStart | None:
    """Ask ``work_item_start`` at most once per arming: write the portable ``lifecycle`` mark only if absent, and
    ask only when this call wrote it (so a deferred spawn, in any process or after a restart, asks nothing
    twice). Returns the decided context, or None when this arming was already asked."""
    from the_loop.state.registry import now_iso

    store = config.store
    wrote: list[bool] = []

    def mark(current: Any) -> Any:
        if isinstance(current, dict) and current.get("startedAt"):
            return current
        wrote.append(True)
        return {"startedAt": now_iso()}

    record = store.update_section(ref, "lifecycle", mark) or {}
    if not wrote:
        return None
    control = record.get("control") if isinstance(record.get("control"), dict) else {}
    ctx = WorkItemStart(
        work_item=work_item_facts(ref, config),
        loop=loop,
        command=str(control.get("command") or ""),
        actor=str(control.get("actor") or actor),
        harness=harness,
        instance=str(control.get("instance") or ""),
    )
    return run(ctx, config)


def clear_mark(config: LoadedConfig, ref: WorkItemRef | str) -> None:
    """Forget that ``work_item_start`` was asked: the next arming asks again (stop, cleanup, reset, close)."""

    config.store.update_section(ref, "lifecycle", None)


def disarm(config: LoadedConfig, ref: WorkItemRef | str) -> None:
    """A refused start: clear ``control`` and ``lifecycle`` so nothing is armed and the next arming asks again."""

    config.store.clear_sections(ref, ("control", "lifecycle"))


def explain_refusal(config: LoadedConfig, ref: WorkItemRef, what: str, reason: str) -> bool:
    """R3 for a lifecycle hook's refusal: one marked ``⚠️`` reply on the work item saying ``what`` was refused and
    the hook's reason. Best-effort: False when it could not be posted."""
    from the_loop import control

    text = f"the-loop did not {what}: a lifecycle hook refused it."
    return control.explain_refusal(config, ref, "hook-refused", text, reason or "none given")
