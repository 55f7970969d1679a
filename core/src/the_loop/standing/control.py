"""Start, stop and talk to standing sessions: tmux probed first, the harness spawned through the work items'
launcher (same adapters, readiness and resume checks), the record written atomically after each step."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.standing import Definition, load_record, now, parse_ref, resolve, save_record
from the_loop.standing import inherit as inherit  # for the surfaces (toolkit.standing_sessions)
from the_loop.standing import valid_name as valid_name

if TYPE_CHECKING:
    from the_loop.channels.standing import Sink
    from the_loop.config import LoadedConfig
    from the_loop.sessions.tmux import TmuxRunner

SEPARATOR = "\n\n---- operator's brief ----\n\n"


def directive(name: str, slack_thread: bool = False) -> str:
    """The fixed, non-configurable head of every standing session's boot prompt."""
    where = [f"`the-loop standing say --text ... {name}` (or the API)", f"`tmux attach -t loop-standing-{name}`"]
    if slack_thread:
        where.append("its bound Slack thread")
    return (
        f"You are the standing session {name!r} of the-loop. You own no ticket, spec chain or pull request. "
        "Never answer phase gates, approve phases or post control keywords. Open no pull requests and push nothing "
        "unless your operator asks; reading is fine. Anything you post carries the-loop's self-marker. "
        f"Your operator speaks to you through: {', '.join(where)}."
    )


def boot_prompt(definition: Definition) -> str:
    """Directive, separator, then the operator's brief (appended, never substituted). Raises OSError for an
    unreadable ``promptFile``."""
    brief = definition.prompt
    if definition.prompt_file:
        brief = Path(definition.prompt_file).expanduser().read_text(encoding="utf-8")
    return directive(definition.name, definition.slack_enabled) + SEPARATOR + brief


def _row(name: str, outcome: str, detail: str = "") -> dict[str, Any]:
    return {"name": name, "outcome": outcome, "detail": detail}


def _failed(definition: Definition, detail: str) -> dict[str, Any]:
    events.emit(
        "standing.spawn_failed", level="error", standing=definition.name, tmux_target=definition.target, error=detail
    )
    return _row(definition.name, "failed", detail)


def start(config: LoadedConfig, runner: TmuxRunner, definition: Definition) -> dict[str, Any]:
    """Bring ``definition`` up (probe first; resume the recorded conversation when it can). One result row."""
    from the_loop.sessions.harness import adapter_for
    from the_loop.sessions.launch import Launcher, NotStarted
    from the_loop.state.registry import SessionRegistry

    name, target = definition.name, definition.target
    record = load_record(config, name)
    state = runner.probe(target)
    if state == "unknown":
        return _failed(definition, f"tmux did not answer for {target}; nothing spawned")
    if state == "live" and record is None:
        return _failed(
            definition,
            f"tmux session {target} is live but no record says it is {name}'s; inspect it with "
            f"`tmux attach -t {target}` and end it with `tmux kill-session -t {target}` if it is stale",
        )
    if state == "live" and record is not None:
        if record.get("status") != "running":
            save_record(config, {**record, "status": "running"})
        return _row(name, "already-running")
    if state == "dead":
        runner.kill(target)
    try:
        prompt = boot_prompt(definition)
    except OSError as exc:
        return _failed(definition, f"cannot read promptFile {definition.prompt_file}: {exc.strerror or exc}")
    cwd = Path(definition.cwd).expanduser()
    if not cwd.is_absolute():
        cwd = Path(config.ref.path).parent / cwd
    if not cwd.is_dir():
        return _failed(definition, f"cwd {cwd} does not exist")
    try:
        adapter = adapter_for(definition.harness, config)
    except Exception as exc:
        return _failed(definition, str(exc))
    launcher = Launcher(config, runner, SessionRegistry(config.state))
    work_item = f"standing:{name}"
    old_id = str((record or {}).get("harnessSessionId") or "")
    resumed = False
    if old_id:
        from the_loop.interfaces import Launch

        why = launcher.why_not_resume(adapter, Launch(prompt, old_id, cwd, definition.harness_args))
        if not why:
            outcome = launcher.launch(
                work_item, adapter, target, cwd, old_id, prompt, resume=True, args=definition.harness_args
            )
            if outcome is None:
                resumed = True
            else:
                reason = outcome.reason if isinstance(outcome, NotStarted) else outcome.remedy
                events.emit(
                    "standing.resume_failed", level="warning", standing=name, harness_session_id=old_id, error=reason
                )
                runner.kill(target)
    session_id = old_id if resumed else str(uuid.uuid4())
    if not resumed:
        outcome = launcher.launch(
            work_item, adapter, target, cwd, session_id, prompt, resume=False, args=definition.harness_args
        )
        if outcome is not None:
            detail = outcome.reason if isinstance(outcome, NotStarted) else outcome.remedy
            return _failed(definition, detail or "the harness did not start")
    stamp = now()
    previous = record or {}
    from the_loop.standing.thread import announce

    thread = announce(config, definition, previous)
    save_record(
        config,
        {
            "name": name,
            "harness": definition.harness,
            "harnessSessionId": session_id,
            "cwd": str(cwd),
            "tmuxTarget": target,
            "status": "running",
            "createdAt": previous.get("createdAt") or stamp,
            "startedAt": stamp,
            "lastMessageAt": previous.get("lastMessageAt"),
            "slackChannel": thread.get("slackChannel") or previous.get("slackChannel"),
            "slackThread": thread.get("slackThread") or previous.get("slackThread"),
            "description": definition.description,
            "harnessArgs": list(definition.harness_args),
            "prompt": definition.prompt,
            "autoStart": definition.auto_start,
            "slackEnabled": definition.slack_enabled,
        },
    )
    fields = {
        "standing": name,
        "harness": definition.harness,
        "harness_session_id": session_id,
        "tmux_target": target,
        "cwd": str(cwd),
    }
    if resumed:
        events.emit("standing.resumed", **fields)
        return _row(name, "resumed")
    events.emit("standing.started", **fields)
    return _row(name, "started")


def stop(config: LoadedConfig, runner: TmuxRunner, name: str) -> dict[str, Any]:
    """SIGTERM the harness (SIGKILL after the grace), then kill-session; the record stays, ``stopped``, with its
    conversation id so the next start resumes it."""
    from the_loop.standing import tmux_name

    target = tmux_name(name)
    record = load_record(config, name)
    if record is None:
        return _row(name, "not-running", "no record")
    state = runner.probe(target)
    if state == "absent":
        save_record(config, {**record, "status": "stopped"})
        return _row(name, "not-running")
    grace = config.core.routing.tmux.harness_kill_grace_seconds
    ended = runner.terminate_harness(target, grace_seconds=grace)
    if not ended.ok or not runner.kill(target):
        detail = ended.error or f"tmux session {target} could not be killed"
        events.emit("standing.stop_failed", level="error", standing=name, tmux_target=target, error=detail)
        return _row(name, "failed", detail)
    save_record(config, {**record, "status": "stopped"})
    events.emit("standing.stopped", standing=name, tmux_target=target)
    return _row(name, "stopped")


def say(config: LoadedConfig, runner: TmuxRunner, name: str, text: str, actor: str) -> dict[str, Any]:
    """Paste ``text`` (framed with the session's name and the claimed actor) into the live pane; never spawns."""
    from the_loop.sessions.tmux import TmuxError
    from the_loop.standing import tmux_name

    target = tmux_name(name)
    refusal = f"standing session {name} is not running; start it with: the-loop standing start {name}"
    record = load_record(config, name)
    if record is None or record.get("status") != "running" or runner.probe(target) != "live":
        return _row(name, "failed", refusal)
    framed = f"[standing:{name}] message from {actor or 'operator'}:\n{text}"
    try:
        runner.deliver(target, framed)
    except TmuxError as exc:
        return _row(name, "failed", f"{exc}; {refusal}")
    save_record(config, {**record, "lastMessageAt": now()})
    events.emit("standing.said", standing=name, tmux_target=target, actor=actor)
    return _row(name, "said")


def resolved(config: LoadedConfig, name: str) -> Definition | None:
    return resolve(config, name)


def start_auto(config: LoadedConfig) -> list[dict[str, Any]]:
    """What ``the-loop start`` does after the services: start every ``autoStart`` session, declared or created."""
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing import all_names

    wanted = [d for name in all_names(config) if (d := resolve(config, name)) is not None and d.auto_start]
    if not wanted:
        return []  # tmux is not asked when there is nothing to start
    runner = runner_for(config)
    return [start(config, runner, definition) for definition in wanted]


def stop_recorded(config: LoadedConfig) -> list[dict[str, Any]]:
    """What ``the-loop stop`` does after the services: stop every recorded session that tmux still holds."""
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing import recorded_names

    names = recorded_names(config)
    if not names:
        return []
    runner = runner_for(config)
    return [stop(config, runner, name) for name in names]


def sink(config: LoadedConfig) -> Sink:
    """What a channel reader hands a standing thread's message to: ``say`` into the session, never a spawn."""

    def deliver(owner: str, text: str, actor: str) -> str:
        name = parse_ref(owner)
        if name is None:
            return f"{owner} is not a standing session"
        try:
            row = say_to(config, name, text, actor)
        except LookupError as exc:  # a thread bound to a session since taken out of the config
            return str(exc)
        return "" if row["outcome"] == "said" else str(row["detail"])

    return deliver


ACTIONS = ("start", "stop", "restart")


def act(config: LoadedConfig, name: str, action: str) -> list[dict[str, Any]]:
    """``start``, ``stop`` or ``restart`` one session by name, as every surface does it (CLI, API): its rows, the
    stop's first for a restart (a restart whose stop failed starts nothing). Raises LookupError for an unknown
    name (a stop needs only a record)."""
    from the_loop.sessions.tmux import runner_for

    definition = resolve(config, name)
    if definition is None and (action != "stop" or load_record(config, name) is None):
        raise LookupError(f"no standing session named {name} (declare it under standingSessions.sessions)")
    runner = runner_for(config)
    if action == "start":
        return [start(config, runner, definition)]  # type: ignore[arg-type]
    stopped = stop(config, runner, name)
    if action == "stop" or stopped["outcome"] not in ("stopped", "not-running"):
        return [stopped]
    return [stopped, start(config, runner, definition)]  # type: ignore[arg-type]


def say_to(config: LoadedConfig, name: str, text: str, actor: str) -> dict[str, Any]:
    """:func:`say` on this config's tmux server (a channel thread, the API). Raises LookupError for a name no
    config or record knows."""
    from the_loop.sessions.tmux import runner_for

    if resolve(config, name) is None:
        raise LookupError(f"no standing session named {name} (declare it under standingSessions.sessions)")
    return say(config, runner_for(config), name, text, actor)


def listing(config: LoadedConfig) -> list[dict[str, Any]]:
    """Every declared and recorded session's row, with tmux's answer (``standing list``, the API)."""
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing.rows import rows

    return rows(config, runner_for(config))


def create(config: LoadedConfig, definition: Definition, *, start_now: bool = True) -> list[dict[str, Any]]:
    """Record a session made at run time (S10): its whole definition, ``stopped``; then start it unless told not
    to. A start that fails removes the record again, so nothing half-made remains. Raises ValueError for a name
    that is declared or already recorded."""
    from the_loop.standing import declared, record_path

    name = definition.name
    if any(d.name == name for d in declared(config)):
        raise ValueError(f"{name} is declared under standingSessions.sessions: change it there")
    if load_record(config, name) is not None:
        raise ValueError(f"a standing session named {name} already exists (standing delete {name} first)")
    stamp = now()
    save_record(
        config,
        {
            "name": name,
            "harness": definition.harness,
            "harnessSessionId": None,
            "cwd": definition.cwd,
            "tmuxTarget": definition.target,
            "status": "stopped",
            "createdAt": stamp,
            "startedAt": None,
            "lastMessageAt": None,
            "slackChannel": definition.slack_channel or None,
            "slackThread": None,
            "description": definition.description,
            "harnessArgs": list(definition.harness_args),
            "prompt": definition.prompt,
            "autoStart": definition.auto_start,
            "slackEnabled": definition.slack_enabled,
        },
    )
    fields = {"standing": name, "harness": definition.harness, "cwd": definition.cwd}
    events.emit("standing.created", **fields, auto_start=definition.auto_start)
    created = _row(name, "created")
    if not start_now:
        return [created]
    from the_loop.sessions.tmux import runner_for

    started = start(config, runner_for(config), definition)
    if started["outcome"] == "failed":
        record_path(config, name).unlink(missing_ok=True)
        events.emit("standing.create_failed", level="error", **fields, error=started["detail"])
    return [created, started]


def delete(config: LoadedConfig, name: str) -> list[dict[str, Any]]:
    """Stop a created session, then remove its record (S11). Raises ValueError for a declared name and
    LookupError for one nobody recorded."""
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing import declared, record_path

    if any(d.name == name for d in declared(config)):
        raise ValueError(f"{name} is declared under standingSessions.sessions: remove it there")
    if load_record(config, name) is None:
        raise LookupError(f"no standing session named {name}")
    stopped = stop(config, runner_for(config), name)
    if stopped["outcome"] not in ("stopped", "not-running"):
        return [stopped]
    record_path(config, name).unlink(missing_ok=True)
    events.emit("standing.deleted", standing=name)
    return [stopped, {**_row(name, "deleted"), "status": "absent"}]
