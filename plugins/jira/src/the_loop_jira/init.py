"""``the-loop init --jira SITE/PROJECT``: Jira's part of a new config, checked against Jira first.

The credentials are read from ``JIRA_EMAIL`` and ``JIRA_API_TOKEN`` (``JIRA_API_TOKEN`` alone on Data Center), the
names the part writes into ``integrations.jira.api``; their values are never written. Jira is asked whose they are
(``myself``) and whether they can see the project. The part it writes needs no public URL: the poller on for that
project, and the credentials' own account as an authorized person. ``--jira-repository OWNER/REPO`` names where the
project's code lives (without it the tickets are worked on with no checkout), ``--jira-server-url`` where requests
go (Data Center behind another URL, a local gateway), ``--jira-deployment`` overrides the guess from the site
(``*.atlassian.net`` is Cloud).
"""

from __future__ import annotations

import os
from typing import Any

from the_loop.interfaces import Finding, SetupRequest, SetupResult

EMAIL_ENV = "JIRA_EMAIL"
TOKEN_ENV = "JIRA_API_TOKEN"


def _lines(finding: Finding) -> list[str]:
    return [f"[!] {finding.problem}", f"     fix: {finding.remedy}"]


def jira(request: SetupRequest) -> SetupResult:
    from pydantic import ValidationError

    from the_loop_jira.client import JiraClient, JiraError
    from the_loop_jira.config import JiraSettings

    site, _, key = request.value.strip().partition("/")
    deployment = request.options.get("jira-deployment", "") or (
        "cloud" if site.endswith(".atlassian.net") else "data-center"
    )
    part: dict[str, Any] = {
        "site": site,
        "deployment": deployment,
        "api": {"tokenEnv": [TOKEN_ENV], **({"emailEnv": [EMAIL_ENV]} if deployment != "data-center" else {})},
        "projects": {key: {"repository": request.options.get("jira-repository", "")}},
    }
    if request.options.get("jira-server-url"):
        part["serverUrl"] = request.options["jira-server-url"]
    try:
        settings = JiraSettings.model_validate(part)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(item) for item in problem["loc"]) or "site"
        return SetupResult.refused(
            Finding(
                f"--jira {request.value}: {where}: {problem['msg']}", "name it as SITE/PROJECT: acme.atlassian.net/ENG"
            )
        )
    missing = [
        name for name in (*settings.api.email_env, *settings.api.token_env) if not os.environ.get(name, "").strip()
    ]
    if missing:
        return SetupResult.refused(
            Finding(
                f"no Jira credentials: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set",
                f"export {' and '.join(missing)} (an API token of the account the-loop acts as: "
                "https://id.atlassian.com/manage-profile/security/api-tokens)",
            )
        )
    client = JiraClient(settings)
    notes: list[str] = []
    variables = " and ".join([*settings.api.email_env, *settings.api.token_env])
    try:
        account = client.account()
    except JiraError as exc:
        finding = Finding(
            f"Jira at {settings.server()} did not accept the credentials in {variables} ({exc})",
            "check the site and the token (a token of the account whose e-mail is set), or --jira-server-url",
        )
        return SetupResult(findings=[finding], notes=_lines(finding), usable=False)
    account_id = str(account.get("accountId") if settings.cloud else account.get("key") or account.get("name") or "")
    notes.append(f"[ok] the credentials are {account.get('displayName') or account_id}'s ({account_id})")
    try:
        client.project(key)
    except JiraError as exc:
        finding = Finding(
            f"project {key} is not visible to {account_id} ({exc})",
            f"check the key, or give the account Browse Projects on {key}",
        )
        return SetupResult(findings=[finding], notes=[*notes, *_lines(finding)], usable=False)
    notes.append(f"[ok] project {key} is visible")
    return SetupResult(
        config={
            "integrations": {"jira": part},
            "polling": {"enabled": True, "sources": [{"provider": "jira", "projects": [key]}]},
            "routing": {"authorizedUsers": [{"jira": account_id}]},
        },
        notes=notes,
        summary=[f"the poller watches Jira project {key} on {site}; the credentials' account may arm its tickets"],
    )
