"""A minimal line-based agent: ``python -m the_loop_shell.agent --transcripts DIR --session-id ID [--] PROMPT``.

It answers every line it reads with ``heard: <line>`` and appends both to ``DIR/<ID>.jsonl``, one JSON object per
line. ``--resume ID`` continues an existing transcript (and fails, like a real agent, when there is none);
``--session-id ID`` refuses an id that already has one. ``--name NAME`` changes how it introduces itself (an
example of an argument given through ``routing.harnessArgs``). A line ``/exit`` ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _record(transcript: Path, **entry: Any) -> None:
    with transcript.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"t": time.time(), **entry}) + "\n")


def _answer(transcript: Path, text: str) -> None:
    _record(transcript, role="user", text=text)
    reply = f"heard: {text}"
    _record(transcript, role="agent", text=reply)
    print(reply, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shell-agent")
    parser.add_argument("--transcripts", required=True, type=Path)
    ids = parser.add_mutually_exclusive_group(required=True)
    ids.add_argument("--session-id")
    ids.add_argument("--resume")
    parser.add_argument("--name", default="shell-agent")
    parser.add_argument("prompt", nargs="?", default="")
    args = parser.parse_args(argv)

    session_id = args.resume or args.session_id
    if not SESSION_ID.match(session_id):
        parser.error(f"{session_id!r} is not a conversation id")
    transcript = args.transcripts / f"{session_id}.jsonl"
    if args.resume and not transcript.exists():
        print(f"{args.name}: no conversation {session_id} to resume", file=sys.stderr)
        return 1
    if args.session_id and transcript.exists():
        print(f"{args.name}: conversation {session_id} already exists", file=sys.stderr)
        return 1

    if args.resume:
        entries = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line]
        earlier = sum(entry.get("role") == "user" for entry in entries)
        print(f"{args.name}: resumed {session_id} ({earlier} earlier messages)", flush=True)
    else:
        print(f"{args.name}: new conversation {session_id}", flush=True)
    _record(transcript, role="system", text="resumed" if args.resume else "started", cwd=os.getcwd())
    if args.prompt:
        _answer(transcript, args.prompt)
    while line := sys.stdin.readline():  # "" is the end of input; an empty line is "\n"
        text = line.strip()
        if text == "/exit":
            break
        if text:
            _answer(transcript, text)
    _record(transcript, role="system", text="exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
