"""Pre-spawn preparation of Claude Code's own files, so a session starts working instead of waiting on a dialog.

Run before every spawn and both halves of a respawn (core calls :meth:`ClaudeAdapter.prepare`):

- ``routing.harnessTrust`` (default on): in the user config file, ``projects[<dir>].hasTrustDialogAccepted`` and
  ``.hasCompletedProjectOnboarding`` on the exact spawn directory (both of its spellings: ``normpath(abspath)`` and
  ``realpath``), since Claude Code reads them from the exact key; under scope ``workspace-root`` also
  ``hasTrustDialogAccepted`` on the workspace root, so its ancestor walk covers other checkouts there. A root that
  does not contain the spawn directory, or is ``/`` or the home directory, is dropped.
- ``acceptBypassPermissions``: the bypass-permissions disclaimer (``skipDangerousModePermissionPrompt`` in settings,
  the legacy ``bypassPermissionsModeAccepted`` in the config file); ``auto`` only when ``harnessArgs`` ask for
  bypass mode.
- ``routing.harnessPlugins`` (default on): the-loop's marketplace and plugin in settings, each only where absent.
- ``integrations.claude.completeOnboarding`` (default on): ``hasCompletedOnboarding`` in the config file. Without
  it a fresh home gets Claude Code's first-run screens (connectivity check, theme picker, login), which exit at once
  offline and wait for a person online.
- ``integrations.claude.approveApiKey`` (default on): when the session inherits ``ANTHROPIC_API_KEY``, its last 20
  characters (the form Claude Code records) in ``customApiKeyResponses.approved``, unless the key is already
  approved or rejected there. Without it Claude Code asks "Do you want to use this API key?" with "No" chosen, and
  the first delivered carriage return answers it. A key recorded as rejected is left so and reported.

Write discipline: one lock per file, read under it, a file that does not parse as a JSON object (or whose container
key is not an object) is never touched, only the named keys change, nothing is written when nothing changes, and a
write goes through a temporary file in the same directory and an atomic replace of the symlink's target, keeping
its mode (a new file gets ``0600``). A failure raises :class:`PrepareError` after the other file was still done;
core logs it as ``workspace.trust_failed`` and spawns anyway.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.toolkit import Corrupt, StateError, atomic_write_bytes, dump_json, load_json, locked

if TYPE_CHECKING:
    from the_loop.config.models import HarnessPluginsSection, HarnessTrustSection

MARKETPLACE = "the-loop"
PLUGIN = "the-loop@the-loop"
REPOSITORY = re.compile(r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
DIR_KEYS = ("hasTrustDialogAccepted", "hasCompletedProjectOnboarding")
ROOT_KEYS = ("hasTrustDialogAccepted",)

Mutation = Callable[[dict[str, Any]], bool]


class PrepareError(Exception):
    """A file that was not updated (left exactly as it was), or a setting refused."""


@dataclass(frozen=True)
class ClaudePaths:
    """Where Claude Code keeps its user config file and its settings (R42)."""

    config_dir: Path
    config_file: Path
    settings: Path

    @classmethod
    def from_env(cls) -> ClaudePaths:
        override = os.environ.get("CLAUDE_CONFIG_DIR", "")  # empty counts as unset, as in ${CLAUDE_CONFIG_DIR:-…}
        base = Path(override).expanduser() if override else Path.home()
        config_dir = base if override else base / ".claude"
        legacy = config_dir / ".config.json"
        config_file = legacy if legacy.exists() else base / ".claude.json"
        return cls(config_dir, config_file, config_dir / "settings.json")


def _spellings(path: Path) -> list[str]:
    """The keys Claude Code may look a directory up by: the absolute path as given, and its real path."""
    plain = os.path.normpath(os.path.abspath(path))
    real = os.path.realpath(path)
    return [plain] if real == plain else [plain, real]


def _inside(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it, compared component by component (``/ws`` never covers ``/ws2``)."""
    parts = Path(root).parts
    return Path(path).parts[: len(parts)] == parts


def trust_keys(cwd: Path, scope: str, root: Path | None) -> tuple[list[str], list[str]]:
    """The project keys to trust fully (the spawn directory) and those to trust as the workspace root."""
    dirs = _spellings(cwd)
    if scope != "workspace-root" or root is None:
        return dirs, []
    roots = _spellings(root)
    home = set(_spellings(Path.home()))
    if any(r == os.sep or r in home for r in roots):
        return dirs, []  # as broad as / or the home directory: trusting it would trust everything below
    if not any(_inside(r, d) for r in roots for d in dirs):
        return dirs, []
    return dirs, [r for r in roots if r not in dirs]


def wants_bypass(mode: str, args: Sequence[str]) -> bool:
    """``acceptBypassPermissions``: ``always``, ``never``, or (``auto``) whether ``args`` ask for bypass mode."""
    if mode != "auto":
        return mode == "always"
    args = list(args)
    return any(
        arg in ("--dangerously-skip-permissions", "--permission-mode=bypassPermissions")
        or (arg == "--permission-mode" and args[index + 1 : index + 2] == ["bypassPermissions"])
        for index, arg in enumerate(args)
    )


# ------------------------------------------------------------------------------------------------- mutations


def _object(parent: dict[str, Any], key: str, label: str) -> dict[str, Any]:
    """``parent[key]`` as an object, created when absent; anything else refuses the whole file."""
    if key not in parent:
        parent[key] = {}
    value = parent[key]
    if not isinstance(value, dict):
        raise PrepareError(f"{label} is not a JSON object")
    return value


def _set_true(data: dict[str, Any], key: str) -> bool:
    if data.get(key) is True:
        return False
    data[key] = True
    return True


def _trust(dirs: list[str], roots: list[str], changed: list[str]) -> Mutation:
    def mutate(data: dict[str, Any]) -> bool:
        projects = _object(data, "projects", "projects")
        wanted = [(key, DIR_KEYS) for key in dirs] + [(key, ROOT_KEYS) for key in roots]
        for key, flags in wanted:
            entry = _object(projects, key, f"projects[{key!r}]")
            if [flag for flag in flags if _set_true(entry, flag)]:
                changed.append(key)
        return bool(changed)

    return mutate


def _accept(key: str) -> Mutation:
    return lambda data: _set_true(data, key)


def _approve_key(tail: str, notes: list[str]) -> Mutation:
    def mutate(data: dict[str, Any]) -> bool:
        responses = _object(data, "customApiKeyResponses", "customApiKeyResponses")
        approved = responses.setdefault("approved", [])
        rejected = responses.get("rejected", [])
        if not isinstance(approved, list) or not isinstance(rejected, list):
            raise PrepareError("customApiKeyResponses.approved and .rejected must be lists")
        if tail in approved:
            return False
        if tail in rejected:  # a person's (or an earlier accident's) answer: theirs to undo
            notes.append(
                "the ANTHROPIC_API_KEY this session inherits is listed in customApiKeyResponses.rejected; Claude Code "
                "will not use it until it is removed from that list"
            )
            return False
        approved.append(tail)
        return True

    return mutate


def api_key_tail(environ: Mapping[str, str] | None = None) -> str:
    """The part of the inherited ``ANTHROPIC_API_KEY`` Claude Code records an answer under ("" when unset)."""
    return (os.environ if environ is None else environ).get("ANTHROPIC_API_KEY", "")[-20:]


def _enable_plugin(repository: str) -> Mutation:
    def mutate(data: dict[str, Any]) -> bool:
        changed = False
        if repository:  # "" enables the plugin without naming a marketplace
            markets = _object(data, "extraKnownMarketplaces", "extraKnownMarketplaces")
            if MARKETPLACE not in markets:
                markets[MARKETPLACE] = {"source": {"source": "github", "repo": repository}}
                changed = True
        plugins = _object(data, "enabledPlugins", "enabledPlugins")
        if PLUGIN not in plugins:  # an existing value, false included, is the operator's choice
            plugins[PLUGIN] = True
            changed = True
        return changed

    return mutate


# ------------------------------------------------------------------------------------------------- writing


def update_json(path: Path, mutations: Sequence[Mutation]) -> bool:
    """Apply ``mutations`` to the JSON object at ``path`` under its lock; write only when one changed something.

    Returns whether the file was written. Raises :class:`PrepareError` (file untouched) when it does not parse as
    an object or a mutation refuses it.
    """
    target = Path(os.path.realpath(path))  # write through a symlink: the link stays a link
    # A lock file of our own beside it (never "<name>.lock", the name Claude Code's own lock takes).
    with locked(target.with_name(f"{target.name}.the-loop.lock")):
        data = load_json(target)
        if data is Corrupt:
            raise PrepareError(f"{path}: does not parse as a JSON object; left untouched")
        document: dict[str, Any] = data or {}  # type: ignore[assignment]
        try:
            changed = [mutate(document) for mutate in mutations]  # every one runs
        except PrepareError as exc:
            raise PrepareError(f"{path}: {exc}; left untouched") from None
        if not any(changed):
            return False
        mode = stat.S_IMODE(target.stat().st_mode) if data is not None else 0o600
        atomic_write_bytes(target, dump_json(document), mode=mode)
        return True


def prepare(
    cwd: Path,
    *,
    trust: HarnessTrustSection,
    plugins: HarnessPluginsSection,
    workspace_root: Path | None,
    harness_args: Sequence[str],
    complete_onboarding: bool = True,
    approve_api_key: bool = True,
    paths: ClaudePaths | None = None,
) -> list[str]:
    """Prepare Claude Code's files for a session in ``cwd``. Returns every directory trusted and every file written
    (empty when all was already in place); raises :class:`PrepareError` naming what failed."""
    paths = paths or ClaudePaths.from_env()
    errors: list[str] = []
    trusted: list[str] = []
    per_file: dict[Path, list[Mutation]] = {paths.config_file: [], paths.settings: []}
    if trust.enabled:
        dirs, roots = trust_keys(cwd, trust.scope, workspace_root)
        per_file[paths.config_file].append(_trust(dirs, roots, trusted))
        if wants_bypass(trust.accept_bypass_permissions, harness_args):
            per_file[paths.config_file].append(_accept("bypassPermissionsModeAccepted"))
            per_file[paths.settings].append(_accept("skipDangerousModePermissionPrompt"))
    if complete_onboarding:
        per_file[paths.config_file].append(_accept("hasCompletedOnboarding"))
    notes: list[str] = []
    if approve_api_key and api_key_tail():
        per_file[paths.config_file].append(_approve_key(api_key_tail(), notes))
    if plugins.enabled:
        repository = plugins.marketplace_repo
        if repository and not REPOSITORY.match(repository):  # also checked at config load; never trust a caller
            errors.append(f"routing.harnessPlugins.marketplaceRepo: {repository!r} is not OWNER/REPO; not enabled")
        else:
            per_file[paths.settings].append(_enable_plugin(repository))
    written: list[str] = []
    for path, mutations in per_file.items():
        if not mutations:
            continue
        try:
            if update_json(path, mutations):
                written.append(str(path))
        except (PrepareError, StateError) as exc:
            errors.append(str(exc))
            if path == paths.config_file:
                trusted.clear()
    applied = trusted + written
    errors += notes
    if errors:
        done = f" (applied: {', '.join(applied)})" if applied else ""
        raise PrepareError("; ".join(errors) + done)
    return applied
