"""The lifecycle points and their contexts: the typed facts and decisions each point's hooks receive.

One frozen dataclass per point (:data:`CONTEXTS`), the ``work_item`` fact they all carry (:class:`WorkItemFacts`),
the :class:`Decision` a hook may answer with and the :class:`LifecycleHooks` base class an operator's hooks extend.
A context also travels as JSON params, to and from a remote hook (:meth:`LifecycleContext.to_params`,
:meth:`LifecycleContext.from_params`).

This is plugin API, as public as :mod:`the_loop.hookspecs`: a plugin or an operator's hook module imports its
contexts from here (``from the_loop.lifecycle import LifecycleHooks, SessionSpawn``). It imports only the standard
library, so a side-car hook server needs no daemon. Running the points is core's (:mod:`the_loop.hooks.lifecycle`,
which still re-exports these names for hook modules written against it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

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
    "known_facts",
]

POINTS = (
    "work_item_start",
    "session_spawn",
    "session_spawned",
    "waiting_for_input",
    "input_received",
    "phase_changed",
    "work_item_complete",
)

C = TypeVar("C", bound="LifecycleContext")


@dataclass(frozen=True, kw_only=True)
class WorkItemFacts:
    """Which work item: the ref and its parts, as every context carries them (fact ``work_item``)."""

    ref: str = ""
    provider: str = ""
    host: str = ""
    owner: str = ""
    repo: str = ""
    repository: str = ""
    number: int = 0
    kind: str = ""  # issue | pull-request | "" (not known from the ref alone)
    url: str = ""
    id: str = ""


def _decision(default: bool | str) -> Any:
    """A decision field: a hook may change it. Every other field of a context is a read-only fact."""
    return field(default=default, metadata={"decision": True})


@dataclass(frozen=True, kw_only=True)
class LifecycleContext:
    """What every point's context shares. Subclasses add their facts and decisions (see :data:`CONTEXTS`)."""

    point: ClassVar[str] = ""
    fires: ClassVar[str] = ""  # when the point fires
    effect: ClassVar[str] = ""  # what its decisions do

    work_item: WorkItemFacts = field(default_factory=WorkItemFacts)

    @classmethod
    def fact_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("decision"))

    @classmethod
    def decision_defaults(cls) -> dict[str, bool | str]:
        return {f.name: f.default for f in dataclasses.fields(cls) if f.metadata.get("decision")}  # type: ignore[misc]

    def decisions(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.decision_defaults()}

    def to_params(self) -> dict[str, Any]:
        """The context as JSON-ready params (what a remote hook receives): facts and the decisions so far."""
        params = dataclasses.asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value for key, value in params.items()}

    @classmethod
    def from_params(cls: type[C], params: Mapping[str, Any]) -> C:
        """Rebuild a context from params (a hook server's side). Unknown keys are ignored; a known key of the
        wrong type raises :class:`TypeError` naming it."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in params:
                continue
            value = params[f.name]
            if f.name == "work_item":
                if not isinstance(value, Mapping):
                    raise TypeError("work_item must be an object")
                values[f.name] = _work_item_from(value)
                continue
            values[f.name] = _checked(f.name, value, _default(f))
        return cls(**values)


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def _work_item_from(value: Mapping[str, Any]) -> WorkItemFacts:
    known = {f.name: f.default for f in dataclasses.fields(WorkItemFacts)}
    return WorkItemFacts(**{k: _checked(f"work_item.{k}", v, known[k]) for k, v in value.items() if k in known})


def _checked(name: str, value: Any, default: Any) -> Any:
    """``value`` if it has the type of ``default`` (bool ≠ int; a tuple default takes a list of strings)."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, tuple):
        ok = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
        value = tuple(value) if ok else value
    elif isinstance(default, dict):
        ok = isinstance(value, Mapping)
        value = dict(value) if ok else value
    else:
        ok = True
    if not ok:
        raise TypeError(f"{name} must be {_type_name(default)}, not {type(value).__name__}")
    return value


def _type_name(default: Any) -> str:
    if isinstance(default, tuple):
        return "a list of strings"
    if isinstance(default, dict):
        return "an object"
    return {bool: "a bool", int: "an int", str: "a string"}.get(type(default), type(default).__name__)


@dataclass(frozen=True, kw_only=True)
class WorkItemStart(LifecycleContext):
    point = "work_item_start"
    fires = "once per arming, before the conversation is opened, the checkout made or a session spawned"
    effect = "may refuse the work item: it is disarmed and the reason posted once on the ticket"

    loop: str = ""
    command: str = ""
    actor: str = ""
    harness: str = ""
    instance: str = ""
    proceed: bool = _decision(True)
    reason: str = _decision("")


@dataclass(frozen=True, kw_only=True)
class SessionSpawn(LifecycleContext):
    point = "session_spawn"
    fires = "before every launch of a harness: a first spawn and every respawn"
    effect = "may refuse the launch, or replace the boot prompt"

    endpoint: dict[str, Any] = field(default_factory=dict)
    harness: str = ""
    cwd: str = ""
    model: str = ""
    effort: str = ""
    harness_args: tuple[str, ...] = ()
    respawn: bool = False
    loop: str = ""
    prompt: str = _decision("")
    proceed: bool = _decision(True)
    reason: str = _decision("")


@dataclass(frozen=True, kw_only=True)
class SessionSpawned(LifecycleContext):
    point = "session_spawned"
    fires = "after a launched session is registered, before the attach comment"
    effect = "may skip the attach comment"

    endpoint: dict[str, Any] = field(default_factory=dict)
    harness: str = ""
    harness_session_id: str = ""
    tmux_target: str = ""
    cwd: str = ""
    model: str = ""
    effort: str = ""
    harness_args: tuple[str, ...] = ()
    respawn: bool = False
    announce: bool = _decision(True)


@dataclass(frozen=True, kw_only=True)
class WaitingForInput(LifecycleContext):
    point = "waiting_for_input"
    fires = "when the agent asks a question (the-loop ask), before it is published"
    effect = "may reword the question and its summary (ignored for gates)"

    kind: str = ""  # question | gate
    node: str = ""
    actor: str = ""
    loop: str = ""
    question: str = _decision("")
    summary: str = _decision("")


@dataclass(frozen=True, kw_only=True)
class InputReceived(LifecycleContext):
    point = "input_received"
    fires = "before a comment, answer or command is delivered into a session or acted on"
    effect = "may reword the text, or refuse the input"

    kind: str = ""  # answer | comment | command
    actor: str = ""
    source: str = ""  # comment | verb
    command: str = ""
    event: str = ""
    endpoint: dict[str, Any] = field(default_factory=dict)
    loop: str = ""
    text: str = _decision("")
    proceed: bool = _decision(True)
    reason: str = _decision("")


@dataclass(frozen=True, kw_only=True)
class PhaseChanged(LifecycleContext):
    point = "phase_changed"
    fires = "before phase.* is published (once a process graph exists)"
    effect = "may skip the phase notification"

    loop: str = ""
    from_node: str = ""
    to_node: str = ""
    from_phase: str = ""
    to_phase: str = ""
    outcome: str = ""
    actor: str = ""  # agent | human
    terminal: bool = False
    notify: bool = _decision(True)


@dataclass(frozen=True, kw_only=True)
class WorkItemComplete(LifecycleContext):
    point = "work_item_complete"
    fires = "when the work item closes, before anything is cleared and before work-item.closed is published"
    effect = "may skip the work-item.closed publish (the ended stamp is still written)"

    state: str = ""  # merged | closed
    kind: str = ""
    reason: str = ""
    source: str = ""  # webhook | poll
    actor: str = ""
    loop: str = ""
    announce: bool = _decision(True)


CONTEXTS: dict[str, type[LifecycleContext]] = {
    cls.point: cls
    for cls in (
        WorkItemStart,
        SessionSpawn,
        SessionSpawned,
        WaitingForInput,
        InputReceived,
        PhaseChanged,
        WorkItemComplete,
    )
}


@dataclass(frozen=True)
class Decision:
    """A hook's answer as an object. ``None`` fields mean "no opinion"; fields a point does not have are ignored."""

    proceed: bool | None = None
    reason: str | None = None
    prompt: str | None = None
    text: str | None = None
    announce: bool | None = None
    notify: bool | None = None
    question: str | None = None
    summary: str | None = None


class LifecycleHooks:
    """Base class for the operator's hooks (``hooks:`` entries with ``module`` or ``path``, or behind a
    :class:`~the_loop.hooks.sdk.HookServer`). Override the points you handle; the others are never called for a
    local entry. Each method gets the point's context and returns ``None``, a mapping of decisions, a
    :class:`Decision` or the context itself (``dataclasses.replace(ctx, prompt=…)``)."""

    def work_item_start(self, ctx: WorkItemStart) -> object:
        return None

    def session_spawn(self, ctx: SessionSpawn) -> object:
        return None

    def session_spawned(self, ctx: SessionSpawned) -> object:
        return None

    def waiting_for_input(self, ctx: WaitingForInput) -> object:
        return None

    def input_received(self, ctx: InputReceived) -> object:
        return None

    def phase_changed(self, ctx: PhaseChanged) -> object:
        return None

    def work_item_complete(self, ctx: WorkItemComplete) -> object:
        return None

    @classmethod
    def handled_points(cls) -> tuple[str, ...]:
        """The points this class overrides."""
        return tuple(point for point in POINTS if getattr(cls, point) is not getattr(LifecycleHooks, point))


def known_facts(cls: type[LifecycleContext], facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """The entries of ``facts`` that are fields of ``cls`` (other than ``work_item``) with a value of the field's
    type; the others are left out, so the context keeps its defaults for them."""
    known = {f.name: _default(f) for f in dataclasses.fields(cls) if f.name != "work_item"}
    values = {}
    for name, value in (facts or {}).items():
        if name in known:
            with contextlib.suppress(TypeError):  # a value of the wrong type is left at its default
                values[name] = _checked(name, value, known[name])
    return values
