"""A declared hook with a bug: it raises at every point it handles, so the chain and the dispatcher must go on."""

from __future__ import annotations

from the_loop.hooks.lifecycle import LifecycleHooks


class Buggy(LifecycleHooks):
    def session_spawn(self, ctx: object) -> object:
        raise RuntimeError("hook bug at spawn")

    def input_received(self, ctx: object) -> object:
        raise RuntimeError("hook bug at input")
