"""Reading Claude Code's transcripts for steering: the usage of each model response (counted once, read
incrementally, a partial line left, a replaced file read again) and whether an interrupted turn has stopped (the
interrupt's note, the turn's own end, or the pane reading input), on synthetic transcripts shaped as the pinned
Claude Code (2.1.332) writes them: compact JSON, one object a line, one assistant line per content block of a model
response, each carrying the whole message's id, model and usage."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from the_loop.interfaces import Launch, Usage, UsageRead
from the_loop_claude import transcript, usage
from the_loop_claude.adapter import ClaudeAdapter


def line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def prompt(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}, "uuid": str(uuid.uuid4())}


def tool_result(tool_use_id: str, is_error: bool = False) -> dict[str, Any]:
    block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": "ok", "is_error": is_error}
    return {"type": "user", "message": {"role": "user", "content": [block]}, "uuid": str(uuid.uuid4())}


def interrupted(for_tool: bool = False) -> dict[str, Any]:
    text = "[Request interrupted by user for tool use]" if for_tool else "[Request interrupted by user]"
    content = [{"type": "text", "text": text}]
    return {"type": "user", "message": {"role": "user", "content": content}, "rowSource": "harness"}


def turn_end() -> dict[str, Any]:
    return {"type": "system", "subtype": "turn_duration", "durationMs": 570, "isMeta": False}


def bookkeeping() -> list[dict[str, Any]]:
    """The lines Claude Code writes around a turn that are no part of it."""
    return [
        {"type": "last-prompt", "lastPrompt": "x"},
        {"type": "mode", "mode": "normal"},
        {"type": "permission-mode", "permissionMode": "manual"},
        {"type": "api-request-blob", "message": [{"type": "text", "text": "a system prompt " * 50}]},
    ]


def response(
    blocks: int = 1,
    *,
    output: int = 5,
    input: int = 10,
    cache_read: int = 0,
    cache_write: int = 0,
    model: str = "claude-opus-5-5",
    stop_reason: str | None = "end_turn",
    message_id: str | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    """The assistant lines of one model response of ``blocks`` content blocks: the same id, model and usage."""
    message_id = message_id or f"msg_{uuid.uuid4().hex[:24]}"
    usage = {
        "input_tokens": input,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": "standard",
    }
    return [
        {
            "type": "assistant",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": f"block {index}"}],
                "stop_reason": stop_reason,
                "usage": usage,
            },
            "apiBlockIndex": index,
            **extra,
        }
        for index in range(blocks)
    ]


def api_error() -> dict[str, Any]:
    message = {
        "id": str(uuid.uuid4()),
        "model": "<synthetic>",
        "role": "assistant",
        "content": [{"type": "text", "text": "API Error: 400 fake failure"}],
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return {"type": "assistant", "message": message, "isApiErrorMessage": True}


def append(path: Path, *entries: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Append ``entries`` (an entry or a list of them) to the transcript at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        for item in entries:
            for entry in item if isinstance(item, list) else [item]:
                handle.write(line(entry))


# ---------------------------------------------------------------------------------------------------- fixtures

SESSION = "0b3e3f52-8a4c-4c1e-9d0f-2f4a1f7d9b10"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def path(home: Path, work: Path) -> Path:
    """Where Claude Code keeps conversation ``SESSION`` of ``work`` under the test's home."""
    return home / ".claude" / "projects" / transcript.project_names(work)[0] / f"{SESSION}.jsonl"


@pytest.fixture
def adapter(claude_config: Callable[..., Any]) -> ClaudeAdapter:
    return ClaudeAdapter(claude_config())


def outputs(read: UsageRead | None) -> list[int]:
    assert read is not None
    return [u.output_tokens for u in read.usage]


# ------------------------------------------------------------------------------------------------------- usage


def test_each_response_counts_once_however_many_block_lines_it_wrote(path: Path) -> None:
    append(path, prompt("go"), response(3, output=700, input=12, cache_read=40, cache_write=8), tool_result("t1"))
    append(path, response(1, output=30), turn_end(), bookkeeping())

    read = usage.read(path, "")

    assert read is not None
    assert read.usage == (
        Usage(input_tokens=12, output_tokens=700, cache_read_tokens=40, cache_write_tokens=8, model="claude-opus-5-5"),
        Usage(input_tokens=10, output_tokens=30, model="claude-opus-5-5"),
    )
    assert read.usage[0].tokens == 760
    assert usage.read(path, read.cursor) == UsageRead((), read.cursor)  # nothing new: nothing counted again


def test_a_read_goes_on_from_its_cursor_and_a_response_split_across_two_reads_counts_once(path: Path) -> None:
    first, second = response(2, output=100), response(1, output=7)
    append(path, prompt("go"), first[0])
    read = usage.read(path, "")
    assert outputs(read) == [100]

    append(path, first[1], tool_result("t1"), second)  # the response's second block line, after the read
    again = usage.read(path, read.cursor)  # type: ignore[union-attr]

    assert outputs(again) == [7]


def test_a_line_still_being_written_is_left_for_the_next_read(path: Path) -> None:
    whole, [partial] = line(response(1, output=1)[0]), response(1, output=2)
    append(path, prompt("go"))
    with path.open("ab") as handle:
        handle.write(whole + line(partial)[:-40])
    read = usage.read(path, "")
    assert outputs(read) == [1]
    assert read is not None and int(read.cursor.split(":")[0]) == path.stat().st_size - len(line(partial)) + 40

    with path.open("ab") as handle:
        handle.write(line(partial)[-40:])

    assert outputs(usage.read(path, read.cursor)) == [2]


def test_a_transcript_shorter_than_the_cursor_or_rewritten_is_read_again_from_its_start(path: Path) -> None:
    append(path, prompt("go"), response(1, output=50), response(1, output=60))
    read = usage.read(path, "")
    assert read is not None
    path.write_bytes(b"")
    append(path, prompt("again"), response(1, output=9))  # replaced by a shorter one

    assert outputs(usage.read(path, read.cursor)) == [9]

    before = usage.read(path, "")
    assert before is not None
    path.write_bytes(line(prompt("a longer first prompt " * 20)) + line(response(1, output=4)[0]))  # cursor mid-line
    assert outputs(usage.read(path, before.cursor)) == [4]


@pytest.mark.parametrize("cursor", ["", "garbage", "-5:msg", "12x:"])
def test_an_empty_or_unreadable_cursor_reads_from_the_start(path: Path, cursor: str) -> None:
    append(path, prompt("go"), response(1, output=3))
    assert outputs(usage.read(path, cursor)) == [3]


def test_each_response_names_its_model_and_api_errors_and_other_lines_count_nothing(path: Path) -> None:
    append(path, prompt("go"), response(1, output=1, model="claude-opus-5-5"), api_error())
    append(path, prompt("again"), response(2, output=2, model="claude-haiku-4-5-20251001"), bookkeeping())
    append(path, response(1, output=3, stop_reason=None, isAbortedMidStream=True), interrupted())

    read = usage.read(path, "")

    assert read is not None
    assert [(u.model, u.output_tokens) for u in read.usage] == [
        ("claude-opus-5-5", 1),
        ("claude-haiku-4-5-20251001", 2),
        ("claude-opus-5-5", 3),  # cut short by Escape: what it had reported when it began
    ]


def test_the_adapter_reads_the_conversations_transcript_and_none_before_there_is_one(
    adapter: ClaudeAdapter, path: Path, work: Path
) -> None:
    assert adapter.read_usage(SESSION, work, "") is None
    append(path, prompt("go"), response(2, output=11))

    read = adapter.read_usage(SESSION, work, "")

    assert outputs(read) == [11]
    assert adapter.read_usage(SESSION, work, read.cursor).usage == ()  # type: ignore[union-attr]


def test_reading_an_appended_part_reads_only_that_part(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    append(path, prompt("go"), [entry for _ in range(200) for entry in response(2, output=1)])
    read = usage.read(path, "")
    assert read is not None and len(read.usage) == 200
    append(path, response(1, output=5))
    read_sizes: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        handle = real_open(self, *args, **kwargs)
        real_read = handle.read
        handle.read = lambda n=-1: (data := real_read(n), read_sizes.append(len(data)))[0]  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(Path, "open", counting_open)
    assert outputs(usage.read(path, read.cursor)) == [5]
    assert sum(read_sizes) <= len(line(response(1, output=5)[0])) + 1


# ----------------------------------------------------------------------------------------------- interrupts


def screen(name: str) -> Callable[[], str]:
    return lambda: (Path(__file__).parent / "screens" / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("for_tool", [False, True], ids=["answering", "in-a-tool"])
def test_the_interrupted_check_waits_for_the_interrupts_note_past_where_it_was_made(
    adapter: ClaudeAdapter, path: Path, work: Path, for_tool: bool
) -> None:
    append(path, prompt("first"), response(1), turn_end(), interrupted(), prompt("a long one"))  # an old note
    check = adapter.interrupted_check(Launch(prompt="", session_id=SESSION, cwd=work))
    running = screen("running.txt")

    assert check(running) is False
    append(path, response(1, output=1, stop_reason=None, isAbortedMidStream=True))
    assert check(running) is False
    append(path, interrupted(for_tool))
    assert check(running) is True


@pytest.mark.parametrize("end", [turn_end(), api_error()], ids=["finished", "failed"])
def test_a_turn_that_ends_otherwise_before_the_interrupt_lands_also_ends_the_wait(
    adapter: ClaudeAdapter, path: Path, work: Path, end: dict[str, Any]
) -> None:
    append(path, prompt("a long one"))
    check = adapter.interrupted_check(Launch(prompt="", session_id=SESSION, cwd=work))
    append(path, response(1), end)
    assert check(screen("running.txt")) is True


@pytest.mark.parametrize("name", ["idle.txt", "escaped-before-the-answer.txt"])
def test_a_pane_reading_input_ends_the_wait_when_the_transcript_says_nothing(
    adapter: ClaudeAdapter, path: Path, work: Path, name: str
) -> None:
    """Nothing was running, or Escape came before the answer began and the prompt went back to the input box."""
    launch = Launch(prompt="", session_id=SESSION, cwd=work)
    assert adapter.interrupted_check(launch)(screen(name)) is True  # no transcript yet
    append(path, prompt("first"), response(1), turn_end(), bookkeeping(), prompt("a long one"))
    check = adapter.interrupted_check(launch)
    assert check(screen("running.txt")) is False
    assert check(screen(name)) is True


def test_claude_interrupts_with_one_escape_and_declares_its_steering() -> None:
    assert ClaudeAdapter.capabilities.can_interrupt
    assert ClaudeAdapter.capabilities.reports_usage
    assert ClaudeAdapter.capabilities.recognises_prompts
    assert ClaudeAdapter.interrupt_keys(None) == ("Escape",)  # type: ignore[arg-type]
