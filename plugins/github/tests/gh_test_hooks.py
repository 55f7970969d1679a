"""A test plugin for spawned CLI processes (``THE_LOOP_EXTRA_PLUGINS=gh_test_hooks``): records each
``waiting_for_input`` context it is asked with to ``$GH_TEST_HOOK_LOG`` and, when ``$GH_TEST_REWORD`` is set,
rewords the question with it."""

from __future__ import annotations

import json
import os
from typing import Any

from the_loop import hookimpl


@hookimpl
def loop_waiting_for_input(ctx: Any) -> dict[str, str] | None:
    with open(os.environ["GH_TEST_HOOK_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"work_item": ctx.work_item.ref, "kind": ctx.kind, "question": ctx.question}) + "\n")
    reword = os.environ.get("GH_TEST_REWORD")
    return {"question": reword} if reword else None
