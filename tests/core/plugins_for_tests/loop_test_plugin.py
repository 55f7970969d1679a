"""A test plugin: an ``/echo`` webhook route, a ``fake`` poll source and a tmux-hostable ``fake-harness``.

Behaviour is steered by the environment the daemon inherits:

- ``FAKE_POLL_MODE``: ``ok`` (default) · ``degraded`` (one failed scope) · ``raise`` (the source raises) ·
  ``slow`` (each cycle runs until the poller is told to stop).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from the_loop import hookimpl
from the_loop.interfaces import (
    Capabilities,
    HarnessAdapter,
    Launch,
    PollSource,
    ServiceContext,
    WebhookIngress,
    WebhookResponse,
)


class EchoIngress(WebhookIngress):
    """Answers 202 with what it received; ``X-Fail: raise`` makes it raise (an ingress bug)."""

    name = "echo"
    path = "/echo"

    def handle(self, headers: Mapping[str, str], body: bytes) -> WebhookResponse:
        if headers.get("x-fail") == "raise":
            raise RuntimeError("echo ingress bug")
        return WebhookResponse(202, {"received": len(body), "event": headers.get("x-test-event", "")})


class FakePollSource(PollSource):
    name = "fake"

    def poll_once(self, context: ServiceContext) -> Mapping[str, Any]:
        mode = os.environ.get("FAKE_POLL_MODE", "ok")
        if mode == "raise":
            raise RuntimeError("fake source is down")
        if mode == "slow":
            while not context.should_stop():
                time.sleep(0.05)
            return {"itemsSeen": 1, "scopesPolled": 1, "interrupted": True}
        failed = [{"scope": "octo/broken", "error": "404 Not Found", "permanent": True}] if mode == "degraded" else []
        return {
            "itemsSeen": 3,
            "spawns": 1,
            "commentsForwarded": 2,
            "closures": 1,
            "scopesPolled": 2,
            "errors": len(failed),
            "scopesFailed": failed,
            "scopesSkipped": [],
        }


class FakeHarness(HarnessAdapter):
    name = "fake-harness"
    capabilities = Capabilities(tmux_hostable=True, preassigned_session_id=True, can_resume=True)

    def fresh_argv(self, launch: Launch) -> list[str]:
        return ["fake-harness", "--session-id", launch.session_id]

    def resume_argv(self, launch: Launch) -> list[str]:
        return ["fake-harness", "--resume", launch.session_id]


@hookimpl
def loop_register_ingresses(config: object) -> list[Any]:
    return [EchoIngress(), FakePollSource()]


@hookimpl
def loop_register_harnesses() -> list[type[HarnessAdapter]]:
    return [FakeHarness]
