"""A work item's choices, read from its ``work-item-state.json`` (:mod:`the_loop.state.work_item_state`) with what
the operator allows now, and where that file is.

The file lives in the work item's checkout: the one its session record names, else the one the workspace derives for
it (a work item parked at the start gate has a checkout and no session), else ``routing.spawnWorkdir`` when no
workspace root is set. Reading never fails a delivery: an absent or unreadable file is "no choice yet".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop.state.work_item_state import Allowed, WorkItemState, read, relative_path, same_repository, update

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef


def allowed(config: LoadedConfig) -> Allowed:
    """What the operator declares now: the file's values are checked against this on every read."""
    core = config.core
    default = core.routing.tmux.session_per_pr
    if isinstance(default, bool):  # the reference's boolean spelling: true = a session per pull request
        default = "always" if default else "never"
    return Allowed(
        models=frozenset(core.models),
        efforts=frozenset(core.effort),
        repositories=tuple(core.repositories),
        session_per_pr=default,
    )


def checkout_of(config: LoadedConfig, ref: WorkItemRef) -> Path | None:
    """The directory the work item's file lives under, when there is one on this machine."""
    from the_loop.sessions import workspace
    from the_loop.sessions.harness import spawn_workdir

    record = config.registry.load(str(ref))
    own = record.own if record else None
    if own is not None and own.cwd and os.path.isdir(own.cwd):
        return Path(own.cwd)
    found = workspace.checkout_paths(config, ref)
    if found:
        return _inner_checkout(found[0])
    if not workspace.enabled(config):
        return spawn_workdir(config)
    return None


def _inner_checkout(path: Path) -> Path:
    """A clone-strategy item directory holds the checkout one host/owner/repo deeper: the git directory's home."""
    if (path / ".git").exists():
        return path
    for candidate in sorted(path.glob("*/*/*")):
        if (candidate / ".git").exists():
            return candidate
    return path


def state_path(config: LoadedConfig, ref: WorkItemRef, checkout: Path | None = None) -> Path | None:
    """Where the work item's file is (or will be); None when it has no checkout on this machine."""
    base = checkout or checkout_of(config, ref)
    return base / relative_path(ref, config.core.routing.graph.spec_dir) if base is not None else None


def current(config: LoadedConfig, ref: WorkItemRef, checkout: Path | None = None) -> WorkItemState:
    """The work item's validated state ("no choice yet" when it has no file, or no checkout here)."""
    path = state_path(config, ref, checkout)
    return read(path, ref, allowed(config)) if path is not None else WorkItemState(str(ref))


def change(
    config: LoadedConfig,
    ref: WorkItemRef,
    edit: Callable[[WorkItemState], WorkItemState],
    checkout: Path | None = None,
) -> WorkItemState | None:
    """Read-modify-write the work item's file; None when it has no checkout on this machine to write it in."""
    path = state_path(config, ref, checkout)
    if path is None:
        return None
    return update(path, config.state, ref, allowed(config), edit)


def session_per_pr(config: LoadedConfig, ref: WorkItemRef) -> str:
    """How many sessions the work item's pull requests get: its own frozen choice, else the operator's default."""
    return current(config, ref).session_per_pr or allowed(config).session_per_pr


def pull_request_gets_session(config: LoadedConfig, work_item: WorkItemRef, pull_request: WorkItemRef) -> bool:
    """``cross-repository``: only a pull request in another repository has a session of its own; ``always``:
    every one; ``never``: none (its events reach the work item's session)."""
    mode = session_per_pr(config, work_item)
    if mode == "always":
        return True
    if mode == "never":
        return False
    if work_item.key_form:  # a Jira ticket's pull requests are all in "another" repository than the ticket
        mapped = _code_repository(config, work_item)
        return not mapped or same_repository(mapped) != same_repository(pull_request.repository)
    return same_repository(work_item.repository) != same_repository(pull_request.repository)


def _code_repository(config: LoadedConfig, ref: WorkItemRef) -> str:
    provider = config.tickets(ref)
    return (provider.code_repository(ref) or "") if provider is not None else ""
