"""Jira as a ticket tracker for ``jira:`` refs (J3, J13, J24-J29), through :class:`~the_loop_jira.client.JiraClient`.

Everything the-loop writes ends with the attribution line carrying ``[the-loop:agent-comment]`` (a relay ends with
``[the-loop:relay]`` instead); quoted text is defanged first so only that trailer is live. Labels are read in Jira's
spelling plus the configured spelling of each arming label present, so the core's label rule sees what the config
says (issue-381).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from the_loop.interfaces import TicketProvider
from the_loop.refs import RefError, WorkItemRef
from the_loop_jira.client import TIMEOUT_SECONDS, CredentialsMissing, JiraClient, JiraError, jira_label
from the_loop_jira.markup import AGENT_MARKER, RELAY_MARKER, defang
from the_loop_jira.refs import SCHEME, PlacementError, browse_url, place, repository_for

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop_jira.config import JiraSettings

__all__ = ["ATTRIBUTION", "MIRROR_LABEL", "RELAY_LINE", "JiraTicketProvider", "client_for", "settings_of"]

ATTRIBUTION = f"🤖 _the-loop, autonomous comment_ {AGENT_MARKER}"
RELAY_LINE = f"_relayed by the-loop for the operator_ {RELAY_MARKER}"
MIRROR_LABEL = "the-loop-mirror"
RELAY_KINDS = ("control.command", "gate.feedback")  # J26: what the-loop posts for the operator
_ENVELOPE = re.compile(r"<!--\s*the-loop:event\s+(\{.*?\})\s*-->", re.S)
_GITHUB_STAMPS = ("<!-- the-loop:agent-comment -->", "🤖 _the-loop, autonomous comment_")
_CLIENTS: dict[tuple[str, float], JiraClient] = {}
_CLIENTS_LOCK = threading.Lock()


def settings_of(config: LoadedConfig) -> JiraSettings:
    from the_loop_jira.config import JiraSettings

    try:
        return config.section("integrations.jira")
    except KeyError:  # a host built without the plugin's sections (tests): read the raw key
        raw = config.raw_at("integrations.jira")
        return JiraSettings.model_validate(raw if isinstance(raw, Mapping) else {})


def client_for(config: LoadedConfig, *, timeout: float | None = None) -> JiraClient:
    """One client per configuration and timeout per process, so the cached SDK object and ``myself`` are reused."""
    settings = settings_of(config)
    timeout = timeout or TIMEOUT_SECONDS
    key = (settings.model_dump_json(), timeout)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = JiraClient(settings, timeout=timeout)
        return client


def arming_labels(config: LoadedConfig, jira_labels: Sequence[str]) -> list[str]:
    """Jira's spelling plus the configured spelling of each arming label present (J17)."""
    present = set(jira_labels)
    labels = list(jira_labels)
    for label in config.core.routing.auto_execute_labels:
        try:
            if jira_label(label) in present and label not in labels:
                labels.append(label)
        except Exception:
            continue
    return labels


def _relayed(text: str) -> bool:
    """Whether ``text`` carries core's envelope of a relayed kind (``<!-- the-loop:event {…"type": …} -->``)."""
    for match in _ENVELOPE.finditer(text):
        try:
            kind = json.loads(match.group(1)).get("type")
        except (ValueError, AttributeError):
            continue
        if kind in RELAY_KINDS:
            return True
    return False


def _strip_stamps(text: str) -> str:
    lines = [line for line in text.rstrip().splitlines() if line.strip() not in _GITHUB_STAMPS]
    return "\n".join(lines).rstrip()


def _ends_with(text: str, marker: str) -> bool:
    lines = text.rstrip().splitlines()
    return bool(lines) and lines[-1].rstrip().endswith(marker)


class JiraTicketProvider(TicketProvider):
    scheme = SCHEME

    @property
    def settings(self) -> JiraSettings:
        return settings_of(self.config)

    @property
    def client(self) -> JiraClient:
        return client_for(self.config)

    # --------------------------------------------------------------------------------------------- refs

    def validate(self, ref: WorkItemRef) -> None:
        place(ref, self.settings)

    def url(self, ref: WorkItemRef) -> str | None:
        return browse_url(ref)

    def close_keys(self, ref: WorkItemRef) -> list[str]:
        from the_loop_jira.normalize import closure_key

        return [closure_key(ref), f"poll-close-{ref}-closed"]  # the poller's earlier key, still remembered

    def code_repository(self, ref: WorkItemRef) -> str | None:
        try:
            place(ref, self.settings)  # J3: only this site's configured projects map anywhere
        except PlacementError:
            return None
        return repository_for(ref, self.settings) or None  # J4; mirror-only projects map none

    # --------------------------------------------------------------------------------------------- calls

    def post_comment(self, ref: WorkItemRef, body: str) -> str:
        """A channel's relay (a control command or gate feedback, posted unmarked with its envelope) gets the relay
        line: Jira shows only the service account as author, so without it the ingress would settle it as self."""
        if _relayed(body) and not self.is_self_authored(body):
            body = self.mark_relay(body)
        return self.client.post_comment(ref, body)

    def labels(self, ref: WorkItemRef) -> list[str]:
        return arming_labels(self.config, self.client.issue(ref).labels)

    def set_labels(self, ref: WorkItemRef, add: Sequence[str] = (), remove: Sequence[str] = ()) -> list[str]:
        """Add and remove labels in one update; returns the labels that were absent."""
        return self.client.update_labels(ref, add, remove)

    def close(self, ref: WorkItemRef) -> str:
        return self.client.close(ref)

    def item_state(self, ref: WorkItemRef) -> Literal["open", "closed", "merged", "missing", "unknown"]:
        """``closed`` once the status category is done; ``missing`` on 404 or a moved key; else ``unknown``."""
        try:
            issue = self.client.issue(ref)
        except JiraError as exc:
            return "missing" if exc.status == 404 else "unknown"
        except (CredentialsMissing, RefError):
            return "unknown"
        if issue.moved_to:
            return "missing"
        return "closed" if issue.status_category == "done" else "open"

    # ------------------------------------------------------------------------------------------- marker

    def is_self_authored(self, text: str) -> bool:
        return AGENT_MARKER in text or _GITHUB_STAMPS[0] in text

    def mark(self, text: str) -> str:
        """J26: defanged text, then the attribution line (a GitHub stamp is replaced); idempotent."""
        if _ends_with(text, AGENT_MARKER):
            return text
        body = defang(_strip_stamps(text))
        return f"{body}\n\n{ATTRIBUTION}" if body else ATTRIBUTION

    def mark_relay(self, text: str) -> str:
        """A relay (gate feedback, a control command from a channel) ends with the relay line instead."""
        if _ends_with(text, RELAY_MARKER):
            return text
        body = defang(_strip_stamps(text))
        return f"{body}\n\n{RELAY_LINE}" if body else RELAY_LINE
