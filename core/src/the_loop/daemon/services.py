"""The supervisor behind ``start``, ``stop``, ``status`` and ``restart``.

It works over the :class:`~the_loop.interfaces.ServiceSpec` list (core's receiver and poller plus whatever plugins
add) and each service's pidfile lock (:mod:`the_loop.state.runlock`). Liveness and pids come only from the lock, never
from ``kill -0``, so a stale pidfile or a reused pid cannot fool it, and a pid ≤ 0 is never signalled.

``start`` spawns ``python -m the_loop daemon run <service>`` detached and reports ``started`` only once the new
process holds its lock. ``status`` is read-only: it writes nothing and starts nothing, and it must stay fast, so
this module imports nothing heavy (``subprocess`` only when it spawns).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import __version__, events
from the_loop.state import runlock

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import ServiceSpec
    from the_loop.state import StateLayout

START_TIMEOUT_ENV = "THE_LOOP_START_TIMEOUT"
STOP_TIMEOUT_ENV = "THE_LOOP_STOP_TIMEOUT"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 30.0
PID_SETTLE_SECONDS = 1.0  # a holder truncates, then writes its pid: give that write a moment
POLLER = "poller"
NAME_WIDTH = 11
INDENT = " " * (NAME_WIDTH + 1)


class UnknownService(Exception):
    """A service name on the command line that no installed plugin provides."""


@dataclass
class Row:
    """One service's outcome, printed as ``<name padded> <outcome> <detail>`` plus indented notes."""

    service: str
    outcome: str  # started|already-running|disabled|misconfigured|failed|stopped|not-running
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        text = f"{self.outcome} {self.detail}".rstrip()
        return [f"{self.service:<{NAME_WIDTH}} {text}", *(INDENT + note for note in self.notes)]


def start_ok(rows: Iterable[Row]) -> bool:
    return all(row.outcome not in ("failed", "misconfigured") for row in rows)


def stop_ok(rows: Iterable[Row]) -> bool:
    return all(row.outcome in ("stopped", "not-running") for row in rows)


def select(specs: list[ServiceSpec], names: Iterable[str]) -> list[ServiceSpec]:
    """The named services (all of them when none is named), in their declared order."""
    wanted = list(names)
    if not wanted:
        return specs
    known = [spec.name for spec in specs]
    for name in wanted:
        if name not in known:
            raise UnknownService(f"unknown service {name!r} (known: {', '.join(known) or 'none'})")
    return [spec for spec in specs if spec.name in wanted]


# ----------------------------------------------------------------------------------------------- helpers


def timeout_from_env(variable: str, default: float) -> float:
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        print(f"warning: {variable}={value!r} is not a positive number of seconds; using {default:g}", file=sys.stderr)
        return default
    return seconds


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def settled_pid(pidfile: Path) -> int:
    """The lock holder's pid, re-read briefly while it is 0 (the holder may be between truncate and write)."""
    pid = runlock.holder(pidfile)
    deadline = time.monotonic() + PID_SETTLE_SECONDS
    while pid <= 0 and time.monotonic() < deadline and runlock.is_held(pidfile):
        time.sleep(0.05)
        pid = runlock.holder(pidfile)
    return pid


def pid_text(pid: int | None) -> str:
    return f"pid {pid}" if pid and pid > 0 else "pid unknown"


def _last_line(path: Path, since: int) -> str:
    """The last non-empty line written to ``path`` after byte offset ``since`` ("" when none)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(since, 0))
            tail = handle.read()[-4096:]
    except OSError:
        return ""
    lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


# -------------------------------------------------------------------------------------------------- start


def start_services(config: LoadedConfig, specs: list[ServiceSpec]) -> Iterator[Row]:
    """Start each enabled service that is not already running; yield one row per service as it settles."""
    timeout = timeout_from_env(START_TIMEOUT_ENV, START_TIMEOUT)
    for spec in specs:
        yield start_one(config, spec, timeout)


def start_one(config: LoadedConfig, spec: ServiceSpec, timeout: float) -> Row:
    import subprocess

    if not spec.enabled:
        return Row(spec.name, "disabled")
    if runlock.is_held(spec.pidfile):
        return Row(spec.name, "already-running", f"({pid_text(settled_pid(spec.pidfile))})")
    if spec.problems:
        return Row(spec.name, "misconfigured", notes=list(spec.problems))

    # The logfile is opened before the spawn so a daemon that dies at once still leaves its reason somewhere.
    try:
        spec.logfile.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(spec.logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        return Row(spec.name, "failed", f"— cannot write {spec.logfile}: {exc.strerror or exc}")
    log_start = os.fstat(log_fd).st_size
    env = {**os.environ, "THE_LOOP_CLI_CONFIG": str(config.ref.path.absolute())}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "the_loop", "daemon", "run", spec.name],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return Row(spec.name, "failed", f"— cannot run {sys.executable}: {exc.strerror or exc}")
    finally:
        os.close(log_fd)

    # Honest start: the daemon validates before it locks, so a held lock means it really came up.
    def settled() -> bool:
        return runlock.is_held(spec.pidfile) or process.poll() is not None

    wait_until(settled, timeout)
    if runlock.is_held(spec.pidfile) and spec.url and spec.health:
        # A served service counts once its health route answers: it holds its lock before it listens.
        def answering() -> bool:
            return probe_health(spec.url + spec.health) == "ok" or process.poll() is not None

        if not wait_until(answering, timeout, interval=0.1):
            detail = (
                f"— pid {process.pid} holds its lock but {spec.url}{spec.health} did not answer within {timeout:g}s"
            )
            return Row(spec.name, "failed", detail, [f"see {spec.logfile}"])
    if runlock.is_held(spec.pidfile) and process.poll() is None:
        pid = settled_pid(spec.pidfile)
        events.emit("service.started", service=spec.name, daemon_pid=pid)
        return Row(spec.name, "started", f"({pid_text(pid)})")
    last = _last_line(spec.logfile, log_start)
    notes = [last] if last else []
    if process.poll() is None:
        detail = f"— pid {process.pid} did not take its lock within {timeout:g}s; see {spec.logfile}"
        return Row(spec.name, "failed", detail, notes)
    return Row(spec.name, "failed", f"— see {spec.logfile}", notes)


# --------------------------------------------------------------------------------------------------- stop


def stop_services(specs: list[ServiceSpec]) -> Iterator[Row]:
    """Stop every running service, enabled or not; yield one row per service as it settles."""
    timeout = timeout_from_env(STOP_TIMEOUT_ENV, STOP_TIMEOUT)
    for spec in specs:
        yield stop_one(spec, timeout)


def stop_one(spec: ServiceSpec, timeout: float) -> Row:
    pidfile = spec.pidfile
    if not runlock.is_held(pidfile):
        try:
            stale = runlock.remove_stale(pidfile)
        except OSError as exc:
            return Row(spec.name, "failed", f"(cannot remove stale pidfile {pidfile}: {exc.strerror or exc})")
        if stale is None:
            return Row(spec.name, "not-running")
        return Row(spec.name, "not-running", f"(removed stale pidfile {pidfile}, {pid_text(stale)})")

    pid = settled_pid(pidfile)
    if pid <= 0:
        if not runlock.is_held(pidfile):
            return Row(spec.name, "not-running")
        # Never signal pid 0 or below: that would hit our own process group (or every process).
        return Row(spec.name, "failed", f"(pid unknown: {pidfile} is locked but names no pid; not signalled)")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it exited between our look and the signal; the lock clears on its own
    except PermissionError:
        return Row(spec.name, "failed", f"(not permitted to signal pid {pid})")
    if wait_until(lambda: not runlock.is_held(pidfile), timeout):
        events.emit("service.stopped", service=spec.name, daemon_pid=pid)
        return Row(spec.name, "stopped", f"(pid {pid})")
    return Row(spec.name, "failed", f"(pid {pid} did not exit within {timeout:g}s)")


# ------------------------------------------------------------------------------------------------- status


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """The poller heartbeat, or None when absent or corrupt (a corrupt one reads as none)."""
    from the_loop.state import read_json

    return read_json(path)


def _mtime_instant(path: Path) -> str | None:
    try:
        return events.timestamp(path.stat().st_mtime)
    except OSError:
        return None


@dataclass(frozen=True)
class StatusInputs:
    """What ``status`` reads of the config and the plugins: where the config and the state are, the config's
    warnings and each service's declaration. Apart from the services' problems (which come from the environment too)
    these are facts of the config file and the installed code, so ``status`` keeps them between runs
    (:mod:`the_loop.cli.status`)."""

    config_path: Path
    state: StateLayout
    specs: list[ServiceSpec]
    web_terminal: bool  # routing.webTerminal.enabled
    warnings: list[str] = field(default_factory=list)
    standing: list[str] = field(default_factory=list)  # the standing sessions `the-loop start` brings up
    tmux_socket: str = ""  # routing.tmux.socketName: where they run

    @classmethod
    def of(cls, config: LoadedConfig) -> StatusInputs:
        standing = config.core.standing_sessions
        return cls(
            config_path=config.ref.path,
            state=config.state,
            specs=config.host.services(config),
            web_terminal=config.core.routing.web_terminal.enabled,
            warnings=list(config.warnings),
            standing=[s.name for s in standing.sessions if s.auto_start] if standing.enabled else [],
            tmux_socket=config.core.routing.tmux.socket_name,
        )


def status_report(inputs: StatusInputs) -> dict[str, Any]:
    """Every fact ``status`` shows (and ``status --format json`` prints), read without writing anything. A service's
    problems are shown only while it is enabled and not running: a running one got past them when it started, in
    an environment that may differ from this one."""
    heartbeat = read_heartbeat(inputs.state.poll_status_path)
    rows = []
    for spec in inputs.specs:
        running = runlock.is_held(spec.pidfile)
        row: dict[str, Any] = {
            "service": spec.name,
            "enabled": spec.enabled,
            "running": running,
            "pid": (runlock.holder(spec.pidfile) or None) if running else None,
            "pidfile": str(spec.pidfile),
            "logfile": str(spec.logfile),
            "problems": list(spec.problems) if spec.enabled and not running else [],
            "startedAt": _mtime_instant(spec.pidfile) if running else None,
            "lastCycleAt": None,
            "lastCycle": None,
            "intervalSeconds": None,
            "url": spec.url or None,
            "health": probe_health(spec.url + spec.health) if running and spec.url and spec.health else None,
        }
        if spec.name == POLLER and heartbeat is not None:
            row["startedAt"] = heartbeat.get("startedAt")
            row["lastCycleAt"] = heartbeat.get("lastCycleAt")
            row["lastCycle"] = heartbeat.get("lastCycle")
            row["intervalSeconds"] = heartbeat.get("intervalSeconds")
        rows.append(row)
    standing = _standing(inputs)
    return {
        "version": __version__,
        "configPath": str(inputs.config_path),
        "stateRoot": str(inputs.state.root),
        "services": rows,
        "standingSessions": standing,
        "ok": all(row["running"] for row in rows if row["enabled"]) and not (standing or {}).get("notRunning"),
        "conflictingRoots": conflicting_roots(inputs.state.root),
        "channelBacklog": _channel_backlog(inputs.state),
        "webTerminal": _web_terminal(inputs),
    }


def _standing(inputs: StatusInputs) -> dict[str, Any] | None:
    """The auto-start standing sessions, running or not (tmux's answer, one call; tmux silent counts as not
    running); None when none is declared."""
    if not inputs.standing:
        return None
    from the_loop.sessions.tmux import TmuxRunner
    from the_loop.standing import tmux_name

    live = TmuxRunner(socket=inputs.tmux_socket or None).probe_all() or {}
    down = [name for name in inputs.standing if live.get(tmux_name(name)) != "live"]
    return {"declared": len(inputs.standing), "running": len(inputs.standing) - len(down), "notRunning": down}


def probe_health(url: str, timeout: float = 0.5) -> str:
    """``ok``, ``status <n>`` or ``unreachable``: one GET of a served service's health route. Its own certificate
    is not checked (often self-signed): the answer carries nothing but the status."""
    import http.client
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"  # a wildcard bind answers on loopback
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return "unreachable"
    finally:
        connection.close()
    return "ok" if status == 200 else f"status {status}"


def _web_terminal(inputs: StatusInputs) -> dict[str, str] | None:
    """The running web terminal's URL and login link (asked of its gate; the operator's alone), or None."""
    if not inputs.web_terminal:
        return None
    from the_loop.daemon.webterminal import login

    return login(inputs.state)


def conflicting_roots(root: Path) -> list[dict[str, Any]]:
    """The usual other roots (``./.the-loop``, ``~/.the-loop``) that hold a poller heartbeat although this config
    uses ``root``: a poller started under another config or cwd writes there (issue-339). Enrichment only."""
    found = []
    try:
        candidates = [Path.cwd() / ".the-loop", Path.home() / ".the-loop"]
    except (OSError, RuntimeError):  # a removed cwd, no resolvable home: nothing to compare
        return found
    for candidate in dict.fromkeys(candidates):
        heartbeat = candidate / "poll-status.json"
        try:
            if candidate.resolve() == root.resolve() or not heartbeat.is_file():
                continue
        except OSError:
            continue
        beat = read_heartbeat(heartbeat) or {}
        found.append({"root": str(candidate), "lastCycleAt": beat.get("lastCycleAt")})
    return found


def _channel_backlog(state: StateLayout) -> dict[str, Any] | None:
    """The undelivered channel queue while it holds anything (never changes the exit code)."""
    if not state.undelivered_path.exists():
        return None  # the usual case, told without importing the channels
    from the_loop.channels import outbox as channel_outbox

    try:
        return channel_outbox.backlog(state)
    except Exception:  # status is read-only and must not fail on a broken queue file
        return None


def format_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _when(instant: Any, now: float, suffix: str = "") -> str:
    parsed = events.parse_instant(str(instant)) if instant else None
    if parsed is None:
        return f"{instant} (unknown age{suffix})"
    return f"{instant} ({format_age(now - parsed)} ago{suffix})"


def _count(cycle: dict[str, Any], key: str) -> int:
    value = cycle.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def cycle_summary(cycle: dict[str, Any]) -> str:
    parts = [
        f"{_count(cycle, 'itemsSeen')} item(s)",
        f"{_count(cycle, 'spawns')} spawn(s)",
        f"{_count(cycle, 'commentsForwarded')} comment(s) forwarded",
    ]
    for key, label in (("closures", "closed"), ("failures", "gave up"), ("errors", "error(s)")):
        if _count(cycle, key):
            parts.append(f"{_count(cycle, key)} {label}")
    if cycle.get("interrupted"):
        parts.append("interrupted")
    return ", ".join(parts)


def heartbeat_lines(row: dict[str, Any], now: float | None = None) -> list[str]:
    """The poller's indented heartbeat lines: started, last cycle, one ``degraded`` line per failed scope."""
    now = time.time() if now is None else now
    if row["startedAt"] is None and row["lastCycleAt"] is None:
        return [INDENT + "last cycle: unknown — no heartbeat recorded"]
    lines = []
    if row["startedAt"]:
        lines.append(INDENT + f"started:    {_when(row['startedAt'], now)}")
    cycle = row["lastCycle"] if isinstance(row["lastCycle"], dict) else None
    if not row["lastCycleAt"] or cycle is None:
        return [*lines, INDENT + "last cycle: none recorded yet"]
    suffix = "" if row["running"] else ", before it stopped"
    lines.append(INDENT + f"last cycle: {_when(row['lastCycleAt'], now, suffix)} — {cycle_summary(cycle)}")
    failed = cycle.get("scopesFailed")
    for scope in failed if isinstance(failed, list) else []:
        if isinstance(scope, dict):
            lines.append(INDENT + f"degraded:   {scope.get('scope', '?')} — {scope.get('error', '?')}")
    skipped = cycle.get("scopesSkipped")
    for scope in skipped if isinstance(skipped, list) else []:
        lines.append(INDENT + f"degraded:   {scope} — skipped (a standing permanent failure; re-probed later)")
    if "scopesPolled" in cycle and _count(cycle, "scopesPolled") == 0:
        lines.append(INDENT + "degraded:   no repository was polled")
    return lines


def service_state(row: dict[str, Any]) -> str:
    if row["running"]:
        running = f"running ({pid_text(row['pid'])})"
        if row["enabled"]:
            return f"{running} [enabled]"
        return f"{running} [disabled in config — still running; the-loop stop ends it]"
    return "not running [enabled]" if row["enabled"] else "not running [disabled]"


def format_status(report: dict[str, Any], config_found: bool) -> list[str]:
    """``status`` as text: provenance first, then one row per service with its problems and heartbeat."""
    found = "" if config_found else " (not found — defaults)"
    lines = [
        f"{'version':<{NAME_WIDTH}} {report['version']}",
        f"{'config':<{NAME_WIDTH}} {report['configPath']}{found}",
        f"{'state':<{NAME_WIDTH}} {report['stateRoot']}",
    ]
    for other in report["conflictingRoots"]:
        seen = f"last cycle {other['lastCycleAt']}" if other["lastCycleAt"] else "no cycle recorded"
        lines.append(
            f"{'conflict':<{NAME_WIDTH}} {other['root']} also holds a poller heartbeat ({seen}); "
            "a poller started with another config writes there"
        )
    for row in report["services"]:
        lines.append(f"{row['service']:<{NAME_WIDTH}} {service_state(row)}")
        if row.get("url") and row["running"]:
            lines.append(INDENT + f"url:        {row['url']} (health: {row['health'] or 'unknown'})")
        lines.extend(INDENT + f"problem:    {problem}" for problem in row["problems"])
        if row["service"] == POLLER:
            lines.extend(heartbeat_lines(row))
    standing = report.get("standingSessions")
    if standing:
        down = f" — not running: {', '.join(standing['notRunning'])}" if standing["notRunning"] else ""
        lines.append(f"{'standing':<{NAME_WIDTH}} {standing['running']} of {standing['declared']} running{down}")
    terminal = report.get("webTerminal")
    if terminal:
        lines.append(f"{'terminal':<{NAME_WIDTH}} {terminal['url']} — open it with {terminal['login']}")
    backlog = report.get("channelBacklog")
    if backlog:
        error = f"; last error: {backlog['lastError']}" if backlog.get("lastError") else ""
        lines.append(
            f"{'channels':<{NAME_WIDTH}} {backlog['count']} undelivered, oldest "
            f"{format_age(backlog['oldestAgeSeconds'])} old{error}"
        )
    return lines


# ------------------------------------------------------------------------------------------------ restart


def restart_services(config: LoadedConfig, specs: list[ServiceSpec], show: Callable[[Row], None]) -> bool:
    """Stop every service, then start every service, showing each row as it settles; True when both halves are
    ok. ``restart.completed`` records the outcome."""
    stopped = []
    for row in stop_services(specs):
        show(row)
        stopped.append(row)
    started = []
    for row in start_services(config, specs):
        show(row)
        started.append(row)
    ok = stop_ok(stopped) and start_ok(started)
    events.emit("restart.completed", ok=ok, stop_ok=stop_ok(stopped), start_ok=start_ok(started))
    return ok
