"""A declared hook for tests: records every call (point and context) to a JSONL log and answers what ``with``
says (``answers: {point: answer}``). Used as a ``module`` entry, a ``path`` entry and behind a HookServer."""

from __future__ import annotations

import json
from typing import Any

from the_loop.hooks.lifecycle import LifecycleContext, LifecycleHooks


class Recorder(LifecycleHooks):
    def __init__(self, log: str, answers: dict[str, Any] | None = None) -> None:
        self.log = log
        self.answers = answers or {}

    def _answer(self, ctx: LifecycleContext) -> object:
        with open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"point": ctx.point, "ctx": ctx.to_params()}) + "\n")
        return self.answers.get(ctx.point)

    def work_item_start(self, ctx: Any) -> object:
        return self._answer(ctx)

    def session_spawn(self, ctx: Any) -> object:
        return self._answer(ctx)

    def session_spawned(self, ctx: Any) -> object:
        return self._answer(ctx)

    def waiting_for_input(self, ctx: Any) -> object:
        return self._answer(ctx)

    def input_received(self, ctx: Any) -> object:
        return self._answer(ctx)

    def phase_changed(self, ctx: Any) -> object:
        return self._answer(ctx)

    def work_item_complete(self, ctx: Any) -> object:
        return self._answer(ctx)
