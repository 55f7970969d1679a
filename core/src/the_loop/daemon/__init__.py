"""``the-loop daemon run <service>``: run one service in this process — what ``start`` spawns, and the
systemd (``Type=simple``) / cron form.

Start-up order matters so that a daemon that cannot work never looks alive, even briefly: load the config (which
loads ``env.file``) → point the event log at it, with the service's name as the source → refuse an unknown,
disabled or misconfigured service, or a missing dependency, *before* locking → remove a stale unlocked pidfile →
take the pidfile lock (held → ``daemon.blocked``) → run the service's target until SIGTERM/SIGINT → release.
While it runs, the router (and the poller, each cycle) act on the config in force: an edited file is loaded again
(:mod:`the_loop.daemon.config_watch`); what a running listener or server bound at start (port, path) needs a restart.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.daemon.services import pid_text
from the_loop.interfaces import ServiceContext
from the_loop.state import runlock

if TYPE_CHECKING:
    from the_loop.command import AppContext
    from the_loop.config import LoadedConfig

TMUX_INSTALL = (
    "install it (sudo apt-get install tmux on Debian/Ubuntu · brew install tmux on macOS · "
    "sudo dnf install tmux on Fedora/RHEL)"
)


class StopFlag:
    """Set by SIGTERM/SIGINT; services poll it (calling the flag answers whether to stop)."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self) -> bool:
        return self.stopping

    def set(self, *_signal: Any) -> None:
        self.stopping = True


def preflight(config: LoadedConfig, ingress: bool = False) -> list[str]:
    """Dependencies an (ingress) service needs on this machine; silent when satisfied."""
    from the_loop.daemon.webterminal import TTYD_INSTALL

    missing = []
    web_terminal = config.core.routing.web_terminal.enabled and ingress
    sessions = config.core.routing.enabled and config.core.instance.role != "gateway"  # a gateway runs none
    if (sessions or web_terminal) and shutil.which("tmux") is None:
        missing.append(f"missing dependency: tmux — {TMUX_INSTALL}")
    if web_terminal and shutil.which("ttyd") is None:
        missing.append(f"missing dependency: ttyd — {TTYD_INSTALL} (routing.webTerminal.enabled: true)")
    return missing


def _refuse(service: str, reasons: list[str]) -> int:
    events.emit("daemon.failed", level="error", service=service, problems=reasons)
    for reason in reasons:
        print(f"error: {service} cannot start: {reason}", file=sys.stderr, flush=True)
    return 1


def _target(run: str) -> Any:
    module, _, attr = run.partition(":")
    return getattr(importlib.import_module(module), attr)


def run(app: AppContext, name: str, *, once: bool = False) -> int:
    """Run service ``name`` until it is told to stop; return the exit code."""
    config = app.config(source=name)
    specs = {spec.name: spec for spec in app.host.services(config)}
    spec = specs.get(name)
    if spec is None:
        print(f"error: unknown service {name!r} (known: {', '.join(specs) or 'none'})", file=sys.stderr)
        return 2
    if not spec.enabled:
        return _refuse(name, [f"it is disabled ({spec.enabled_by} is false)"])
    missing = preflight(config, spec.ingress)
    if spec.problems or missing:
        return _refuse(name, [*spec.problems, *missing])
    from the_loop.hooks.executors import HookLoadError, load_declared

    try:  # L3: no daemon runs with a declared hook it cannot load
        load_declared(config)
    except HookLoadError as exc:
        return _refuse(name, [str(exc)])

    try:
        stale = runlock.remove_stale(spec.pidfile)
    except OSError as exc:
        return _refuse(name, [f"cannot remove stale pidfile {spec.pidfile}: {exc.strerror or exc}"])
    if stale is not None:
        print(f"{name}: removed stale pidfile {spec.pidfile} ({pid_text(stale)})", file=sys.stderr, flush=True)

    lock = runlock.RunLock(spec.pidfile)
    try:
        lock.acquire()
    except runlock.LockHeld:
        holder = runlock.holder(spec.pidfile)
        events.emit("daemon.blocked", level="warning", service=name, holder=holder or None)
        if name == "poller":
            events.emit("poller.blocked", level="warning", holder=holder or None)
        print(f"error: {name} is already running ({pid_text(holder)}; lock {spec.pidfile})", file=sys.stderr)
        return 1
    except OSError as exc:
        return _refuse(name, [f"cannot create lock {spec.pidfile}: {exc.strerror or exc}"])

    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    events.emit("daemon.started", service=name, once=once or None)
    print(f"{name}: started (pid {os.getpid()}; config {config.ref.path})", file=sys.stderr, flush=True)
    if spec.ingress:
        from the_loop.routing.service import routing_warnings

        for warning in routing_warnings(config):
            print(f"warning: {warning}", file=sys.stderr, flush=True)
    code = 0
    try:
        from the_loop.daemon.config_watch import ConfigWatcher
        from the_loop.daemon.webterminal import serving
        from the_loop.routing.service import route_pending, start_routing

        latest = ConfigWatcher(config).current  # edits to the file apply without a restart (issue-222)
        with serving(config, spec.ingress):  # routing.webTerminal: a ttyd child for as long as an ingress runs
            # The router works the inbox beside the service (routing.enabled): one worker per state root.
            router = start_routing(latest, stop) if spec.ingress and not once else None
            if spec.ingress and not once:  # the undelivered-queue drainer and the channel poll readers
                from the_loop.channels import start_background
                from the_loop.standing.control import sink

                start_background(config, stop, sink(config))
            try:
                _target(spec.run)(ServiceContext(config=config, should_stop=stop, once=once, latest=latest))
                if spec.ingress and once:
                    route_pending(config)  # the cron form routes what its cycle accepted
            finally:
                stop.set()
                if router is not None:
                    router.join(timeout=30)
    except Exception as exc:
        code = 1
        traceback.print_exc()
        events.emit("daemon.failed", level="error", service=name, error=f"{type(exc).__name__}: {exc}")
        print(f"error: {name} stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        lock.release()
        events.emit("daemon.stopped", service=name, exit_code=code)
        print(f"{name}: stopped", file=sys.stderr, flush=True)
    return code
