"""Retired config keys: one table serves both the loader (refuse, naming the remedy) and ``migrate-config``
(rewrite). Each rule edits a mapping in place and returns the changes it made, so running the rules on a copy of
the parsed document detects exactly what a real migration would rewrite.

Rules work on any ``MutableMapping``: a plain dict from PyYAML, or ruamel.yaml's round-trip map, which keeps the
operator's comments and key order.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

CURRENT_CONFIG_VERSION = "0.12.0"  # what `init` writes and `migrate-config` rewrites to
OLDEST_CONFIG_VERSION = "0.12.0"  # older files are refused, naming migrate-config

Doc = MutableMapping[str, Any]


@dataclass(frozen=True)
class Change:
    """One retired key found (and, in a migration, rewritten)."""

    key: str
    replacement: str

    def describe(self) -> str:
        return f"{self.key} → {self.replacement}"


def _get(doc: Doc, *path: str) -> Any:
    node: Any = doc
    for part in path:
        if not isinstance(node, MutableMapping) or part not in node:
            return None
        node = node[part]
    return node


def _ensure(doc: Doc, *path: str) -> Doc:
    node: Any = doc
    for part in path:
        if not isinstance(node.get(part), MutableMapping):
            node[part] = {}
        node = node[part]
    return node


def _remove(parent_path: tuple[str, ...], key: str, replacement: str) -> Callable[[Doc], list[Change]]:
    def rule(doc: Doc) -> list[Change]:
        parent = _get(doc, *parent_path) if parent_path else doc
        if isinstance(parent, MutableMapping) and key in parent:
            del parent[key]
            return [Change(".".join((*parent_path, key)), replacement)]
        return []

    return rule


def _rename(parent_path: tuple[str, ...], old: str, new_path: tuple[str, ...], wrap_list: bool = False):
    def rule(doc: Doc) -> list[Change]:
        parent = _get(doc, *parent_path) if parent_path else doc
        if not isinstance(parent, MutableMapping) or old not in parent:
            return []
        value = parent.pop(old)
        if wrap_list and not isinstance(value, list):
            value = [value]
        target = _ensure(doc, *new_path[:-1]) if len(new_path) > 1 else doc
        if new_path[-1] not in target:
            target[new_path[-1]] = value
        return [Change(".".join((*parent_path, old)), ".".join(new_path))]

    return rule


def _merge_webhook_routing(doc: Doc) -> list[Change]:
    nested = _get(doc, "webhooks", "ghWebhook")
    if not isinstance(nested, MutableMapping) or "routing" not in nested:
        return []
    old = nested.pop("routing")
    routing = _ensure(doc, "routing")
    if isinstance(old, MutableMapping):
        for key, value in old.items():
            routing.setdefault(key, value)  # the top-level block wins where both set a key
    return [Change("webhooks.ghWebhook.routing", "routing")]


def _slack_authorized_users(doc: Doc) -> list[Change]:
    slack = _get(doc, "channels", "slack")
    if not isinstance(slack, MutableMapping) or "authorizedUsers" not in slack:
        return []
    users = slack.pop("authorizedUsers") or []
    routing = _ensure(doc, "routing")
    allowed = routing.setdefault("authorizedUsers", [])
    for user in users if isinstance(users, list) else [users]:
        allowed.append({"slack": str(user)})
    return [Change("channels.slack.authorizedUsers", "routing.authorizedUsers (as {slack: …} entries)")]


def _github_source_keys(doc: Doc) -> list[Change]:
    changes: list[Change] = []
    sources = _get(doc, "polling", "sources")
    if not isinstance(sources, list):
        return changes
    for index, source in enumerate(sources):
        if not isinstance(source, MutableMapping) or source.get("provider") != "github":
            continue
        if "repos" in source:
            repos = source.pop("repos") or []
            top = doc.setdefault("repositories", [])
            for repo in repos:
                if repo not in top:
                    top.append(repo)
            changes.append(Change(f"polling.sources[{index}].repos", "repositories"))
        if "label" in source:
            label = source.pop("label")
            labels = source.setdefault("labels", [])
            if label not in labels:
                labels.append(label)
            changes.append(Change(f"polling.sources[{index}].label", f"polling.sources[{index}].labels"))
    return changes


def _jira_token_env(doc: Doc) -> list[Change]:
    api = _get(doc, "integrations", "jira", "api")
    if isinstance(api, MutableMapping) and isinstance(api.get("tokenEnv"), str):
        api["tokenEnv"] = [api["tokenEnv"]]
        return [Change("integrations.jira.api.tokenEnv (a string)", "integrations.jira.api.tokenEnv (a list)")]
    return []


_NO_CLI = "nothing: comments, reactions and API calls go through the provider's client library"

RULES: tuple[Callable[[Doc], list[Change]], ...] = (
    _merge_webhook_routing,  # first: the pre-142 block may carry ghBinary keys the next rules remove, in one run
    _remove(("routing", "control"), "ghBinary", _NO_CLI),
    _remove(("routing", "reactions"), "ghBinary", _NO_CLI),
    _remove(("routing", "announce"), "ghBinary", _NO_CLI),
    _remove(("polling",), "stateFile", "state.root"),
    _rename(("integrations",), "slack", ("channels", "slack")),
    _remove((), "collaborators", "the per-work-item collaborators section (the-loop add-collaborator)"),
    _remove((), "notifications", "channels.slack.subscribe"),
    _rename(("channels", "slack"), "events", ("channels", "slack", "subscribe")),
    _slack_authorized_users,
    _github_source_keys,
    _rename(("routing",), "autoExecuteLabel", ("routing", "autoExecuteLabels"), wrap_list=True),
    _remove(("integrations", "github"), "transport", _NO_CLI),
    _remove(("integrations", "github"), "cli", _NO_CLI),
    _remove(("integrations", "jira"), "transport", _NO_CLI),
    _remove(("integrations", "jira"), "cli", _NO_CLI),
    _jira_token_env,
    _rename(("integrations", "jira", "api"), "baseUrl", ("integrations", "jira", "serverUrl")),
)


def version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return ()


def version_too_old(doc: Doc) -> bool:
    declared = doc.get("version")
    return declared not in (None, "") and version_tuple(str(declared)) < version_tuple(OLDEST_CONFIG_VERSION)


def apply_rules(doc: Doc) -> list[Change]:
    """Rewrite every retired key in ``doc`` in place; bump ``version`` when anything changed."""
    changes: list[Change] = []
    for rule in RULES:
        changes.extend(rule(doc))
    old_version = doc.get("version")
    if version_too_old(doc):
        changes.append(Change(f"version {old_version}", f"version {CURRENT_CONFIG_VERSION}"))
    if changes:
        doc["version"] = CURRENT_CONFIG_VERSION
    return changes


def find_retired(raw: Doc) -> list[Change]:
    """The retired keys in a parsed document, without changing it."""
    import copy

    return apply_rules(copy.deepcopy(raw))
