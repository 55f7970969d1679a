"""The fake Anthropic API's markers that drive Claude Code into a situation offline: a slowly streamed answer, a
Bash tool use and its follow-up, and a known token count; and the oracle (``conversation_turns``) leaving out what
no human wrote."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.testing.fake_anthropic import FakeAnthropic, conversation_turns

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(tmp_path / "api.jsonl").start()
    yield fake
    fake.stop()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def post(api: FakeAnthropic, messages: list[dict[str, Any]], *, stream: bool = True, tools: bool = True) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    body = {"model": "claude-test", "messages": messages, "stream": stream, **({"tools": TOOLS} if tools else {})}
    connection.request("POST", "/v1/messages", json.dumps(body), {"x-api-key": "k"})
    return connection.getresponse()


def events(response: Any) -> Iterator[tuple[float, dict[str, Any]]]:
    """Each server-sent event's data with the time it arrived."""
    for raw in response:
        if raw.startswith(b"data: "):
            yield time.monotonic(), json.loads(raw[6:])


def message(response: Any) -> dict[str, Any]:
    """The streamed events folded into the message they make."""
    result: dict[str, Any] = {}
    for _, event in events(response):
        kind = event["type"]
        if kind == "message_start":
            result = event["message"]
        elif kind == "content_block_start":
            result["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = result["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                block["partial"] = block.get("partial", "") + delta["partial_json"]
        elif kind == "message_delta":
            result.update(event["delta"])
            result["usage"] = {**result["usage"], **event["usage"]}
    for block in result["content"]:
        if "partial" in block:
            block["input"] = json.loads(block.pop("partial"))
    return result


def test_a_tool_marker_asks_for_bash_and_the_tool_result_ends_the_turn(api: FakeAnthropic) -> None:
    asked = message(post(api, [user("please [tool bash: touch made] [tokens 40]")]))

    assert asked["stop_reason"] == "tool_use"
    text, use = asked["content"]
    assert text == {"type": "text", "text": "running: touch made"}
    assert use["type"] == "tool_use" and use["name"] == "Bash" and use["input"]["command"] == "touch made"
    assert asked["usage"]["output_tokens"] == 40

    history = [user("please [tool bash: touch made] [tokens 40]"), {"role": "assistant", "content": [text, use]}]
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok", "is_error": False}
    done = message(post(api, [*history, {"role": "user", "content": [result]}]))
    failed = {"role": "user", "content": [result | {"is_error": True}]}
    refused = json.loads(post(api, [*history, failed], stream=False).read())

    assert done["stop_reason"] == "end_turn" and done["content"] == [{"type": "text", "text": "done: touch made"}]
    assert done["usage"]["output_tokens"] == 40  # the marker holds for the whole turn
    assert refused["content"] == [{"type": "text", "text": "refused: touch made"}]


def test_a_message_beside_a_tool_result_is_answered_as_a_message(api: FakeAnthropic) -> None:
    """What Claude Code sends when a message arrives while a tool runs: the result and the message together."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "true"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": False}
    beside = {"type": "text", "text": "The user sent a new message while you were working:\nAlso this. [tokens 5]"}
    messages = [user("go [tool bash: true]"), {"role": "assistant", "content": [use]}]

    answer = message(post(api, [*messages, {"role": "user", "content": [result, beside]}]))

    assert answer["content"][0]["text"].startswith("ack: The user sent a new message")
    assert answer["usage"]["output_tokens"] == 5


def test_the_tokens_marker_sets_the_output_tokens_and_the_input_stays_small(api: FakeAnthropic) -> None:
    streamed = message(post(api, [user("count me [tokens 1234]")]))
    plain = json.loads(post(api, [user("count me [tokens 77]")], stream=False).read())
    default = message(post(api, [user("no marker here")]))

    assert streamed["usage"]["output_tokens"] == 1234 and streamed["usage"]["input_tokens"] == 10
    assert plain["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 77,
    }
    assert default["usage"]["output_tokens"] == len("ack: no marker here") // 4


def test_a_stream_marker_starts_at_once_and_spreads_the_text_over_its_seconds(api: FakeAnthropic) -> None:
    started = time.monotonic()
    arrivals = [(at - started, event) for at, event in events(post(api, [user("take it slow [stream 1.5]")]))]

    first_at, first = arrivals[0]
    deltas = [at for at, event in arrivals if event["type"] == "content_block_delta"]
    assert first["type"] == "message_start" and first_at < 0.5
    assert len(deltas) >= 5 and 1.3 < deltas[-1] < 3.0
    assert max(b - a for a, b in itertools.pairwise(deltas)) < 0.6  # paced, not held back and dumped
    text = "".join(e["delta"]["text"] for _, e in arrivals if e["type"] == "content_block_delta")
    assert text.startswith("ack: take it slow [stream 1.5]")


def test_a_client_that_hangs_up_mid_stream_ends_the_answer_quietly(
    api: FakeAnthropic, capfd: pytest.CaptureFixture[str]
) -> None:
    """What Claude Code does on Escape: the server's next write fails, and no traceback is printed for it."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as sock:
        body = json.dumps({"model": "m", "messages": [user("[stream 2]")], "stream": True, "tools": TOOLS}).encode()
        sock.sendall(f"POST /v1/messages HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while b"message_start" not in received:
            received += sock.recv(65536)
    time.sleep(1.0)  # a few paced writes into the closed connection

    assert message(post(api, [user("still there?")]))["content"][0]["text"] == "ack: still there?"
    assert "Traceback" not in capfd.readouterr().err


def test_side_requests_ignore_the_markers(api: FakeAnthropic) -> None:
    side = post(api, [user("title this [tool bash: rm -rf x] [tokens 9]")], stream=False, tools=False)
    answer = json.loads(side.read())
    assert answer["stop_reason"] == "end_turn" and answer["content"][0]["text"].startswith("ack: ")
    assert answer["usage"]["output_tokens"] != 9


def test_conversation_turns_leave_out_tool_results_and_claude_codes_interrupt_note() -> None:
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    note = {"type": "text", "text": "[Request interrupted by user]\n"}
    messages = [
        user("first [tool bash: true]"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [{"type": "text", "text": "done: true"}]},
        user("[stream 30]"),
        {"role": "assistant", "content": [{"type": "text", "text": "ack: [str"}]},
        {"role": "user", "content": [note, {"type": "text", "text": "after the interrupt"}]},
    ]
    entry = {"path": "/v1/messages", "body": {"tools": TOOLS, "messages": messages}}

    assert conversation_turns([entry]) == [["first [tool bash: true]", "[stream 30]", "after the interrupt"]]
