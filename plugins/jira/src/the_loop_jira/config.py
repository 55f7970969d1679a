"""The ``integrations.jira`` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from the_loop.config_models import Section


class JiraApi(Section):
    email_env: list[str] = Field(default_factory=list)
    token_env: list[str] = Field(default_factory=list)


class JiraProject(Section):
    repository: str = ""


class JiraWebhook(Section):
    secret_env: str = ""


class JiraSettings(Section):
    site: str = ""
    deployment: Literal["cloud", "cloud-scoped", "data-center"] = "cloud"
    cloud_id: str = ""
    server_url: str = ""
    api: JiraApi = JiraApi()
    projects: dict[str, JiraProject] = Field(default_factory=dict)
    close_transition: str = ""
    webhook: JiraWebhook = JiraWebhook()
