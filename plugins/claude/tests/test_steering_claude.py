"""Steering the real Claude Code through its adapter: Escape stops a turn and keeps the conversation, the transcript
tells what each model response spent, and the permission prompt is read off the live pane and answered.

Each runs the pinned Claude Code CLI offline against the fake Anthropic API (its markers: ``[stream N]``,
``[tokens N]``, ``[tool bash: …]``), through the conformance kit's rig.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from the_loop.interfaces import BlockedPrompt, Launch, UsageRead
from the_loop.testing.conformance import Rig, rig_for
from the_loop_claude import transcript, turns
from the_loop_claude.adapter import ClaudeAdapter
from the_loop_claude.conformance import ClaudeKit
from the_loop_claude.pane import POINTER

T = TypeVar("T")
# Claude Code ignores keys that come within about 0.15s of a permission prompt appearing (a guard against a key
# meant for something else answering it): an answer waits this long after the prompt was first seen.
SETTLE = 0.5
STREAMING = "\u2193"  # the spinner's output-token count (``↓ 6 tokens``): the answer has begun arriving


@pytest.fixture
def rig(
    tmp_path: Path, claude_binary: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
) -> Iterator[Rig]:
    yield from rig_for(ClaudeKit(tmp_path, claude_binary), tmp_path, plugin_host, monkeypatch, request)


@pytest.fixture
def manual(
    tmp_path: Path, claude_binary: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
) -> Iterator[Rig]:
    """Claude Code asks before every tool use (``--permission-mode manual``)."""
    kit = ClaudeKit(tmp_path, claude_binary, permission_mode="manual")
    yield from rig_for(kit, tmp_path, plugin_host, monkeypatch, request)


def adapter(rig: Rig) -> ClaudeAdapter:
    return ClaudeAdapter(rig.config)


def launch(rig: Rig) -> Launch:
    own = rig.own()
    return Launch(prompt="", session_id=own.harness_session_id, cwd=Path(own.cwd))


def screen(rig: Rig) -> Callable[[], str]:
    target = rig.own().tmux_target
    return lambda: rig.runner.capture(target)


def send_keys(rig: Rig, keys: Sequence[str]) -> None:
    target = f"={rig.own().tmux_target}:"
    subprocess.run([*rig.runner.command_prefix, "send-keys", "-t", target, *keys], check=True, timeout=10)


def wait(found: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.05)
    return result


def input_box(text: str) -> str:
    """The draft in Claude Code's input box (between the last two rules at the foot of the screen)."""
    lines = text.rstrip().splitlines()
    rules = [index for index, line in enumerate(lines) if line.startswith("\u2500" * 8)]
    box = [line.strip() for line in lines[rules[-2] + 1 : rules[-1]]]
    return "\n".join(box).removeprefix(POINTER).strip()


def interrupt_notes(rig: Rig) -> list[str]:
    """The interrupt notes Claude Code wrote to the conversation's transcript."""
    found = transcript.find(launch(rig).session_id, launch(rig).cwd)
    assert found is not None
    notes = []
    for entry in transcript.entries_after(found, 0, b"interrupted"):
        content = entry.get("message", {}).get("content") if entry.get("type") == "user" else None
        texts = [b.get("text", "") for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        notes += [text for text in texts if text.startswith(turns.INTERRUPTED)]
    return notes


def started(rig: Rig, first: str = "Start here.") -> None:
    assert rig.dispatch(first, spawn=True).status == "spawned"
    rig.wait_received(first)


def test_escape_stops_a_streaming_turn_and_the_next_delivery_is_the_next_turn_with_the_history(rig: Rig) -> None:
    started(rig)
    long = "Tell me a long story. [stream 30]"
    assert rig.dispatch(long).status == "delivered"
    rig.wait_received(long)
    claude, pane = adapter(rig), screen(rig)
    wait(lambda: STREAMING in pane(), "the answer streaming")  # under way: Escape keeps what came of it
    stopped = claude.interrupted_check(launch(rig))
    assert not stopped(pane)  # the turn runs

    sent = time.monotonic()
    send_keys(rig, claude.interrupt_keys())
    wait(lambda: stopped(pane), "the turn stopped", timeout=10)
    assert time.monotonic() - sent < 5
    # What Claude Code records of it (at times a moment after the pane shows the turn over).
    assert wait(lambda: interrupt_notes(rig), "the interrupt noted", timeout=5) == ["[Request interrupted by user]"]
    assert rig.dispatch("After the interrupt.").status == "delivered"
    turn = rig.wait_received("After the interrupt.")

    assert turn[-1] == "After the interrupt."  # a turn of its own, not queued behind the story
    assert "Start here." in turn[0] and turn[1:-1] == [long]  # and the model has the conversation so far
    assert rig.newest().count(long) == 1  # the interrupted request was not retried


def test_escape_before_the_answer_begins_puts_the_message_back_as_a_draft_that_the_next_delivery_carries(
    rig: Rig,
) -> None:
    """Claude Code then writes nothing to the transcript: the pane says the turn is over."""
    started(rig)
    waiting = "Think first. [slow 20]"
    assert rig.dispatch(waiting).status == "delivered"
    rig.wait_received(waiting)  # the model has it and answers nothing yet
    claude, pane = adapter(rig), screen(rig)
    stopped = claude.interrupted_check(launch(rig))

    send_keys(rig, claude.interrupt_keys())

    wait(lambda: stopped(pane), "the turn stopped", timeout=10)
    wait(lambda: input_box(pane()) == waiting or None, "the message back in the input box", timeout=10)
    assert rig.dispatch("After the interrupt.").status == "delivered"
    turn = rig.wait_received("After the interrupt.")
    # The draft is kept ahead of the delivery, as a human's is (on a line of its own, at times after a blank one).
    assert turn[-1].startswith(waiting) and turn[-1].endswith("\nAfter the interrupt.")
    assert not turn[-1][len(waiting) : -len("After the interrupt.")].strip()
    assert interrupt_notes(rig) == []  # the transcript never said the turn stopped: the pane did


def test_a_message_queued_during_the_turn_goes_to_the_model_as_soon_as_escape_stops_the_turn(rig: Rig) -> None:
    started(rig)
    long = "Tell me a long story. [stream 30]"
    assert rig.dispatch(long).status == "delivered"
    rig.wait_received(long)
    assert rig.dispatch("Queued while busy.").status == "delivered"
    wait(lambda: "Queued" in screen(rig)() and STREAMING in screen(rig)(), "the message queued, the answer streaming")
    claude = adapter(rig)
    stopped = claude.interrupted_check(launch(rig))

    send_keys(rig, claude.interrupt_keys())

    wait(lambda: stopped(screen(rig)), "the turn stopped", timeout=10)
    turn = rig.wait_received("Queued while busy.", timeout=10)  # nobody submitted it again
    assert turn[-2:] == [long, "Queued while busy."]


def test_read_usage_counts_each_model_response_once_with_its_tokens_and_model(rig: Rig) -> None:
    started(rig, "Start here. [tokens 11]")
    claude, session = adapter(rig), launch(rig)

    def read(cursor: str, count: int) -> UsageRead | None:
        found = claude.read_usage(session.session_id, session.cwd, cursor)
        return found if found is not None and len(found.usage) >= count else None

    first = wait(lambda: read("", 1), "the first answer's usage")
    assert rig.dispatch("Run it. [tool bash: true] [tokens 3000]").status == "delivered"
    tool = wait(lambda: read(first.cursor, 2), "the tool turn's usage")
    # Delivered once the tool turn is over: a message sent while a tool runs joins the running turn instead.
    assert rig.dispatch("The last one. [tokens 222]").status == "delivered"
    last = wait(lambda: read(tool.cursor, 1), "the last answer's usage")

    # The tool turn's first answer is two transcript lines (a text and the tool use), its second one line.
    assert [[u.output_tokens for u in r.usage] for r in (first, tool, last)] == [[11], [3000, 3000], [222]]
    spent = (*first.usage, *tool.usage, *last.usage)
    assert all(u.input_tokens == 10 and u.cache_read_tokens == u.cache_write_tokens == 0 for u in spent)
    requested = {r["body"]["model"] for r in rig.kit.api.requests() if r["body"].get("tools")}
    assert {u.model for u in spent} == requested
    assert read(last.cursor, 0) == UsageRead((), last.cursor)  # nothing new
    assert read("", 0) == UsageRead(spent, last.cursor)  # read whole, the same


def test_the_permission_prompt_is_recognised_on_the_pane_and_yes_runs_the_tool_and_no_does_not(manual: Rig) -> None:
    started(manual)
    claude, pane, cwd = adapter(manual), screen(manual), Path(manual.own().cwd)

    def blocked() -> BlockedPrompt | None:
        return claude.blocked_prompt(pane())

    assert blocked() is None  # idle
    assert manual.dispatch("Make a file. [tool bash: echo yes > approved]").status == "delivered"
    prompt = wait(blocked, "the permission prompt")
    assert "echo yes > approved" in prompt.text and prompt.text.endswith("Do you want to proceed?")
    yes = prompt.option("yes")
    assert yes is not None and yes.label == "Yes" and yes.keys == ("1",)

    time.sleep(SETTLE)
    send_keys(manual, yes.keys)

    wait((cwd / "approved").exists, "the approved command ran")
    wait(lambda: _tool_results(manual) == [False], "its result reached the model")
    wait(lambda: blocked() is None, "the prompt gone")

    assert manual.dispatch("Another. [tool bash: echo yes > refused]").status == "delivered"
    prompt = wait(blocked, "the second permission prompt")
    no = prompt.option("no")
    assert no is not None and no.label == "No" and no.keys == ("4",)
    stopped = claude.interrupted_check(launch(manual))
    time.sleep(SETTLE)

    send_keys(manual, no.keys)

    wait(lambda: stopped(pane), "the refused turn ended", timeout=10)
    wait(lambda: blocked() is None, "the prompt gone")
    assert not (cwd / "refused").exists()
    assert _tool_results(manual) == [False]  # the refusal ends the turn: the model is not asked again


def _tool_results(rig: Rig) -> list[bool]:
    """Per conversation request that answers a tool use, whether its result was an error."""
    flags = []
    for request in rig.kit.api.requests():
        messages = request["body"].get("messages") or []
        content = messages[-1].get("content") if messages and request["body"].get("tools") else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                flags.append(bool(block.get("is_error")))
    return flags
