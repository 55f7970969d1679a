"""``the-loop init --github [HOST/]OWNER/REPO``: GitHub's part of a new config, checked against GitHub first.

It finds a token the way the daemon will (:mod:`the_loop_github.token`: ``GH_TOKEN``, ``GITHUB_TOKEN``, or the GitHub
CLI's login), asks GitHub whose it is, whether it can read the repository's issues and write comments, and whether
the arming label is there (creating it with ``--create-label``, or when the operator says so). The part it writes
needs no public URL: the poller on for that repository, and the token's own login as the one authorized person.
The token itself is never written: the daemon finds it again at run time.
"""

from __future__ import annotations

from the_loop.interfaces import Finding, SetupRequest, SetupResult
from the_loop_github import checks
from the_loop_github.token import find, remedy

TOKEN_ENV = ("GH_TOKEN", "GITHUB_TOKEN")  # integrations.github.api.tokenEnv's default: what init writes nothing for


def api_base_url(host: str, api_url: str) -> str:
    """``--api-url`` when given; else github.com's API, or ``https://<host>/api/v3`` for Enterprise."""
    from the_loop_github.config import GitHubSettings

    return GitHubSettings.model_validate({"host": host, "api": {"baseUrl": api_url}}).api_base_url()


def github(request: SetupRequest) -> SetupResult:
    found = checks.split(request.value)
    if found is None:
        return SetupResult.refused(
            Finding(
                f"--github: {request.value!r} is not OWNER/REPO",
                "name it as OWNER/REPO (HOST/OWNER/REPO for Enterprise)",
            )
        )
    host, full_name = found
    api_url = request.options.get("api-url", "").strip()
    base_url = api_base_url(host, api_url)
    token, source = find(TOKEN_ENV, host)
    if not token:
        return SetupResult.refused(Finding("no GitHub token found", remedy(TOKEN_ENV)))
    report = checks.Report()
    with checks.client(base_url, token) as client:
        who = checks.token(client, source, base_url, remedy(TOKEN_ENV), report)
        repo = checks.repository(client, full_name, who, report) if who is not None else None
        if who is None or repo is None:
            return SetupResult(findings=report.findings, notes=report.lines, usable=False)
        wanted = request.options.get("create-label") == "yes"
        checks.label(
            repo,
            request.arming_label,
            lambda: wanted or request.confirm(f"create the label {request.arming_label!r} on {full_name}?"),
            "create it: the-loop doctor github --create-label (or pass --create-label to init)",
            report,
        )
    config: dict[str, object] = {
        "repositories": [request.value.strip()],
        "polling": {"enabled": True, "sources": [{"provider": "github"}]},
        "routing": {"authorizedUsers": [who.login]},
    }
    if api_url:
        config["integrations"] = {"github": {"api": {"baseUrl": api_url}}}
    return SetupResult(
        config=config,
        findings=report.findings,
        notes=report.lines,
        summary=[
            f"the poller watches {full_name} on {base_url}; {who.login} (the token's own login) may arm and steer "
            "its issues",
        ],
    )
