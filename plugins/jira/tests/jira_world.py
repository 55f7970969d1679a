"""The Jira tests' world: shared constants and the config builders (imported by name: ``conftest`` is ambiguous when
several plugins' tests run in one session)."""

from __future__ import annotations

from typing import Any

from fake_jira import FakeJira

EMAIL = "bot@example.test"
TOKEN = "jira-secret-token-9f8e7d"
LABEL = "the-loop:auto-execute"
SECRET = "jira-webhook-secret"


def jira_settings(fake: FakeJira, **more: Any) -> dict[str, Any]:
    return {
        "site": "jira.test",
        "deployment": "cloud",
        "serverUrl": fake.url,
        "api": {"emailEnv": ["JIRA_EMAIL"], "tokenEnv": ["JIRA_API_TOKEN"]},
        "projects": {"PROJ": {"repository": "octo/repo"}, "OPS": {}},
        **more,
    }


def base_config(fake: FakeJira, *, routing: dict[str, Any] | None = None, **jira: Any) -> dict[str, Any]:
    return {
        "version": "0.12.0",
        "polling": {"sources": [{"provider": "jira", "projects": ["PROJ"]}]},
        "routing": {
            "spawnOnUnmatched": "labeled",
            "authorizedUsers": [{"github": "octocat", "jira": "acc-ok"}],
            **(routing or {}),
        },
        "integrations": {"jira": jira_settings(fake, **jira)},
    }
