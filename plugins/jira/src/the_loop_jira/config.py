"""The ``integrations.jira`` config section (E §A.3), validated at load so nothing unchecked reaches a URL or JQL."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from the_loop.config.models import Section

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_KEY = re.compile(r"^[A-Z][A-Z0-9_]{1,9}$")
_SITE = re.compile(r"^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?|[A-Za-z0-9-]+:\d+)$")
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


def _env_names(value: list[str]) -> list[str]:
    for index, name in enumerate(value):
        if not _ENV_NAME.match(name):  # never echo it: it may be the secret itself, pasted in by mistake
            raise ValueError(f"entry {index} is not an environment variable NAME (put the value in the environment)")
    return value


def safe_label(label: str) -> str:
    """J27: a label in Jira-safe form: ``: `` → ``:``, other whitespace runs → ``-``. Idempotent; ValueError naming the
    label when it has none (empty, or longer than 255 characters)."""
    safe = re.sub(r"\s+", "-", re.sub(r":\s+", ":", label.strip()))
    if not safe or len(safe) > 255:
        raise ValueError(f"label {label!r} has no Jira-safe form (empty or longer than 255 characters)")
    return safe


def _arming_labels(root: object) -> list[tuple[str, object]]:
    """(key path, label) of every label that arms Jira tickets: ``routing.autoExecuteLabels`` and the Jira poll
    sources' own ``labels``, as written in the file."""
    if not isinstance(root, dict):
        return []
    found: list[tuple[str, object]] = []
    routing = root.get("routing")
    labels = routing.get("autoExecuteLabels") if isinstance(routing, dict) else None
    if isinstance(labels, list):
        found += [(f"routing.autoExecuteLabels[{i}]", label) for i, label in enumerate(labels)]
    polling = root.get("polling")
    sources = polling.get("sources") if isinstance(polling, dict) else None
    for i, source in enumerate(sources if isinstance(sources, list) else []):
        if isinstance(source, dict) and source.get("provider") == "jira" and isinstance(source.get("labels"), list):
            found += [(f"polling.sources[{i}].labels[{j}]", label) for j, label in enumerate(source["labels"])]
    return found


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class JiraApi(Section):
    email_env: list[str] = Field(default_factory=list)
    token_env: list[str] = Field(default_factory=list)

    @field_validator("email_env", "token_env")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return _env_names(value)


class JiraProject(Section):
    repository: str = Field("", pattern=r"^$|^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?/)?[\w.-]+/[\w.-]+$")


class JiraWebhook(Section):
    secret_env: str = ""

    @field_validator("secret_env")
    @classmethod
    def _name(cls, value: str) -> str:
        return _env_names([value])[0] if value else value


class JiraSettings(Section):
    site: str = ""
    deployment: Literal["", "cloud", "cloud-scoped", "data-center"] = ""  # required once a site is set (A.3)
    cloud_id: str = Field("", pattern=r"^$|^[A-Za-z0-9-]+$")
    server_url: str = ""
    api: JiraApi = JiraApi()
    projects: dict[str, JiraProject] = Field(default_factory=dict)
    close_transition: str = ""
    webhook: JiraWebhook = JiraWebhook()

    @field_validator("site")
    @classmethod
    def _site(cls, value: str) -> str:
        if value and not _SITE.match(value):
            raise ValueError(f"{value!r} is not a bare host (acme.atlassian.net, jira.example:8443)")
        return value.lower()

    @field_validator("projects")
    @classmethod
    def _keys(cls, value: dict[str, JiraProject]) -> dict[str, JiraProject]:
        for key in value:
            if not _KEY.match(key):
                raise ValueError(f"{key!r} is not a Jira project key ([A-Z][A-Z0-9_]{{1,9}})")
        return value

    @field_validator("server_url")
    @classmethod
    def _server_url(cls, value: str) -> str:
        """J9: ``https://…``, or ``http://`` to a loopback host only (a local fake, a gateway on this machine)."""
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(f"{value!r}: http:// only to a loopback host (credentials never travel in cleartext)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _complete(self) -> JiraSettings:
        """A configured site needs what every request needs (A.3); an absent section stays valid."""
        if not self.site:
            return self
        if not self.deployment:
            raise ValueError("integrations.jira.deployment is required: cloud, cloud-scoped or data-center")
        if self.deployment == "cloud-scoped" and not self.cloud_id:
            raise ValueError("deployment cloud-scoped needs integrations.jira.cloudId")
        if not self.api.token_env:
            raise ValueError("integrations.jira.api.tokenEnv must name at least one variable (e.g. JIRA_API_TOKEN)")
        if self.cloud and not self.api.email_env:
            raise ValueError(f"deployment {self.deployment} needs integrations.jira.api.emailEnv (e.g. JIRA_EMAIL)")
        if not self.projects:
            raise ValueError("integrations.jira.projects must name at least one project key")
        return self

    @model_validator(mode="after")
    def _labels_cross_safely(self, info: ValidationInfo) -> JiraSettings:
        """J27, checked at load: every label that arms a Jira ticket must have a Jira-safe form."""
        if not self.site:
            return self
        for key, label in _arming_labels((info.context or {}).get("root")):
            try:
                safe_label(label if isinstance(label, str) else "")
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        return self

    @property
    def rest_version(self) -> str:
        return "2" if self.deployment == "data-center" else "3"

    @property
    def cloud(self) -> bool:
        return self.deployment != "data-center"

    def server(self) -> str:
        """J5/J9: where requests go — ``serverUrl`` when set, else the deployment's base."""
        if self.server_url:
            return self.server_url
        if self.deployment == "cloud-scoped":
            return f"https://api.atlassian.com/ex/jira/{self.cloud_id}"
        return f"https://{self.site}"
