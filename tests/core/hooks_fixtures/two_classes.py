"""Two LifecycleHooks subclasses, so an entry must name one with `executor`; plus a ready instance and a class
whose constructor raises."""

from __future__ import annotations

from the_loop.hooks.lifecycle import LifecycleHooks


class First(LifecycleHooks):
    def __init__(self, label: str = "first") -> None:
        self.label = label

    def session_spawned(self, ctx: object) -> object:
        return {"announce": False}


class Second(LifecycleHooks):
    def work_item_start(self, ctx: object) -> object:
        return None


class Broken(LifecycleHooks):
    def __init__(self) -> None:
        raise ValueError("cannot build")


INSTANCE = First("ready")
NOT_A_HOOK = object()
