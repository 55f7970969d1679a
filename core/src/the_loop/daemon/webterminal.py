"""The browser terminal: one ``ttyd`` child serving the shared ``the-loop-hub`` tmux session, behind a gate.

When ``routing.webTerminal.enabled``, whichever ingress service runs (the receiver ``gh-webhook`` or the ``poller``)
starts ``ttyd --writable --check-origin -H X-The-Loop-Operator -i <private dir>/ttyd.sock tmux [-L <socket>]
new-session -A -s the-loop-hub`` for as long as it runs, and stops it on shutdown: SIGTERM, up to 10 s, then SIGKILL.
When both ingresses run, the first to take the ``local/locks/webterminal.lock`` lock serves it.

ttyd listens only on a Unix socket in a fresh 0700 directory; the port (``routing.webTerminal.host:port``) is the
gate's (:mod:`the_loop.daemon.webterminal_gate`), which lets a browser in only with this start's credential: the
value of
``routing.webTerminal.tokenEnv`` when set, else one generated per start. It is never in an argv or a file; the
operator's login link comes from ``the-loop status`` or ``the-loop sessions attach --web``. ``local/webterminal.json``
says where the gate is (its URL and control socket) while it runs. The child's environment has every credential
variable removed, as a harness's has (a tmux server it starts, and every shell in it, inherits that environment).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.daemon.webterminal_gate import AUTH_HEADER, Gate, ask_login

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.state import StateLayout

__all__ = ["HUB_SESSION", "TTYD_INSTALL", "WebTerminal", "login", "serving", "ttyd_argv"]

HUB_SESSION = "the-loop-hub"
STOP_GRACE_SECONDS = 10.0
READY_SECONDS = 5.0  # how long ttyd may take to make its socket
TTYD_INSTALL = (
    "install it (sudo apt-get install ttyd on Debian 12+/Ubuntu 22.04+ · brew install ttyd on macOS · "
    "sudo dnf install ttyd on Fedora · or a release binary from https://github.com/tsl0922/ttyd/releases)"
)


def ttyd_argv(config: LoadedConfig, listen: Path) -> list[str]:
    """The ttyd command line: on the Unix socket ``listen``, trusting only the gate's header; tmux follows
    ``routing.tmux.socketName`` like every other tmux call."""
    socket = config.core.routing.tmux.socket_name
    tmux = ["tmux", *(["-L", socket] if socket else [])]
    return [
        "ttyd",
        "--writable",
        "--check-origin",
        *("-H", AUTH_HEADER),
        *("-i", str(listen)),
        *tmux,
        *("new-session", "-A", "-s", HUB_SESSION),
    ]


def pointer_path(state: StateLayout) -> Path:
    """``local/webterminal.json``: the running gate's URL and control socket (never its credential)."""
    return state.local_dir / "webterminal.json"


def login(state: StateLayout) -> dict[str, str] | None:
    """The running web terminal's ``{"url", "login"}`` (the login link carries the credential), or None."""
    from the_loop.state import read_json

    found = read_json(pointer_path(state))
    control = found.get("control") if found else None
    return ask_login(Path(control)) if isinstance(control, str) else None


class WebTerminal:
    """One ttyd child. :meth:`start` is best-effort (a failure is logged, the service runs on); :meth:`stop` always
    leaves no child behind."""

    def __init__(self, config: LoadedConfig, *, grace: float = STOP_GRACE_SECONDS) -> None:
        self.config = config
        self.grace = grace
        self.process: subprocess.Popen[bytes] | None = None
        self.gate: Gate | None = None
        self._private: Path | None = None
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
        """Start ttyd and its gate; true when both run."""
        if not self._take_lock():
            return False
        self._private = Path(tempfile.mkdtemp(prefix="the-loop-terminal-"))  # 0700; short enough for a socket path
        listen = self._private / "ttyd.sock"
        error = self._start_ttyd(listen) or self._start_gate(listen)
        if error:
            self._cleanup()
            self._failed(error)
            return False
        assert self.process is not None and self.gate is not None
        from the_loop.state import atomic_write_json

        atomic_write_json(pointer_path(self.config.state), {"url": self.gate.url, "control": str(self.gate.control)})
        events.emit("webterminal.started", pid=self.process.pid, url=self.gate.url, session=HUB_SESSION)
        print(
            f"web terminal: {self.gate.url} (tmux session {HUB_SESSION}); its login link: "
            "the-loop sessions attach --web",
            file=sys.stderr,
            flush=True,
        )
        return True

    def _start_ttyd(self, listen: Path) -> str:
        from the_loop.sessions.tmux import runner_for

        strip = set(runner_for(self.config).strip_env) | set(self._withheld())
        env = {key: value for key, value in os.environ.items() if key not in strip}
        try:
            self.process = subprocess.Popen(
                ttyd_argv(self.config, listen), stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        except OSError as exc:
            return f"cannot run ttyd: {exc.strerror or exc}"
        deadline = time.monotonic() + READY_SECONDS
        while not listen.exists():  # ttyd makes its socket once it is serving
            if self.process.poll() is not None:
                return f"ttyd exited at once with status {self.process.returncode}"
            if time.monotonic() >= deadline:
                return f"ttyd made no socket at {listen} within {READY_SECONDS:g}s"
            time.sleep(0.02)
        return ""

    def _start_gate(self, listen: Path) -> str:
        assert self._private is not None
        terminal = self.config.core.routing.web_terminal
        token = os.environ.get(terminal.token_env, "") if terminal.token_env else ""
        gate = Gate(
            terminal.host,
            terminal.port,
            listen,
            self._private / "gate.sock",
            token or secrets.token_urlsafe(24),
            refused=lambda reason, peer: events.emit("webterminal.refused", level="warning", reason=reason, peer=peer),
        )
        try:
            gate.start()
        except OSError as exc:
            return f"cannot listen on {terminal.host}:{terminal.port}: {exc.strerror or exc} (is the port in use?)"
        self.gate = gate
        return ""

    def _withheld(self) -> list[str]:
        from the_loop.config import session_withheld_env

        return session_withheld_env(self.config)

    def _cleanup(self) -> bool:
        """Everything :meth:`start` made, undone; true when ttyd needed SIGKILL."""
        if self.gate is not None:
            self.gate.stop()
            self.gate = None
        killed = self._stop_child()
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None
        with contextlib.suppress(FileNotFoundError):
            pointer_path(self.config.state).unlink()
        self._release_lock()
        return killed

    def stop(self) -> None:
        """Close the gate, then SIGTERM ttyd, wait up to the grace, then SIGKILL. Signals only its own child."""
        process = self.process
        killed = self._cleanup()
        if process is not None:
            events.emit("webterminal.stopped", pid=process.pid, status=process.returncode, killed=killed or None)

    def _stop_child(self) -> bool:
        """True when the child needed SIGKILL."""
        process, self.process = self.process, None
        if process is None or process.pid <= 0 or process.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.grace)
            return False
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(10)
            return True


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
