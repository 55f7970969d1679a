"""The tmux runner: host a harness TUI in a named tmux session, probe it, paste into it, end it.

Provider-neutral and addressed by tmux target only (``loop-<slug>``, ``loop-standing-<name>``); what a session is
*for* belongs to the registry and the dispatcher, which also emit the events — this module emits none.

Rules it keeps:

- tmux is run with ``subprocess.run([...], timeout=…)`` and judged by exit status, never by its wording (the one
  exception: ``duplicate session`` only triggers a fresh probe). No shell anywhere: the harness argv is always two or
  more words (``env [-u NAME]… argv…``), so tmux ``exec``s it instead of handing it to ``sh -c``.
- Targets are exact: ``=name`` for a session and ``=name:`` for its pane. A bare ``-t loop-x-1`` would match a
  session named ``loop-x-15`` by prefix.
- No command resolves a client: no ``send-keys``, no ``-c``; every command names its ``-t``.
- An argument ending in ``;`` would end the tmux command there and start a new one from the next argument (tmux
  splits its own argv that way), so such arguments are escaped (``\\;``); ``-c`` is format-expanded, so ``#`` is
  doubled.
- Credential variables are removed from the tmux client's environment (a server it starts inherits it) and from the
  harness's (``env -u NAME``); their values never appear in an argv.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from the_loop.refs import normalize_tmux_target
from the_loop.sessions.prompts import remove_all
from the_loop.state import warn_once

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = [
    "CREDENTIAL_ENV_NAMES",
    "DRAFT_SEPARATOR",
    "DeliveryError",
    "ProbeState",
    "SpawnError",
    "SpawnResult",
    "TargetError",
    "TerminateResult",
    "TmuxError",
    "TmuxRunner",
    "tmux_target",
    "unframed",
]

ProbeState = Literal["live", "dead", "absent", "unknown"]

# Stripped from every harness environment; callers add the names their config declares.
CREDENTIAL_ENV_NAMES: tuple[str, ...] = (
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "THE_LOOP_GH_WEBHOOK_SECRET",
    "THE_LOOP_SLACK_BOT_TOKEN",
    "THE_LOOP_SLACK_APP_TOKEN",
)

# Harness credentials a pane may show part of (Claude Code prints an API key's tail in its approval dialog).
_TARGET = re.compile(r"^loop-[A-Za-z0-9_-]+$")
_KEY_NAME = re.compile(r"^(?:[CMS]-)*[A-Za-z0-9]+$")  # tmux key names (Escape, Enter, 2, C-c)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VERSION = re.compile(r"(\d+)\.(\d+)")
_ENV_FLAG_SINCE = (3, 2)  # new-session -e
# Every paste starts on a line of its own: whatever a human left unsent on the input line stays in front of it, whole,
# and both reach the model as one turn. No control byte is ever sent: a harness's line editor gives them meanings of
# its own (Claude Code reads ^A^U as "go to line start, delete nothing").
DRAFT_SEPARATOR = "\n"
_SUBMIT = "\r"
_PASTE_MARKERS = re.compile("\x1b\\[20[01]~")
_PANE_DEAD = "the-loop:pane-dead"
_POLL_SECONDS = 0.2
_SERVER_RESTART_TRIES = 3  # new-session answered "server exited unexpectedly": the kill just emptied the server


class TmuxError(Exception):
    """tmux refused or did not answer; the message says which command and why."""


class TargetError(TmuxError, ValueError):
    """A target that is not a ``loop-…`` session name; refused before any tmux call."""


class SpawnError(TmuxError):
    """``new-session`` could not run (no tmux, no working directory, tmux refused or hung)."""


class DeliveryError(TmuxError):
    """A paste that did not happen.

    ``reason`` is ``session_missing`` (the session is absent or its pane dead: take the respawn path),
    ``tmux_failed`` (tmux refused a command) or ``tmux_unanswered`` (timeout, missing binary). ``transient`` is true
    when retrying the same delivery later may succeed; a missing session needs a respawn instead.
    """

    def __init__(self, reason: str, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.transient = transient


@dataclass(frozen=True)
class SpawnResult:
    """What :meth:`TmuxRunner.spawn` did. Not spawned means the name is held and nothing was killed.

    ``occupant`` is what holds the name: ``live`` (an agent is running: never killed), ``dead`` (a retained pane
    that could not be cleared) or ``unknown`` (tmux said duplicate and then did not answer). ``remedy`` tells an
    operator how to free it. ``warnings`` lists best-effort steps that did not take (``-e``, ``remain-on-exit``).
    """

    target: str
    spawned: bool
    occupant: ProbeState | None = None
    remedy: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class TerminateResult:
    """What :meth:`TmuxRunner.terminate_harness` did: ``ok`` when no harness process is left running."""

    target: str
    ok: bool
    error: str | None = None
    terminated: tuple[int, ...] = ()  # pids sent SIGTERM
    killed: tuple[int, ...] = ()  # pids that outlived the grace period and were sent SIGKILL


def tmux_target(name: str) -> str:
    """``name`` spelled as tmux spells it (``.``/``:`` → ``_``), or :class:`TargetError` if it is no loop name."""
    target = normalize_tmux_target(name)
    if not _TARGET.match(target):
        raise TargetError(f"not a the-loop tmux session name: {name!r} (expected loop-<slug>)")
    return target


def _arg(word: str) -> str:
    """Escape a trailing ``;``, which tmux would otherwise read as the end of the command."""
    return word[:-1] + "\\;" if word.endswith(";") else word


def _chain(*commands: Sequence[str]) -> list[str]:
    """One tmux argv running ``commands`` in order; tmux stops at the first that fails."""
    argv: list[str] = []
    for command in commands:
        if argv:
            argv.append(";")
        argv.extend(_arg(word) for word in command)
    return argv


@dataclass
class TmuxRunner:
    """Drive one tmux server: the default one (``socket=None``) or a private one named with ``-L socket``.

    ``timeout`` bounds every tmux call; ``strip_env`` names credential variables no harness may inherit.
    """

    socket: str | None = None
    binary: str = "tmux"
    timeout: float = 10.0
    strip_env: Sequence[str] = CREDENTIAL_ENV_NAMES
    _seq: itertools.count[int] = field(default_factory=itertools.count, init=False, repr=False)
    _locks: dict[str, threading.Lock] = field(default_factory=dict, init=False, repr=False)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _version: tuple[int, int] | None = field(default=None, init=False, repr=False)
    _version_text: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.strip_env = tuple(self.strip_env)
        for name in self.strip_env:
            _check_env_name(name)

    # ------------------------------------------------------------------------------------------- plumbing

    @property
    def command_prefix(self) -> list[str]:
        """How an operator reaches this server: ``tmux`` or ``tmux -L <socket>``."""
        return [self.binary, "-L", self.socket] if self.socket else [self.binary]

    def _run(self, argv: Sequence[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes] | None:
        """Run one tmux client; ``None`` when tmux did not answer (timeout, missing binary, OSError)."""
        env = {key: value for key, value in os.environ.items() if key not in self.strip_env}
        try:
            return subprocess.run(
                [*self.command_prefix, *argv],
                input=stdin if stdin is not None else b"",
                capture_output=True,
                env=env,
                timeout=self.timeout,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            return None

    def version(self) -> tuple[int, int] | None:
        """``(major, minor)`` from ``tmux -V``, probed once per runner; ``None`` if it cannot be read."""
        if self._version_text is None:
            answer = self._run(["-V"])
            self._version_text = answer.stdout.decode(errors="replace").strip() if answer else ""
            match = _VERSION.search(self._version_text)
            self._version = (int(match[1]), int(match[2])) if match else None
        return self._version

    # ---------------------------------------------------------------------------------------------- probe

    def probe(self, target: str) -> ProbeState:
        """``live`` (a pane runs), ``dead`` (every pane exited, kept by remain-on-exit), ``absent`` (tmux answered:
        no such session or no server) or ``unknown`` (tmux did not answer — never to be read as absent).

        ``has-session`` and ``list-panes`` run in one invocation: a failing ``has-session`` stops the chain, and
        tmux runs the pair without handling pane exits in between.
        """
        target = tmux_target(target)
        answer = self._run(
            _chain(
                ["has-session", "-t", f"={target}"],
                ["list-panes", "-s", "-t", f"={target}", "-F", "#{pane_dead}"],
            )
        )
        if answer is None:
            return "unknown"
        if answer.returncode != 0:
            return "absent"
        flags = answer.stdout.decode(errors="replace").split()
        return "dead" if flags and all(flag == "1" for flag in flags) else "live"

    # ---------------------------------------------------------------------------------------------- spawn

    def spawn(
        self,
        target: str,
        cwd: str | os.PathLike[str],
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        strip_env: Iterable[str] = (),
        remain_on_exit: bool = True,
    ) -> SpawnResult:
        """Start ``argv`` detached in a new session ``target`` running in ``cwd``.

        The name decides by its occupant, never by killing blindly: absent or unknown → ``new-session`` (tmux
        decides); live → not spawned; dead → killed and the kill verified first. When ``new-session`` answers
        ``duplicate session`` the name is re-probed and ``new-session`` runs at most once more.
        ``env`` pairs are set with ``-e`` (tmux ≥ 3.2; omitted with a warning before that) and must not name a
        credential; ``strip_env`` adds names to strip to the runner's own. ``remain_on_exit`` is set in the same
        tmux invocation, so a harness that exits at once leaves a dead pane rather than no session.
        Raises :class:`SpawnError` when tmux refuses or does not answer, :class:`TargetError` for a bad name.
        """
        target = tmux_target(target)
        if not argv:
            raise ValueError("spawn needs a command to run")
        command, warnings = self._new_session(target, Path(cwd), argv, env or {}, strip_env, remain_on_exit)
        state = self.probe(target)
        retried = False
        restarts = 0
        while True:
            if state == "live" or (state == "unknown" and retried):
                return self._occupied(target, state)
            if state == "dead" and not self.kill(target):
                return self._occupied(target, "dead")
            answer = self._run(command)
            if answer is None:
                raise SpawnError(f"tmux did not answer new-session for {target} within {self.timeout:g}s")
            if answer.returncode == 0:
                return SpawnResult(target, spawned=True, warnings=tuple(warnings))
            stderr = answer.stderr.decode(errors="replace").strip()
            if "server exited unexpectedly" in stderr and restarts < _SERVER_RESTART_TRIES:
                # Killing the server's last session shuts it down; a new-session that reached it while it was
                # going is answered this way. The next one starts a server of its own.
                restarts += 1
                time.sleep(0.05 * restarts)
                state = self.probe(target)
                continue
            if "duplicate session" in stderr:
                if retried:
                    return self._occupied(target, "unknown")
                retried = True
                state = self.probe(target)  # tmux's answer is authoritative: decide again, once
                continue
            # new-session may have succeeded and only the chained remain-on-exit failed (an old tmux): then the
            # session exists and the failure is only a warning.
            if remain_on_exit and self.probe(target) in ("live", "dead"):
                warnings.append(f"remain-on-exit not set on {target}: {stderr}")
                return SpawnResult(target, spawned=True, warnings=tuple(warnings))
            raise SpawnError(f"tmux new-session failed for {target}: {stderr or f'exit {answer.returncode}'}")

    def _new_session(
        self,
        target: str,
        cwd: Path,
        argv: Sequence[str],
        env: Mapping[str, str],
        strip_env: Iterable[str],
        remain_on_exit: bool,
    ) -> tuple[list[str], list[str]]:
        # tmux falls back to another directory when -c does not exist; a harness must never run somewhere else.
        if not cwd.is_dir():
            raise SpawnError(f"working directory does not exist: {cwd}")
        strip = list(dict.fromkeys([*self.strip_env, *strip_env]))
        for name in strip:
            _check_env_name(name)
        warnings: list[str] = []
        new_session = ["new-session", "-d", "-s", target, "-c", str(cwd.absolute()).replace("#", "##")]
        for name in env:
            _check_env_name(name)
            if name in strip:
                raise ValueError(f"{name} is a credential and is never passed to a harness")
        if env:
            version = self.version()
            if version is not None and version >= _ENV_FLAG_SINCE:
                for name, value in env.items():
                    new_session += ["-e", f"{name}={value}"]
            else:
                message = (
                    f"tmux {self._version_text or '(version unknown)'} has no new-session -e (needs 3.2): "
                    f"harness sessions start without {', '.join(env)}"
                )
                warn_once(f"tmux-no-env-flag:{self.binary}:{self.socket}", message)
                warnings.append(message)
        # `env` execs the harness, so the pane pid is the harness; two or more words keep tmux from using a shell.
        new_session += ["--", "env", *itertools.chain.from_iterable(("-u", name) for name in strip), *argv]
        commands = [new_session]
        if remain_on_exit:
            commands.append(["set-option", "-t", f"={target}:", "-w", "remain-on-exit", "on"])
        return _chain(*commands), warnings

    def _occupied(self, target: str, occupant: ProbeState) -> SpawnResult:
        tmux = " ".join(self.command_prefix)
        if occupant == "dead":
            remedy = (
                f"tmux session {target} holds a dead pane that could not be removed; "
                f"run: {tmux} kill-session -t {target}"
            )
        else:
            remedy = (
                f"tmux session {target} already exists and may be running an agent; it was not touched. "
                f"Look with: {tmux} attach -r -t {target}; free the name with: {tmux} kill-session -t {target} "
                "or the-loop sessions reset --work-item <ref>"
            )
        return SpawnResult(target, spawned=False, occupant=occupant, remedy=remedy)

    # -------------------------------------------------------------------------------------------- deliver

    def deliver(self, target: str, text: str) -> None:
        """Paste ``text`` into the session's pane as one bracketed paste and submit it.

        The paste is :data:`DRAFT_SEPARATOR` then ``text``, so a human's unsent draft is kept, on its own line,
        ahead of the event (see :func:`unframed`); no control byte is pasted. One tmux invocation: the two buffers
        (the text from stdin, the submit ``\\r``; named per delivery, so concurrent deliveries never cross), then
        ``if-shell -F '#{pane_dead}'`` — a format test, no shell — which pastes only into a live pane and fails for
        an absent one. Liveness must be checked inside tmux, at paste time: tmux 3.3a crashes the whole server when
        asked to paste into a dead pane, and a probe made before the paste could be stale by then. ``paste-buffer``
        writes to the ``-t`` pane and consults no client, so an attached (even read-only) observer changes
        nothing. On failure the session is probed: dead or absent is ``session_missing``. Raises
        :class:`DeliveryError`.
        """
        target = tmux_target(target)
        body = remove_all(_PASTE_MARKERS, text)  # the text must never end the bracketed paste itself
        if not body:
            raise ValueError("nothing to deliver")
        data = (DRAFT_SEPARATOR + body).encode()
        names = [f"the-loop-{os.getpid()}-{next(self._seq)}-{part}" for part in ("evt", "submit")]
        evt, submit = names
        pane = f"={target}:"
        paste = " ; ".join(
            f"paste-buffer {flags} -b {name} -t {pane}" for flags, name in (("-p -d", evt), ("-d", submit))
        )
        drop = " ; ".join(f"delete-buffer -b {name}" for name in names)
        command = _chain(
            ["load-buffer", "-b", evt, "-"],
            ["set-buffer", "-b", submit, "--", _SUBMIT],
            [
                "if-shell",
                "-F",
                "-t",
                pane,
                "#{pane_dead}",
                f"{drop} ; display-message -p -t {pane} {_PANE_DEAD}",
                paste,
            ],
        )
        self._into_live_pane(target, command, "delivery", stdin=data, buffers=names)

    def _into_live_pane(
        self, target: str, command: list[str], what: str, *, stdin: bytes | None = None, buffers: Sequence[str] = ()
    ) -> None:
        """Run ``command`` (guarded by ``if-shell -F '#{pane_dead}'``) for ``target``, one at a time per pane in
        this process; :class:`DeliveryError` unless it went into a live pane (``buffers`` left by a failure are
        deleted)."""
        with self._lock_for(target):
            answer = self._run(command, stdin=stdin)
        if answer is None:
            raise DeliveryError(
                "tmux_unanswered", f"tmux did not answer a {what} to {target} within {self.timeout:g}s", transient=True
            )
        if answer.returncode == 0 and _PANE_DEAD not in answer.stdout.decode(errors="replace"):
            return
        if answer.returncode != 0 and buffers:
            self._drop_buffers(buffers)
        state = self.probe(target)
        if state in ("dead", "absent"):
            raise DeliveryError("session_missing", f"tmux session {target} is {state}", transient=False)
        stderr = answer.stderr.decode(errors="replace").strip()
        raise DeliveryError("tmux_failed", f"{what} to {target} failed: {stderr or 'pane not live'}", transient=True)

    def send_keys(self, target: str, keys: Sequence[str]) -> None:
        """Press ``keys`` (tmux key names: ``Escape``, ``Enter``, ``2``, ``C-c``; never a literal string) in the
        session's pane, as a harness's interrupt or a prompt's answer. Like :meth:`deliver`: aimed at the pane, no
        client resolved, only into a live pane (checked inside tmux), one key press at a time per pane in this
        process. Raises :class:`DeliveryError`."""
        target = tmux_target(target)
        if not keys or not all(_KEY_NAME.match(key) for key in keys):
            raise ValueError(f"not tmux key names: {list(keys)!r}")
        pane = f"={target}:"
        press = "send-keys -t " + pane + " " + " ".join(keys)
        command = ["if-shell", "-F", "-t", pane, "#{pane_dead}", f"display-message -p -t {pane} {_PANE_DEAD}", press]
        self._into_live_pane(target, command, "key press")

    def _lock_for(self, target: str) -> threading.Lock:
        """One paste at a time per pane in this process (tmux may interleave two clients' command lists)."""
        with self._locks_guard:
            return self._locks.setdefault(target, threading.Lock())

    def _drop_buffers(self, names: Sequence[str]) -> None:
        """Best-effort: delete what a failed delivery left. The buffers were made in this order, so the ones that
        exist are a prefix of it, and a chain that stops at the first missing one deletes exactly those."""
        self._run(_chain(*(["delete-buffer", "-b", name] for name in names)))

    # ------------------------------------------------------------------------------------------ end, list

    def kill(self, target: str) -> bool:
        """Kill the session; true when it is gone afterwards (a failing kill of a vanished session counts)."""
        target = tmux_target(target)
        answer = self._run(["kill-session", "-t", f"={target}"])
        if answer is not None and answer.returncode == 0:
            return True
        return self.probe(target) == "absent"

    def kill_server(self) -> None:
        """End this tmux server and every session on it (what a crash or a reboot does to the sessions)."""
        self._run(["kill-server"])

    def terminate_harness(self, target: str, grace_seconds: float = 5.0) -> TerminateResult:
        """End the harness in ``target``'s panes and keep the pane: SIGTERM, then SIGKILL after ``grace_seconds``.

        Refuses a non-``loop-`` target before any tmux call. remain-on-exit is re-set first so the scrollback
        survives; only pids tmux lists for this session's live panes are signalled, never a pid ≤ 0.
        """
        target = tmux_target(target)
        answer = self._run(
            _chain(
                ["set-option", "-t", f"={target}:", "-w", "remain-on-exit", "on"],
                ["list-panes", "-s", "-t", f"={target}", "-F", "#{pane_pid} #{pane_dead}"],
            )
        )
        if answer is None:
            return TerminateResult(target, ok=False, error="tmux did not answer")
        if answer.returncode != 0:
            state = self.probe(target)
            if state == "absent":
                return TerminateResult(target, ok=True, error="session_missing")
            return TerminateResult(target, ok=False, error=answer.stderr.decode(errors="replace").strip())
        pids = _live_pids(answer.stdout)
        errors: list[str] = []
        terminated = tuple(pid for pid in pids if _signal(pid, signal.SIGTERM, errors))
        deadline = time.monotonic() + max(grace_seconds, 0)
        survivors = self._survivors(target, pids)
        while survivors and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)
            survivors = self._survivors(target, survivors)
        killed = tuple(pid for pid in survivors if _signal(pid, signal.SIGKILL, errors))
        deadline = time.monotonic() + 2.0  # tmux marks the pane dead on its next loop
        while survivors and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS / 4)
            survivors = self._survivors(target, survivors)
        if survivors:
            errors.append(f"still running: {', '.join(map(str, survivors))}")
        return TerminateResult(
            target, ok=not survivors, error="; ".join(errors) or None, terminated=terminated, killed=killed
        )

    def _survivors(self, target: str, pids: Sequence[int]) -> list[int]:
        """Which of ``pids`` tmux still lists as a live pane of ``target`` (all of them if tmux did not answer)."""
        if not pids:
            return []
        answer = self._run(["list-panes", "-s", "-t", f"={target}", "-F", "#{pane_pid} #{pane_dead}"])
        if answer is None:
            return list(pids)
        if answer.returncode != 0:
            return []  # the session is gone, and its panes with it
        live = set(_live_pids(answer.stdout))
        return [pid for pid in pids if pid in live]

    def probe_all(self) -> dict[str, ProbeState] | None:
        """:meth:`probe` for every session on the server in one tmux call: name → ``live`` or ``dead`` (a name
        not in the map is absent); None when tmux did not answer."""
        answer = self._run(["list-panes", "-a", "-F", "#{session_name} #{pane_dead}"])
        if answer is None:
            return None
        if answer.returncode != 0:
            return {}  # no server: nothing runs
        states: dict[str, ProbeState] = {}
        for line in answer.stdout.decode(errors="replace").splitlines():
            name, _, dead = line.rpartition(" ")
            states[name] = "live" if dead != "1" or states.get(name) == "live" else "dead"
        return states

    def activity_all(self) -> dict[str, float] | None:
        """When each session's pane last printed anything (``#{window_activity}``, epoch seconds), in one tmux
        call; None when tmux did not answer."""
        answer = self._run(["list-windows", "-a", "-F", "#{session_name} #{window_activity}"])
        if answer is None:
            return None
        if answer.returncode != 0:
            return {}
        found: dict[str, float] = {}
        for line in answer.stdout.decode(errors="replace").splitlines():
            name, _, when = line.rpartition(" ")
            if when.isdigit():
                found[name] = max(found.get(name, 0.0), float(when))
        return found

    def list_sessions(self) -> list[str]:
        """Every session name on the server (none when no server runs); :class:`TmuxError` if tmux did not answer."""
        answer = self._run(["list-sessions", "-F", "#{session_name}"])
        if answer is None:
            raise TmuxError("tmux did not answer list-sessions")
        if answer.returncode != 0:
            return []
        return answer.stdout.decode(errors="replace").split()

    def capture(self, target: str, history: bool = False) -> str:
        """The text of the session's pane (``capture-pane -p``): what is visible, or with ``history`` the whole
        scrollback too."""
        target = tmux_target(target)
        answer = self._run(["capture-pane", "-p", *(["-S", "-"] if history else []), "-t", f"={target}:"])
        if answer is None or answer.returncode != 0:
            reason = "did not answer" if answer is None else answer.stderr.decode(errors="replace").strip()
            raise TmuxError(f"cannot capture {target}: {reason}")
        return answer.stdout.decode(errors="replace")


def unframed(received: str) -> str:
    """The delivered text as a harness received it, without the :data:`DRAFT_SEPARATOR` the paste began with."""
    return received.removeprefix(DRAFT_SEPARATOR)


def _check_env_name(name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ValueError(f"not an environment variable name: {name!r}")


def _live_pids(listing: bytes) -> list[int]:
    """Pids of live panes from ``#{pane_pid} #{pane_dead}`` lines; dead panes and pids ≤ 0 are left out."""
    pids = []
    for line in listing.decode(errors="replace").splitlines():
        pid, _, dead = line.partition(" ")
        if dead.strip() == "0" and pid.isdigit() and int(pid) > 0:
            pids.append(int(pid))
    return pids


def _signal(pid: int, signum: int, errors: list[str]) -> bool:
    """Send ``signum``; false (and an error noted, unless the process already exited) when it was not sent."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    except OSError as exc:
        errors.append(f"{signal.Signals(signum).name} {pid}: {exc.strerror or exc}")
        return False
    return True


def runner_for(config: LoadedConfig) -> TmuxRunner:
    """The tmux runner the config asks for, stripping every credential name the config declares."""
    from the_loop.config import session_withheld_env

    tmux = config.core.routing.tmux
    return TmuxRunner(
        socket=tmux.socket_name or None,
        timeout=tmux.command_timeout_seconds,
        strip_env=tuple(dict.fromkeys([*CREDENTIAL_ENV_NAMES, *session_withheld_env(config)])),
    )
