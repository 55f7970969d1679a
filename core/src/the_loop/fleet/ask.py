"""One view of the fleet: the gateway asks every worker over NATS request-reply, each answer stamped with its name.

A worker serves ``loop.ask.<name>`` (:func:`serve`): a request is a JSON object (``{"what": "sessions"}``,
``{"what": "events", …}``, ``{"what": "status"}``), the answer is JSON, computed off the connection's loop so a
slow answer never stalls the worker's leases. :func:`ask` asks the named workers at once and returns every answer
— a worker that did not answer within the timeout is named with ``None``, so a silent worker is never an empty
success. Answers are capped (``MAX_ANSWER``) so one worker cannot flood the gateway.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from the_loop.fleet.connection import Nats

PREFIX = "loop.ask"
MAX_ANSWER = 8 * 1024 * 1024


def serve(nats: Nats, name: str, answer: Callable[[dict[str, Any]], Any]) -> None:
    """Answer requests on ``loop.ask.<name>`` with ``answer(request)`` for as long as the connection lives."""

    async def handler(message: Any) -> None:
        try:
            request = json.loads(message.data or b"{}")
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            loop = asyncio.get_running_loop()
            reply: Any = {"ok": True, "worker": name, "answer": await loop.run_in_executor(None, answer, request)}
        except Exception as exc:
            reply = {"ok": False, "worker": name, "error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(reply, default=str).encode()
        if len(data) > MAX_ANSWER:
            data = json.dumps({"ok": False, "worker": name, "error": "answer too large"}).encode()
        await message.respond(data)

    nats.run(nats.client.subscribe(f"{PREFIX}.{name}", cb=handler))


def ask(nats: Nats, names: Sequence[str], request: dict[str, Any], timeout: float) -> dict[str, dict[str, Any] | None]:
    """Each named worker's reply (``{"ok", "worker", "answer" | "error"}``), or None for one that stayed silent."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    data = json.dumps(request).encode()

    async def one(name: str) -> dict[str, Any] | None:
        try:
            message = await nats.client.request(f"{PREFIX}.{name}", data, timeout=timeout)
        except (TimeoutError, NatsTimeout, NoRespondersError):
            return None
        try:
            reply = json.loads(message.data)
        except ValueError:
            return {"ok": False, "worker": name, "error": "the answer is not JSON"}
        if not isinstance(reply, dict) or reply.get("worker") != name:
            return {"ok": False, "worker": name, "error": "the answer is not stamped with the worker's name"}
        return reply

    async def every() -> list[dict[str, Any] | None]:
        return list(await asyncio.gather(*(one(name) for name in names)))

    answers = nats.run(every(), timeout=timeout + nats.timeout * 2)
    return dict(zip(names, answers, strict=True))
