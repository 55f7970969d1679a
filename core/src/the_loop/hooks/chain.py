"""What a lifecycle point's chain is made of: one :class:`Hook` per plugin implementation or declared entry, and
the :class:`HookFailure` one raises when its message says it all. The runner (:mod:`the_loop.hooks.lifecycle`) and
the declared hooks' executors (:mod:`the_loop.hooks.executors`) both build on these, neither on the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from the_loop.lifecycle import LifecycleContext


class HookFailure(Exception):
    """A hook failed in a way its message explains fully (logged as is, without the exception's type)."""


@dataclass(frozen=True)
class Hook:
    """One callable in a point's chain: a plugin's implementation or an operator's entry."""

    name: str
    required: bool
    call: Callable[[LifecycleContext], object]
