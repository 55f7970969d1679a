"""Core's side of the harness contract: find the adapter, check what it can do, build a launch safely."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop.interfaces import Finding, HarnessAdapter, Launch

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class HarnessError(Exception):
    """A harness that cannot be used for this spawn; the message names it and says why."""


def valid_session_id(session_id: str) -> bool:
    """A conversation id safe to put in an argv (a ``--flag`` can never pose as one)."""
    return bool(SESSION_ID.match(session_id))


def adapter_for(name: str, config: LoadedConfig) -> HarnessAdapter:
    """The installed adapter called ``name``, ready for a tmux-hosted session, or :class:`HarnessError`."""
    adapters = config.host.harnesses()
    cls = adapters.get(name)
    if cls is None:
        installed = ", ".join(sorted(adapters)) or "none"
        raise HarnessError(f"harness {name!r} is not installed (installed: {installed})")
    if not cls.capabilities.tmux_hostable or not cls.capabilities.preassigned_session_id:
        raise HarnessError(f"harness {name!r} cannot be hosted in tmux: it has no pre-assignable session id")
    return cls(config)


def harness_problems(config: LoadedConfig) -> list[str]:
    """Decision 8: a routing service needs ``routing.defaultHarness`` to name an installed tmux-hostable adapter."""
    name = config.core.routing.default_harness
    adapters = config.host.harnesses()
    adapter = adapters.get(name)
    hostable = sorted(n for n, cls in adapters.items() if cls.capabilities.tmux_hostable)
    choices = ", ".join(hostable) or "none installed"
    need = f"sessions need a tmux-hostable one ({choices}; e.g. pip install 'the-loop[claude]')"
    if adapter is None:
        installed = ", ".join(sorted(adapters)) or "none"
        return [
            f"routing.defaultHarness: {name!r} is not an installed harness adapter (installed: {installed}); {need}"
        ]
    if not adapter.capabilities.tmux_hostable:
        return [
            f"routing.defaultHarness: {name!r} cannot be hosted in tmux (it has no pre-assignable session id); {need}"
        ]
    return []


def harness_findings(config: LoadedConfig) -> list[Finding]:
    """Whether ``routing.defaultHarness`` can run sessions on this machine: an installed, tmux-hostable adapter
    (:func:`harness_problems`) whose own :meth:`~the_loop.interfaces.HarnessAdapter.problems` find nothing (its
    program installed and starting). Asked by ``the-loop init`` and the ``doctor`` commands."""
    problems = harness_problems(config)
    if problems:
        remedy = "install it, or name an installed one (routing.defaultHarness; init --harness NAME)"
        return [Finding(problem, remedy) for problem in problems]
    return list(config.host.harnesses()[config.core.routing.default_harness](config).problems())


def harness_environ(config: LoadedConfig, adapter: HarnessAdapter) -> dict[str, str]:
    """The environment a pane of ``adapter`` would get from this process: ours, less every name core strips from
    a harness (the built-in credential names, the config's secrets, ``env.file``'s names not passed through by
    ``env.sessionPassthrough``), plus the adapter's :meth:`~the_loop.interfaces.HarnessAdapter.session_env`. For an
    adapter that asks its provider something on the session's behalf (``models check``): it then uses the
    credentials and endpoint the session would, and no other."""
    import os

    from the_loop.config import session_withheld_env
    from the_loop.sessions.tmux import CREDENTIAL_ENV_NAMES

    withheld = {*CREDENTIAL_ENV_NAMES, *session_withheld_env(config)}
    env = {name: value for name, value in os.environ.items() if name not in withheld}
    env.update({name: value for name, value in adapter.session_env().items() if name not in withheld})
    return env


def launch_argv(adapter: HarnessAdapter, launch: Launch, *, resume: bool) -> list[str]:
    """The adapter's argv, checked: its binary is on PATH and the prompt is its last element."""
    if not valid_session_id(launch.session_id) or not adapter.accepts_session_id(launch.session_id):
        kind = "recorded session id" if resume else "session id"
        raise HarnessError(f"{kind} {launch.session_id!r} is not a conversation id {adapter.name} accepts")
    argv = adapter.resume_argv(launch) if resume else adapter.fresh_argv(launch)
    if not argv or shutil.which(argv[0]) is None:
        binary = argv[0] if argv else "(none)"
        raise HarnessError(f"harness CLI {binary!r} not found on PATH")
    return argv


def spawn_workdir(config: LoadedConfig) -> Path:
    """``routing.spawnWorkdir``, a relative one anchored like ``state.root`` (beside the config file)."""
    from the_loop.config import state_root_for

    return state_root_for(config.ref.path, config.core.routing.spawn_workdir)
