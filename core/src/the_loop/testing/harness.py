"""A fake harness TUI for tests and benchmarks: ``python -m the_loop.testing.harness [flags] [prompt]``.

It behaves like an interactive coding agent as far as tmux can tell: it puts its terminal in raw mode, turns on
bracketed paste (``ESC[?2004h``), shows a prompt line, and reads keystrokes. Everything it sees is appended to a JSONL
log (``--log PATH`` or ``$FAKE_HARNESS_LOG``), one object per line with a ``kind``:

- ``start`` — argv, cwd, pid, mode (``fresh``/``resume``), session id, the ``--model`` and ``--effort`` it was given
  (null when none), ``THE_LOOP_*`` values and which credential names are present in its environment (names only,
  never values);
- ``ready`` — raw mode and bracketed paste are on, the prompt is drawn;
- ``paste`` — the text of one bracketed paste (a CR inside it restored to LF);
- ``control`` — a control byte arrived (``byte``); Ctrl-A and Ctrl-U act as they do in Claude Code's input line
  (move to the line start; delete from the cursor back to the line start), so neither empties a draft;
- ``submit`` — the input line when a bare CR arrived outside a paste (``boot: true`` for the positional prompt);
- ``interrupt`` — a lone Escape arrived (``busy``: whether it ended a turn);
- ``answered`` — the key that answered a decision prompt (``choice``: ``1`` or ``2``);
- ``signal`` / ``exit`` — SIGTERM received (and whether it was ignored), exit status.

Drive it with submitted text: ``/exit N`` exits with status N, ``/ignore-term`` ignores SIGTERM from then on,
``/busy S`` is a turn of S seconds (input typed meanwhile waits, as a harness queues it, and a lone Escape ends the
turn early: ``interrupt``), ``/ask <what>`` shows a decision prompt (``Allow fake-tool to run <what>?`` with
``1. Yes`` and ``2. No``) and waits for the key ``1`` or ``2`` (``answered``). With ``FAKE_HARNESS_STATE`` each turn
appends its usage to the conversation's file there (``{"usage": {...}}``: one input token, and output tokens 10 or
the N of a ``[tokens N]`` in the text), as a transcript records it.

Environment knobs: ``FAKE_HARNESS_REFUSE_RESUME=1`` (a ``--resume`` start exits 1 at once),
``FAKE_HARNESS_IGNORE_TERM=1``, ``FAKE_HARNESS_STATE=<dir>`` (a fresh start creates ``<dir>/<id>``; resuming an id
not there exits 1, as Claude Code does). ``--exit-at-start N`` exits with N right after logging start.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CREDENTIAL_NAMES", "FakeHarness", "fake_harness_argv", "main"]

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"
LINE_START, KILL_BACK = 0x01, 0x15  # Ctrl-A, Ctrl-U
PROMPT = "fake-harness>"
ESCAPE = b"\x1b"
ASKING = "Allow fake-tool to run"  # the decision prompt's first words
_TOKENS = re.compile(r"\[tokens (\d+)\]")
# Names whose presence the fake reports (a test proves the runner stripped them); values are never logged.
CREDENTIAL_NAMES = (
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "THE_LOOP_GH_WEBHOOK_SECRET",
    "THE_LOOP_SLACK_BOT_TOKEN",
    "THE_LOOP_SLACK_APP_TOKEN",
)
_VALUE_FLAGS = {"--session-id", "--resume", "--log", "--exit-at-start", "--model", "--effort"}


def fake_harness_argv(
    log: str | os.PathLike[str] | None = None,
    *,
    session_id: str | None = None,
    resume: str | None = None,
    prompt: str | None = None,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The argv that starts the fake: flags first, the positional boot prompt last (the shape Claude Code takes)."""
    argv = [python, "-m", "the_loop.testing.harness"]
    if log is not None:
        argv += ["--log", os.fspath(log)]
    if session_id is not None:
        argv += ["--session-id", session_id]
    if resume is not None:
        argv += ["--resume", resume]
    argv += list(extra)
    if prompt is not None:
        argv.append(prompt)
    return argv


@dataclass
class FakeHarness:
    """One fake harness log and the argv that writes to it, for tests and benchmarks."""

    log: Path

    def argv(
        self,
        session_id: str | None = None,
        resume: str | None = None,
        prompt: str | None = None,
        extra: Sequence[str] = (),
    ) -> list[str]:
        return fake_harness_argv(self.log, session_id=session_id, resume=resume, prompt=prompt, extra=extra)

    def another(self) -> FakeHarness:
        """A second fake with its own log beside this one (one per pane)."""
        index = 2
        while (candidate := self.log.with_name(f"{self.log.stem}-{index}{self.log.suffix}")).exists():
            index += 1
        candidate.touch()
        return FakeHarness(candidate)

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Everything logged so far (only ``kind`` records when given)."""
        try:
            lines = self.log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        records = [json.loads(line) for line in lines if line.endswith("}")]
        return [r for r in records if kind is None or r["kind"] == kind]

    def submitted(self) -> list[str]:
        """Every submitted input in order, the positional boot prompt first when there was one; each as delivered,
        without the line break a paste starts with (:func:`the_loop.sessions.tmux.unframed`)."""
        from the_loop.sessions.tmux import unframed  # not at import: the TUI itself starts without the rest of core

        return [unframed(record["text"]) for record in self.records("submit")]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` records of ``kind`` are logged; ``AssertionError`` on timeout."""
        deadline = time.monotonic() + timeout
        while len(found := self.records(kind)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.log}: {len(found)} {kind!r} records after {timeout}s, wanted {count}")
            time.sleep(0.005)
        return found

    def wait_ready(self, count: int = 1, timeout: float = 10.0, screen: Callable[[], str] | None = None) -> None:
        """Wait for ``count`` ready records; with ``screen`` (e.g. ``lambda: runner.capture(target)``) also until
        the prompt shows there — then tmux has also seen the bracketed-paste switch written just before it."""
        self.wait_for("ready", count, timeout)
        deadline = time.monotonic() + timeout
        while screen is not None and PROMPT not in screen():
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake's prompt did not show within {timeout}s")
            time.sleep(0.005)

    def wait_for_submitted(self, count: int, timeout: float = 10.0) -> list[str]:
        from the_loop.sessions.tmux import unframed

        return [unframed(record["text"]) for record in self.wait_for("submit", count, timeout)]


class _Log:
    def __init__(self, path: str | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    def write(self, kind: str, **fields: Any) -> None:
        if self.fd is not None:
            line = json.dumps({"kind": kind, "t": time.monotonic(), **fields}) + "\n"
            os.write(self.fd, line.encode())  # one write per line: O_APPEND keeps lines whole


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Known flags with a value, and the positional words (the prompt is the last one)."""
    flags: dict[str, str] = {}
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _VALUE_FLAGS and i + 1 < len(argv):
            flags[arg] = argv[i + 1]
            i += 2
            continue
        if not arg.startswith("-"):
            words.append(arg)
        i += 1
    return flags, words


class _Tui:
    def __init__(self, log: _Log, conversation: Path | None = None) -> None:
        self.log = log
        self.conversation = conversation  # where each turn's usage is appended (FAKE_HARNESS_STATE)
        self.line = bytearray()
        self.cursor = 0  # where typed and pasted text goes in, as in a real line editor
        self.paste: bytearray | None = None  # collecting a bracketed paste
        self.pending = b""  # an escape sequence split across reads
        self.busy_until = 0.0  # a turn in progress: input waits in ``queued`` until it ends
        self.turn = ""  # the text of the turn in progress
        self.queued = b""
        self.asking = ""  # a decision prompt on screen: only its keys are read

    def read(self, data: bytes) -> None:
        """One read from the terminal: a lone Escape interrupts, a prompt takes its key, a busy turn queues."""
        if data == ESCAPE:
            self.interrupt()
        elif self.asking:
            self.answer(data)
        elif time.monotonic() < self.busy_until:
            self.queued += data
        else:
            self.feed(data)

    def tick(self) -> None:
        """Called between reads: a busy turn whose time is up ends, and what was typed meanwhile is read."""
        if self.busy_until and time.monotonic() >= self.busy_until:
            self.end_turn()

    def end_turn(self, interrupted: bool = False) -> None:
        self.busy_until = 0.0
        self.spend(self.turn)
        self.show("\n[interrupted]\n" if interrupted else "\n[turn done]\n")
        self.show(f"{PROMPT} ")
        queued, self.queued = self.queued, b""
        if queued:
            self.feed(queued)

    def interrupt(self) -> None:
        busy = bool(self.busy_until)
        self.log.write("interrupt", busy=busy)
        if busy:
            self.end_turn(interrupted=True)

    def answer(self, data: bytes) -> None:
        choice = data.decode(errors="replace").strip()[:1]
        if choice not in ("1", "2"):
            return
        self.log.write("answered", choice=choice, asked=self.asking)
        self.asking = ""
        self.show("\x1b[2J\x1b[H" + ("[allowed]" if choice == "1" else "[denied]") + f"\n{PROMPT} ")

    def spend(self, text: str) -> None:
        """Record a turn's usage in the conversation's file, as a transcript would."""
        if self.conversation is None or not text:
            return
        tokens = _TOKENS.search(text)
        usage = {"input_tokens": 1, "output_tokens": int(tokens[1]) if tokens else 10}
        with self.conversation.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"usage": usage, "model": "fake-model"}) + "\n")

    def show(self, text: str) -> None:
        os.write(1, text.replace("\n", "\r\n").encode())

    def feed(self, data: bytes) -> None:
        data = self.pending + data
        self.pending = b""
        i = 0
        while i < len(data):
            if self.paste is not None:
                end = data.find(PASTE_END, i)
                if end < 0:
                    keep = _partial_suffix(data[i:], PASTE_END)
                    self.paste += data[i : len(data) - keep]
                    self.pending = data[len(data) - keep :]
                    return
                self.paste += data[i:end]
                text = bytes(self.paste).replace(b"\r", b"\n").decode(errors="replace")
                self.log.write("paste", text=text)
                self.insert(text.encode())
                self.show(text)
                self.paste = None
                i = end + len(PASTE_END)
                continue
            if data.startswith(PASTE_START, i):
                self.paste = bytearray()
                i += len(PASTE_START)
                continue
            if data[i] == 0x1B and PASTE_START.startswith(data[i:]):
                self.pending = data[i:]  # maybe the start of a paste marker: wait for the rest
                return
            byte = data[i]
            i += 1
            if byte == 0x0D:
                self.submit(self.line.decode(errors="replace"))
                self.line.clear()
                self.cursor = 0
            elif byte == 0x7F:
                if self.cursor:
                    del self.line[self.cursor - 1 : self.cursor]
                    self.cursor -= 1
            elif byte < 0x20:
                self.log.write("control", byte=byte)
                if byte == LINE_START:
                    self.cursor = 0
                elif byte == KILL_BACK:
                    del self.line[: self.cursor]
                    self.cursor = 0
            else:
                self.insert(bytes([byte]))
                self.show(chr(byte) if byte < 0x7F else "")

    def insert(self, data: bytes) -> None:
        self.line[self.cursor : self.cursor] = data
        self.cursor += len(data)

    def submit(self, text: str, boot: bool = False) -> None:
        self.log.write("submit", text=text, boot=boot)
        self.show(f"\n[submitted {len(text)} chars]\n")
        command, _, arg = text.strip().partition(" ")
        if command == "/exit":
            _exit(self.log, int(arg or 0))
        elif command == "/ignore-term":
            _ignore_term(self.log)
        elif command == "/busy":
            self.turn, self.busy_until = text, time.monotonic() + float(arg or 1)
            self.show("[working]\n")
            return
        elif command == "/ask":
            self.asking = arg.strip() or "a command"
            self.show(f"{ASKING} {self.asking}?\n\u276f 1. Yes\n  2. No\n")
            return
        self.spend(text)
        self.show(f"{PROMPT} ")


def _partial_suffix(data: bytes, marker: bytes) -> int:
    """How many trailing bytes of ``data`` could be the start of ``marker``."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if marker.startswith(data[-size:]):
            return size
    return 0


def _exit(log: _Log, status: int) -> None:
    log.write("exit", status=status)
    os._exit(status)


def _ignore_term(log: _Log) -> None:
    signal.signal(signal.SIGTERM, lambda *_: log.write("signal", signal="SIGTERM", ignored=True))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    flags, words = _parse(args)
    log = _Log(flags.get("--log") or os.environ.get("FAKE_HARNESS_LOG"))
    resume = flags.get("--resume")
    session_id = resume or flags.get("--session-id")
    env = os.environ
    log.write(
        "start",
        argv=args,
        cwd=os.getcwd(),
        pid=os.getpid(),
        mode="resume" if resume else "fresh",
        session_id=session_id,
        model=flags.get("--model"),
        effort=flags.get("--effort"),
        env={k: v for k, v in env.items() if k.startswith("THE_LOOP_") and k not in CREDENTIAL_NAMES},
        credentials_present=[name for name in CREDENTIAL_NAMES if name in env],
    )
    signal.signal(signal.SIGTERM, lambda *_: (log.write("signal", signal="SIGTERM", ignored=False), _exit(log, 143)))
    if env.get("FAKE_HARNESS_IGNORE_TERM") == "1":
        _ignore_term(log)
    if "--exit-at-start" in flags:
        os.write(2, f"fake-harness: exiting at start with status {flags['--exit-at-start']}\n".encode())
        _exit(log, int(flags["--exit-at-start"]))
    if resume and env.get("FAKE_HARNESS_REFUSE_RESUME") == "1":
        _exit(log, 1)
    state = env.get("FAKE_HARNESS_STATE")
    marker = Path(state) / session_id if state and session_id else None
    if marker is not None:
        if resume and not marker.exists():
            _exit(log, 1)  # Claude Code refuses to resume a conversation it does not have
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    if os.isatty(0):
        import tty

        tty.setraw(0)
    tui = _Tui(log, marker)
    # Bracketed paste on, then the prompt: once tmux shows the prompt it has also seen the mode switch.
    tui.show(f"\x1b[?2004h{PROMPT} ")
    log.write("ready")
    if words:
        tui.submit(words[-1], boot=True)
    while True:
        wait = max(0.0, tui.busy_until - time.monotonic()) if tui.busy_until else None
        if select.select([0], [], [], wait)[0]:  # a signal handler runs while waiting
            data = os.read(0, 65536)
            if not data:
                _exit(log, 0)
            tui.read(data)
        tui.tick()


if __name__ == "__main__":
    main()
