"""The operator's ``hooks:`` declaration, read strictly.

:func:`check_declaration` runs on the raw YAML document before the pydantic models see it (``load_config`` calls
it), because the rules are about the document's shape more than its values: YAML 1.1 reads a bare ``on:`` key as the
boolean ``True``, unknown keys may not even be strings, and which keys are allowed depends on the entry's kind. A bad
entry raises :class:`HookDeclarationError`, one line naming the entry. Nothing here imports or contacts a hook.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from the_loop.config.errors import ConfigError

if TYPE_CHECKING:
    from the_loop.config.models import HookEntry

__all__ = ["HookDeclarationError", "check_declaration", "hook_kind", "hook_target", "listing"]

NAME = re.compile(r"^[a-z][a-z0-9-]*$")
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KINDS = ("module", "path", "url")
COMMON = {"name", "on", "required", "enabled"}
LOCAL = {"executor", "with"}
REMOTE = {"tokenEnv", "headers", "timeoutSeconds"}
LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


class HookDeclarationError(ConfigError):
    """The ``hooks:`` list cannot be used; ``str()`` names the file and the entry."""


def check_declaration(raw: dict[str, Any], config_path: Path) -> dict[str, Any]:
    """Check ``raw["hooks"]`` and return ``raw`` with each entry normalised (a bare ``on:`` key renamed).

    Absent or ``null`` or ``[]`` declares nothing; anything else that is not a list is an error.
    """
    if "hooks" not in raw or raw["hooks"] is None:
        return raw
    declared = raw["hooks"]
    if not isinstance(declared, list):
        raise HookDeclarationError(f"{config_path}: hooks: must be a list of entries, not {type(declared).__name__}")
    seen: dict[str, int] = {}
    normalised = []
    for index, entry in enumerate(declared):
        label = _label(index, entry)
        try:
            item = _check_entry(entry)
        except ValueError as exc:
            raise HookDeclarationError(f"{config_path}: {label}: {exc}") from None
        if item["name"] in seen:
            raise HookDeclarationError(
                f"{config_path}: {label}: the name is already used by hooks[{seen[item['name']]}]"
            )
        seen[item["name"]] = index
        normalised.append(item)
    return {**raw, "hooks": normalised}


def _label(index: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"hooks[{index}] ({name})" if isinstance(name, str) and name else f"hooks[{index}]"


def _check_entry(entry: Any) -> dict[str, Any]:
    from the_loop.lifecycle import POINTS

    if not isinstance(entry, Mapping):
        raise ValueError(f"an entry must be a mapping, not {type(entry).__name__}")
    item = {("on" if key is True else key): value for key, value in entry.items()}  # `is`: 1 == True
    if any(key is True for key in entry) and "on" in entry:  # YAML 1.1 reads a bare `on:` key as true
        raise ValueError("`on` is given twice (as on: and as a quoted 'on')")
    kinds = [kind for kind in KINDS if kind in item]
    if len(kinds) != 1:
        raise ValueError(f"give exactly one of module, path or url (found {', '.join(kinds) or 'none'})")
    kind = kinds[0]
    own, other = (LOCAL, REMOTE) if kind != "url" else (REMOTE, LOCAL)
    for key in item:
        if key in other:
            raise ValueError(f"{key} is only for {'url' if kind != 'url' else 'module and path'} hooks")
        if key not in COMMON | own | {kind}:
            raise ValueError(f"unknown key {key!r}")

    if "name" not in item:
        raise ValueError("name is required")
    name = item["name"]
    if not isinstance(name, str) or not NAME.match(name):  # YAML reads a bare `off` or `no` as false: quote it
        raise ValueError(f"name {name!r} must be lowercase letters, digits and -, starting with a letter")
    target = item[kind]
    if not isinstance(target, str) or not target:
        raise ValueError(f"{kind} must be a non-empty string")
    if kind == "module" and not MODULE.match(target):
        raise ValueError(f"module {target!r} is not a dotted module name")
    if kind == "path" and not target.endswith(".py"):
        raise ValueError(f"path {target!r} must name a .py file")
    for key in ("required", "enabled"):
        if key in item and not isinstance(item[key], bool):
            raise ValueError(f"{key} must be true or false, not {type(item[key]).__name__}")
    if "on" in item:
        on = item["on"]
        if not isinstance(on, list) or not all(isinstance(point, str) for point in on):
            raise ValueError("on must be a list of point names")
        if not on:
            raise ValueError("on is empty: omit it to run at every point the hook handles")
        for point in on:
            if point not in POINTS:
                raise ValueError(f"on: {point!r} is not a lifecycle point (points: {', '.join(POINTS)})")
        if len(set(on)) != len(on):
            raise ValueError("on names a point twice")
    if kind == "url":
        _check_remote(item)
    else:
        _check_local(item)
    return item


def _check_local(item: dict[str, Any]) -> None:
    executor = item.get("executor")
    if executor is not None and (not isinstance(executor, str) or not IDENTIFIER.match(executor)):
        raise ValueError("executor must name a class or object in the module")
    with_ = item.get("with")
    if with_ is not None and (not isinstance(with_, Mapping) or not all(isinstance(k, str) for k in with_)):
        raise ValueError("with must be a mapping of keyword arguments")


def _check_remote(item: dict[str, Any]) -> None:
    url = urlsplit(item["url"])
    if "@" in url.netloc:  # never echoed: the credential would land in the terminal and the logs
        raise ValueError("url must not carry credentials (user:password@…): name the token's variable in tokenEnv")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"url {item['url']!r} must be http(s)://host/…")
    token_env = item.get("tokenEnv")
    if token_env is not None:
        if not isinstance(token_env, str) or not ENV_NAME.match(token_env):
            raise ValueError("tokenEnv must be the NAME of an environment variable (never the token)")
        if url.scheme == "http" and not is_loopback(url.hostname):
            raise ValueError("a token is never sent over plain http except to loopback; use https")
    headers = item.get("headers")
    if headers is not None:
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError("headers must map strings to strings")
        if any(key.lower() == "authorization" for key in headers):
            raise ValueError("headers may not carry Authorization: name the token's variable in tokenEnv")
    timeout = item.get("timeoutSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError("timeoutSeconds must be a number > 0")


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------------ reading


def hook_kind(entry: HookEntry) -> str:
    return "module" if entry.module else "path" if entry.path else "url"


def hook_target(entry: HookEntry, config_path: Path) -> str:
    """What the entry runs: the module name, the URL, or the ``.py`` file resolved against the config file's
    directory (``~`` expanded, absolute, symlinks not resolved — never a checkout)."""
    if entry.path:
        path = Path(entry.path).expanduser()
        return os.path.abspath(path if path.is_absolute() else config_path.parent / path)
    return entry.module or entry.url


def listing(hooks: list[HookEntry], config_path: Path) -> list[dict[str, Any]]:
    """``the-loop hooks list`` rows: each entry as declared, with its defaults filled in."""
    rows = []
    for entry in hooks:
        row: dict[str, Any] = {
            "name": entry.name,
            "kind": hook_kind(entry),
            "target": hook_target(entry, config_path),
            "on": list(entry.on) if entry.on is not None else None,
            "required": entry.required,
            "enabled": entry.enabled,
        }
        if entry.url:
            row.update(tokenEnv=entry.token_env, headers=dict(entry.headers), timeoutSeconds=entry.timeout_seconds)
        else:
            row.update({"executor": entry.executor, "with": dict(entry.with_)})
        rows.append(row)
    return rows
