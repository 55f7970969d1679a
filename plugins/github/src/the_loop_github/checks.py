"""What ``the-loop init --github`` and ``the-loop doctor github`` ask GitHub, through the real client: whose the token
is and what it may do, whether a repository is readable and takes issues and comments, and whether the arming label
is on it. Each answer goes into a :class:`Report` as a line that is fine or a finding with its remedy. The token is
never shown: a finding names the variable (or ``gh auth token``) it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from the_loop.interfaces import Finding

if TYPE_CHECKING:
    from github import Github
    from github.Repository import Repository

TIMEOUT_SECONDS = 30
LABEL_COLOR = "0e8a16"
LABEL_DESCRIPTION = "the-loop starts an agent session on an issue with this label and a `the-loop start` comment"


@dataclass
class Report:
    """Lines for people (``[ok] …`` / ``[!] …``) and the findings among them."""

    lines: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append(f"[ok] {text}")

    def problem(self, problem: str, remedy: str) -> None:
        self.findings.append(Finding(problem, remedy))
        self.lines.append(f"[!] {problem}")
        self.lines.append(f"     fix: {remedy}")


@dataclass(frozen=True)
class Token:
    """Who a token is and what it may do: ``scopes`` is None for a fine-grained token (GitHub shows it none)."""

    login: str
    scopes: tuple[str, ...] | None


@contextmanager
def client(base_url: str, token: str) -> Iterator[Github]:
    from github import Auth, Github

    github = Github(
        auth=Auth.Token(token),
        base_url=base_url,
        timeout=TIMEOUT_SECONDS,
        retry=None,
        user_agent="the-loop",
    )
    try:
        yield github
    finally:
        github.close()


def _failure(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    data = getattr(exc, "data", None)
    message = data.get("message") if isinstance(data, dict) else None
    if status is None:
        return f"no answer: {type(exc).__name__}"
    return f"{status} {' '.join(str(message).split())[:120]}" if message else str(status)


def token(github: Github, source: str, base_url: str, remedy: str, report: Report) -> Token | None:
    """Whose the token is (``GET /user``) and its scopes; None, with a finding, when GitHub refuses it."""
    from github import BadCredentialsException, GithubException

    try:
        login = github.get_user().login
    except BadCredentialsException:
        report.problem(f"GitHub refused the token from {source} (401 Bad credentials)", f"replace it: {remedy}")
        return None
    except (GithubException, OSError) as exc:
        report.problem(
            f"GitHub at {base_url} did not say whose the token from {source} is ({_failure(exc)})",
            "check the API URL (--api-url, integrations.github.api.baseUrl) and that this machine can reach it",
        )
        return None
    scopes = github.oauth_scopes
    shown = f"scopes: {', '.join(scopes) or 'none'}" if scopes is not None else "fine-grained: GitHub shows no scopes"
    report.ok(f"the token from {source} is {login}'s ({shown})")
    return Token(login, tuple(scopes) if scopes is not None else None)


def repository(github: Github, full_name: str, who: Token, report: Report) -> Repository | None:
    """``full_name`` when the token can read it and it takes issues and comments; None, with a finding, when it
    cannot be read at all."""
    from github import GithubException, UnknownObjectException

    try:
        repo = github.get_repo(full_name)
        private = bool(repo.private)
    except UnknownObjectException:
        report.problem(
            f"{full_name} is not readable with {who.login}'s token (404 Not Found)",
            "check the name, or give the token access to it (fine-grained: Repository access; classic: the repo "
            "scope for a private repository)",
        )
        return None
    except (GithubException, OSError) as exc:
        report.problem(f"{full_name} could not be read ({_failure(exc)})", "try again; check the API URL")
        return None
    if not repo.has_issues:
        report.problem(
            f"issues are turned off on {full_name}",
            f"turn them on: https://github.com/{full_name}/settings → Features → Issues",
        )
    needed = ("repo",) if private else ("repo", "public_repo")
    if who.scopes is not None and not set(needed) & set(who.scopes):
        report.problem(
            f"{who.login}'s token cannot write comments on {full_name} (it has no {' or '.join(needed)} scope)",
            f"give the classic token the {needed[-1]} scope, or use a fine-grained token with Issues: Read and write",
        )
    elif who.scopes is None:
        report.ok(f"{full_name} is readable (a fine-grained token needs Issues: Read and write to comment)")
    else:
        report.ok(f"{full_name} is readable, and the token may write comments on it")
    return repo


def label(repo: Repository, name: str, create: Callable[[], bool], remedy: str, report: Report) -> None:
    """Whether the arming label is on ``repo``; when it is not and ``create()`` says so, create it."""
    from github import GithubException, UnknownObjectException

    try:
        repo.get_label(name)
    except UnknownObjectException:
        pass
    except (GithubException, OSError) as exc:
        report.problem(f"the labels of {repo.full_name} could not be read ({_failure(exc)})", "try again")
        return
    else:
        report.ok(f"the arming label {name!r} is on {repo.full_name}")
        return
    if not create():
        report.problem(f"the arming label {name!r} is not on {repo.full_name}", remedy)
        return
    try:
        repo.create_label(name, LABEL_COLOR, LABEL_DESCRIPTION)
    except (GithubException, OSError) as exc:
        report.problem(
            f"the arming label {name!r} could not be created on {repo.full_name} ({_failure(exc)})",
            "create it on GitHub (Issues → Labels → New label), or with a token that may push to the repository",
        )
        return
    report.ok(f"created the arming label {name!r} on {repo.full_name}")


def split(value: str) -> tuple[str, str] | None:
    """``[HOST/]OWNER/REPO`` → (host, ``OWNER/REPO``); None when it is not that."""
    parts = value.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        return None
    return ("", "/".join(parts)) if len(parts) == 2 else (parts[0], "/".join(parts[1:]))
