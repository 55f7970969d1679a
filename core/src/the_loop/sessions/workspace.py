"""Workspace checkouts: where a work item's session runs.

``routing.workspace.root`` empty → every session runs in ``routing.spawnWorkdir``. Set → each work item of a
repository gets a checkout of its own under the root:

- strategy ``worktree`` (default): one shared clone per repository, ``<root>/<host>/<owner>/<repo>``, fetched before
  each new checkout, and one git worktree per work item, ``<root>/.worktrees/<host>/<owner>/<repo>/<slug>``, detached
  at ``origin/<default branch>`` (the harness makes its own branch);
- strategy ``clone``: a full clone per work item, ``<root>/.work-items/<slug>/<host>/<owner>/<repo>``.

An existing checkout is reused. Key-form refs (Jira) name no repository: their tracker's provider may map one
(``TicketProvider.code_repository``), else their sessions run in ``spawnWorkdir``.
Every path part comes from a ref and is checked before it reaches a path or an argv. Removing a checkout never raises
and never touches the shared clone, which serves every work item of the repository.

git runs as ``subprocess.run([...], timeout=…)``, no shell, with prompts turned off (a clone that would ask for a
password fails instead of hanging a dispatch).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.refs import WorkItemRef

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["Checkout", "WorkspaceError", "checkout_paths", "clone_url", "enabled", "prepare", "remove", "spawn_cwd"]

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
LOCAL_GIT_TIMEOUT = 60.0  # worktree add/remove/prune, rev-parse: no network involved


class WorkspaceError(Exception):
    """A checkout that could not be made. ``transient`` is false when retrying cannot help (a bad path part)."""

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Checkout:
    """Where a session runs: a checkout under the workspace root, or ``spawnWorkdir`` (strategy ``workdir``)."""

    path: Path
    strategy: str
    branch: str = ""  # the branch checked out; "" when detached at ``base``
    base: str = ""
    reused: bool = False
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class _Repo:
    host: str
    owner: str
    repo: str


def enabled(config: LoadedConfig) -> bool:
    return bool(config.core.routing.workspace.root)


def workspace_root(config: LoadedConfig) -> Path:
    """``routing.workspace.root``, anchored like ``state.root`` (``~`` expanded, a relative one beside the config)."""
    from the_loop.config import state_root_for

    return state_root_for(config.ref.path, config.core.routing.workspace.root)


def _part(value: str, what: str) -> str:
    if value in (".", "..") or not _PART.match(value):
        raise WorkspaceError(f"{what} {value!r} cannot be part of a checkout path", transient=False)
    return value


def _mapped_repository(config: LoadedConfig, ref: WorkItemRef) -> tuple[str, str, str] | None:
    """A key-form ref's code repository as its provider maps it (host, owner, repo); None when unmapped."""

    provider = config.tickets(ref)
    mapped = provider.code_repository(ref) if provider is not None else None
    if not mapped:
        return None
    parts = mapped.split("/")
    if len(parts) not in (2, 3):
        raise WorkspaceError(f"{ref} maps to {mapped!r}, not [HOST/]OWNER/REPO", transient=False)
    return ("" if len(parts) == 2 else parts[0], parts[-2], parts[-1])


def _repo(config: LoadedConfig, ref: WorkItemRef) -> _Repo | None:
    """The repository a ref names (or, key-form, its provider maps), each part checked; None when there is none."""
    if ref.key_form:
        mapped = _mapped_repository(config, ref)
        if mapped is None:
            return None
        host, owner, repo = mapped
    else:
        host, owner, repo = ref.host, ref.owner, ref.repo
    repo = repo[:-4] if repo.endswith(".git") else repo
    host = host or config.core.routing.workspace.default_host
    return _Repo(_part(host, "host"), _part(owner, "owner"), _part(repo, "repository"))


def _paths(config: LoadedConfig, ref: WorkItemRef, repo: _Repo) -> dict[str, Path]:
    root = workspace_root(config)
    from the_loop.state.slugs import SlugCollision, slug_of

    try:  # the item's own name: two look-alike refs never share a checkout
        slug = _part(slug_of(config.state, ref), "work item")
    except SlugCollision as exc:
        raise WorkspaceError(str(exc), transient=False) from None
    return {
        "shared": root / repo.host / repo.owner / repo.repo,
        "worktree": root / ".worktrees" / repo.host / repo.owner / repo.repo / slug,
        "clone": root / ".work-items" / slug / repo.host / repo.owner / repo.repo,
        "item": root / ".work-items" / slug,
    }


def _existing_paths(config: LoadedConfig, ref: WorkItemRef) -> dict[str, Path] | None:
    """``ref``'s checkout paths when workspaces are on and the ref names a usable repository, else None."""
    if not enabled(config):
        return None
    try:
        repo = _repo(config, ref)
    except WorkspaceError:
        return None
    return _paths(config, ref, repo) if repo is not None else None


def checkout_paths(config: LoadedConfig, ref: WorkItemRef) -> list[Path]:
    """The checkouts of ``ref`` that exist now, under either strategy (a crash may have left either behind)."""
    paths = _existing_paths(config, ref) or {}
    return [paths[name] for name in ("worktree", "item") if name in paths and os.path.lexists(paths[name])]


def clone_url(config: LoadedConfig, host: str, owner: str, repo: str) -> str:
    """``routing.workspace.cloneUrlBase`` + ``/<owner>/<repo>.git`` when set (a mirror, or ``file://`` in tests),
    else ``https://<host>/<owner>/<repo>.git`` or ``git@<host>:<owner>/<repo>.git`` per ``cloneProtocol``."""
    workspace = config.core.routing.workspace
    if workspace.clone_url_base:
        return f"{workspace.clone_url_base.rstrip('/')}/{owner}/{repo}.git"
    if workspace.clone_protocol == "ssh":
        return f"git@{host}:{owner}/{repo}.git"
    return f"https://{host}/{owner}/{repo}.git"


# ------------------------------------------------------------------------------------------------------ git


def _git(
    config: LoadedConfig, args: Sequence[str], *, cwd: Path | None = None, network: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run git; :class:`WorkspaceError` when it cannot run, times out or exits non-zero."""
    routing = config.core.routing
    timeout = routing.dispatch_timeout_seconds if network else LOCAL_GIT_TIMEOUT
    argv = [routing.workspace.git_binary, *(["-C", str(cwd)] if cwd else []), *args]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    try:
        answer = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} timed out after {timeout:g}s") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot run {routing.workspace.git_binary}: {exc.strerror or exc}") from None
    if answer.returncode != 0:
        detail = answer.stderr.strip().splitlines()[-1:] or [f"exit {answer.returncode}"]
        raise WorkspaceError(f"git {args[0]} failed: {detail[0]}")
    return answer


def _is_checkout(path: Path) -> bool:
    return (path / ".git").exists()


def _default_branch(config: LoadedConfig, clone: Path) -> str:
    """The remote's default branch from ``origin/HEAD``; ``main`` when it cannot be read."""
    try:
        head = _git(config, ["rev-parse", "--abbrev-ref", "origin/HEAD"], cwd=clone).stdout.strip()
    except WorkspaceError:
        return "main"
    name = head.removeprefix("origin/")
    return name if name and name != "HEAD" and _BRANCH.match(name) else "main"


def _fetch(config: LoadedConfig, clone: Path, warnings: list[str]) -> None:
    """``fetch --prune origin``; a failure only warns (the checkout is made from what the clone has)."""
    try:
        _git(config, ["fetch", "--prune", "origin"], cwd=clone, network=True)
    except WorkspaceError as exc:
        warnings.append(f"{clone}: {exc}")
        print(f"warning: workspace: {clone}: {exc}", file=sys.stderr)


def _clone(config: LoadedConfig, repo: _Repo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    url = clone_url(config, repo.host, repo.owner, repo.repo)
    _git(config, ["clone", "--quiet", "--", url, str(target)], network=True)


def _fetch_branch(config: LoadedConfig, clone: Path, branch: str, warnings: list[str]) -> bool:
    try:
        _git(config, ["fetch", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}"], cwd=clone, network=True)
    except WorkspaceError as exc:
        warnings.append(f"branch {branch}: {exc}; checked out detached instead")
        return False
    return True


# -------------------------------------------------------------------------------------------------- prepare


def spawn_cwd(config: LoadedConfig, ref: WorkItemRef) -> Checkout:
    """Where a first spawn of ``ref`` runs: its checkout when a workspace root is set and the ref names (or maps to)
    a repository, else ``routing.spawnWorkdir``. Raises :class:`WorkspaceError`."""
    from the_loop.sessions.harness import spawn_workdir

    if not enabled(config) or _repo(config, ref) is None:
        return Checkout(spawn_workdir(config), "workdir")
    return prepare(config, ref)


def prepare(config: LoadedConfig, ref: WorkItemRef, *, branch: str = "") -> Checkout:
    """Make (or reuse) ``ref``'s checkout; ``branch`` checks that branch out instead of the detached default.

    Emits ``workspace.prepared``. Raises :class:`WorkspaceError` (no workspace root, a key-form ref, a bad path
    part, a clone or worktree that git refused).
    """
    if not enabled(config):
        raise WorkspaceError("routing.workspace.root is not set", transient=False)
    repo = _repo(config, ref)
    if repo is None:
        raise WorkspaceError(f"{ref} names no repository to check out", transient=False)
    if branch and (not _BRANCH.match(branch) or ".." in branch):
        raise WorkspaceError(f"branch {branch!r} cannot be checked out", transient=False)
    paths = _paths(config, ref, repo)
    strategy = config.core.routing.workspace.strategy
    warnings: list[str] = []
    if strategy == "clone":
        checkout = _prepare_clone(config, repo, paths["clone"], branch, warnings)
    else:
        checkout = _prepare_worktree(config, repo, paths["shared"], paths["worktree"], branch, warnings)
    events.emit(
        "workspace.prepared",
        work_item=str(ref),
        strategy=strategy,
        checkout=str(checkout.path),
        branch=checkout.branch or None,
        base=checkout.base or None,
        reused=checkout.reused or None,
        warnings=warnings or None,
    )
    return checkout


def _prepare_worktree(
    config: LoadedConfig, repo: _Repo, shared: Path, worktree: Path, branch: str, warnings: list[str]
) -> Checkout:
    if _is_checkout(worktree):
        return Checkout(worktree, "worktree", reused=True, warnings=tuple(warnings))
    if os.path.lexists(worktree):
        raise WorkspaceError(f"{worktree} exists but is not a checkout; move it away", transient=False)
    if _is_checkout(shared):
        _fetch(config, shared, warnings)
    else:
        _clone(config, repo, shared)
    # A worktree deleted by hand is still registered: prune, or `worktree add` refuses the path.
    _git(config, ["worktree", "prune"], cwd=shared)
    worktree.parent.mkdir(parents=True, exist_ok=True)
    if branch and _fetch_branch(config, shared, branch, warnings):
        _git(config, ["worktree", "add", "--quiet", "-B", branch, str(worktree), f"origin/{branch}"], cwd=shared)
        return Checkout(worktree, "worktree", branch=branch, base=f"origin/{branch}", warnings=tuple(warnings))
    base = f"origin/{_default_branch(config, shared)}"
    _git(config, ["worktree", "add", "--quiet", "--detach", str(worktree), base], cwd=shared)
    return Checkout(worktree, "worktree", base=base, warnings=tuple(warnings))


def _prepare_clone(config: LoadedConfig, repo: _Repo, clone: Path, branch: str, warnings: list[str]) -> Checkout:
    if _is_checkout(clone):
        return Checkout(clone, "clone", reused=True, warnings=tuple(warnings))
    if os.path.lexists(clone):
        raise WorkspaceError(f"{clone} exists but is not a checkout; move it away", transient=False)
    _clone(config, repo, clone)
    if branch and _fetch_branch(config, clone, branch, warnings):
        _git(config, ["checkout", "--quiet", "-B", branch, f"origin/{branch}"], cwd=clone)
        return Checkout(clone, "clone", branch=branch, base=f"origin/{branch}", warnings=tuple(warnings))
    return Checkout(clone, "clone", branch=_default_branch(config, clone), warnings=tuple(warnings))


# --------------------------------------------------------------------------------------------------- remove


def remove(config: LoadedConfig, ref: WorkItemRef) -> list[Path]:
    """Remove ``ref``'s checkout under either strategy and return what was removed. Never raises: every failure is
    a warning (``workspace.cleaned`` with ``error``). The shared clone is never removed."""
    paths = _existing_paths(config, ref)
    if paths is None:
        return []
    removed = []
    for strategy, path in (("worktree", paths["worktree"]), ("clone", paths["item"])):
        if not os.path.lexists(path):
            continue
        errors: list[str] = []
        if strategy == "worktree" and _is_checkout(paths["shared"]):
            for args in (["worktree", "remove", "--force", str(path)], ["worktree", "prune"]):
                with contextlib.suppress(WorkspaceError):  # rmtree below is the fallback
                    _git(config, args, cwd=paths["shared"])
        _rmtree(path, errors)
        if strategy == "worktree" and _is_checkout(paths["shared"]):
            with contextlib.suppress(WorkspaceError):
                _git(config, ["worktree", "prune"], cwd=paths["shared"])
        gone = not os.path.lexists(path)
        if gone:
            removed.append(path)
        else:
            print(f"warning: workspace: could not remove {path}: {'; '.join(errors)}", file=sys.stderr)
        events.emit(
            "workspace.cleaned",
            level="info" if gone else "warning",
            work_item=str(ref),
            strategy=strategy,
            checkout=str(path),
            removed=gone,
            error="; ".join(errors) or None,
        )
    return removed


def _rmtree(path: Path, errors: list[str]) -> None:
    """Delete ``path`` if still there; a symlink is unlinked, never followed."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path, onerror=lambda _f, p, info: errors.append(f"{p}: {info[1]}"))
    except OSError as exc:
        errors.append(f"{path}: {exc.strerror or exc}")
