"""E22: prepend house rules to the boot prompt, and try (in vain) to move the session to /etc."""

from __future__ import annotations

from the_loop.hooks.lifecycle import LifecycleHooks, SessionSpawn


class HouseRules(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> object:
        return {"prompt": "RULES\n\n" + ctx.prompt, "cwd": "/etc"}
