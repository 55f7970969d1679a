"""The browser terminal: one ``ttyd`` child serving the shared ``the-loop-hub`` tmux session.

When ``routing.webTerminal.enabled``, whichever ingress service runs (the receiver ``gh-webhook`` or the ``poller``)
starts ``ttyd --writable -p <port> -i <host> tmux [-L <socket>] new-session -A -s the-loop-hub`` for as long as it
runs, and stops it on shutdown: SIGTERM, up to 10 s, then SIGKILL. When both ingresses run, the first to take the
``local/locks/webterminal.lock`` lock serves it and the other leaves it alone.

the-loop adds no authentication: anyone who reaches the port gets a writable terminal on this machine's tmux
server. It binds 127.0.0.1 by default; access control is environmental (localhost, a VPN, the host's network).
The child's environment has every credential variable removed, as a harness's has (a tmux server it starts, and
every shell in it, inherits that environment).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from the_loop import events

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["HUB_SESSION", "TTYD_INSTALL", "WebTerminal", "serving", "ttyd_argv"]

HUB_SESSION = "the-loop-hub"
STOP_GRACE_SECONDS = 10.0
EARLY_EXIT_SECONDS = 0.5  # a ttyd that cannot bind exits at once: look that long before calling it started
TTYD_INSTALL = (
    "install it (sudo apt-get install ttyd on Debian 12+/Ubuntu 22.04+ · brew install ttyd on macOS · "
    "sudo dnf install ttyd on Fedora · or a release binary from https://github.com/tsl0922/ttyd/releases)"
)


def ttyd_argv(config: LoadedConfig) -> list[str]:
    """The ttyd command line; tmux follows ``routing.tmux.socketName`` like every other tmux call."""
    routing = config.core.routing
    terminal = routing.web_terminal
    socket = routing.tmux.socket_name
    tmux = ["tmux", *(["-L", socket] if socket else [])]
    return [
        "ttyd",
        "--writable",
        "-p",
        str(terminal.port),
        "-i",
        terminal.host,
        *tmux,
        "new-session",
        "-A",
        "-s",
        HUB_SESSION,
    ]


def url(config: LoadedConfig) -> str:
    terminal = config.core.routing.web_terminal
    host = f"[{terminal.host}]" if ":" in terminal.host else terminal.host
    return f"http://{host}:{terminal.port}/"


class WebTerminal:
    """One ttyd child. :meth:`start` is best-effort (a failure is logged, the service runs on); :meth:`stop` always
    leaves no child behind."""

    def __init__(self, config: LoadedConfig, *, grace: float = STOP_GRACE_SECONDS) -> None:
        self.config = config
        self.grace = grace
        self.process: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None

    def _take_lock(self) -> bool:
        path = self.config.state.lock_for("webterminal")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            self._failed(f"cannot create lock {path}: {exc.strerror or exc}")
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                print("web terminal: already served by another the-loop service", file=sys.stderr, flush=True)
                return False
            self._failed(f"cannot lock {path}: {exc.strerror or exc}")
            return False
        self._lock_fd = fd
        return True

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _failed(self, error: str) -> None:
        events.emit("webterminal.failed", level="warning", error=error)
        print(f"warning: web terminal not started: {error}", file=sys.stderr, flush=True)

    def start(self) -> bool:
        """Start ttyd; true when it is running."""
        from the_loop.dispatcher import runner_for

        if not self._take_lock():
            return False
        argv = ttyd_argv(self.config)
        strip = set(runner_for(self.config).strip_env)
        env = {key: value for key, value in os.environ.items() if key not in strip}
        try:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as exc:
            self._release_lock()
            self._failed(f"cannot run ttyd: {exc.strerror or exc}")
            return False
        try:
            status: int | None = self.process.wait(EARLY_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            status = None  # still running: it bound its port
        if status is not None:
            self.process = None
            self._release_lock()
            self._failed(
                f"ttyd exited at once with status {status} (is port "
                f"{self.config.core.routing.web_terminal.port} in use?)"
            )
            return False
        address = url(self.config)
        events.emit("webterminal.started", pid=self.process.pid, url=address, session=HUB_SESSION)
        print(
            f"web terminal: {address} (tmux session {HUB_SESSION}; the-loop adds no authentication — access control "
            "is environmental: localhost, VPN or the host's network)",
            file=sys.stderr,
            flush=True,
        )
        return True

    def stop(self) -> None:
        """SIGTERM, wait up to the grace, then SIGKILL. Signals only the child this object started."""
        process, self.process = self.process, None
        if process is None:
            return
        killed = False
        if process.poll() is None and process.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(self.grace)
            except subprocess.TimeoutExpired:
                killed = True
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(10)
        self._release_lock()
        events.emit("webterminal.stopped", pid=process.pid, status=process.returncode, killed=killed or None)


@contextlib.contextmanager
def serving(config: LoadedConfig, ingress: bool) -> Iterator[WebTerminal | None]:
    """Run the web terminal around an ingress service's life when ``routing.webTerminal.enabled``."""
    if not ingress or not config.core.routing.web_terminal.enabled:
        yield None
        return
    terminal = WebTerminal(config)
    terminal.start()
    try:
        yield terminal
    finally:
        terminal.stop()
