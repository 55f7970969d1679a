"""The GitHub ticket provider with the real PyGithub client against the fake GitHub API on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_github import BOT, TOKEN, FakeGitHub

from the_loop import events
from the_loop.config import load_config
from the_loop.plugins import PluginHost
from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.testing import LoopEnv
from the_loop_github import ticketing
from the_loop_github.ticketing import MARKER, SIGNATURE, GitHubError, GitHubTicketProvider, TokenMissing

ISSUE = parse_ref("github:octo/repo#15")
PR = parse_ref("github:octo/repo#20")


@pytest.fixture
def event_log(gh_env: LoopEnv) -> Iterator[Path]:
    path = gh_env.root / "logs" / "events.jsonl"
    events.configure(path, "test")
    yield path
    events.configure(None, "cli")


def logged(path: Path, name: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [record for line in path.read_text().splitlines() if (record := json.loads(line))["event"] == name]


# --------------------------------------------------------------------------------------------------- marker


def test_mark_appends_signature_and_marker_once(provider: GitHubTicketProvider) -> None:
    marked = provider.mark("Done: see the PR.\n\n")
    assert marked == f"Done: see the PR.\n\n{SIGNATURE}\n{MARKER}"
    assert provider.mark(marked) == marked
    assert provider.is_self_authored(marked)
    assert provider.is_self_authored(f"quoting {MARKER} anywhere")
    assert not provider.is_self_authored("🤖 _the-loop, autonomous comment_")  # the visible line proves nothing


# ------------------------------------------------------------------------------------------------- comments


def test_a_marked_comment_is_posted_and_its_id_returned(
    provider: GitHubTicketProvider, fake_github: FakeGitHub
) -> None:
    comment_id = provider.post_comment(ISSUE, provider.mark("Working on it."))
    posted = fake_github.comments_on("octo/repo", 15)
    assert [str(c["id"]) for c in posted] == [comment_id]
    assert posted[0]["body"].endswith(MARKER)
    assert posted[0]["user"]["login"] == BOT
    assert [(r.method, r.path) for r in fake_github.requests] == [("POST", "/repos/octo/repo/issues/15/comments")]
    assert fake_github.requests[0].headers["Authorization"] == "<redacted>"


def test_posting_on_a_missing_item_raises_with_the_status(provider: GitHubTicketProvider) -> None:
    with pytest.raises(GitHubError) as caught:
        provider.post_comment(parse_ref("github:octo/repo#99"), "x")
    assert caught.value.status == 404
    assert str(caught.value) == "GitHub API POST /repos/octo/repo/issues/99/comments: 404 Not Found"


def test_labels_are_read(provider: GitHubTicketProvider, fake_github: FakeGitHub) -> None:
    assert provider.labels(ISSUE) == ["the-loop: auto-execute", "bug"]
    assert provider.labels(PR) == []
    assert fake_github.calls("GET")[0].path == "/repos/octo/repo/issues/15/labels"


# ------------------------------------------------------------------------------------------------ item state


def test_item_states(provider: GitHubTicketProvider, fake_github: FakeGitHub) -> None:
    fake_github.add_issue("octo/repo", 16, state="closed")
    fake_github.add_issue("octo/repo", 21, state="closed", pull_request=True, merged=True)
    fake_github.add_issue("octo/repo", 22, state="closed", pull_request=True)
    assert provider.item_state(ISSUE) == "open"
    assert provider.item_state(PR) == "open"
    assert provider.item_state(parse_ref("github:octo/repo#16")) == "closed"
    assert provider.item_state(parse_ref("github:octo/repo#21")) == "merged"
    assert provider.item_state(parse_ref("github:octo/repo#22")) == "closed"
    assert provider.item_state(parse_ref("github:octo/repo#99")) == "missing"
    assert provider.item_state(parse_ref("github:octo/nothing#1")) == "missing"


@pytest.mark.parametrize("status", [500, 502, 403, 0])
def test_only_a_404_is_missing(provider: GitHubTicketProvider, fake_github: FakeGitHub, status: int) -> None:
    fake_github.fault("GET", r"/repos/octo/repo/issues/15", status=status)
    assert provider.item_state(ISSUE) == "unknown"


def test_a_timeout_is_unknown(
    provider: GitHubTicketProvider, fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ticketing, "TIMEOUT_SECONDS", 1)
    fake_github.fault("GET", r"/repos/octo/repo/issues/15", delay=2.5, times=1)
    assert provider.item_state(ISSUE) == "unknown"


# ------------------------------------------------------------------------------------------------- reactions


def test_reactions_on_each_kind_of_target(
    provider: GitHubTicketProvider, fake_github: FakeGitHub, event_log: Path
) -> None:
    comment = fake_github.add_comment("octo/repo", 15, "please add tests")
    review_comment = fake_github.add_comment("octo/repo", 20, "nit", review=True)
    provider.react({"kind": "issue-comment", "repository": "octo/repo", "id": str(comment)}, "eyes")
    provider.react({"kind": "review-comment", "repository": "octo/repo", "id": str(review_comment)}, "hooray")
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "confused")
    assert [r.path for r in fake_github.calls("POST")] == [
        f"/repos/octo/repo/issues/comments/{comment}/reactions",
        f"/repos/octo/repo/pulls/comments/{review_comment}/reactions",
        "/repos/octo/repo/issues/15/reactions",
    ]
    assert [(r["kind"], r["id"], r["content"], r["login"]) for r in fake_github.reactions] == [
        ("issue-comment", comment, "eyes", BOT),
        ("review-comment", review_comment, "hooray", BOT),
        ("issue", 15, "confused", BOT),
    ]
    added = logged(event_log, "reaction.added")
    assert [(r["kind"], r["reaction"]) for r in added] == [
        ("issue-comment", "eyes"),
        ("review-comment", "hooray"),
        ("issue", "confused"),
    ]


def test_a_failed_reaction_is_logged_never_raised(
    provider: GitHubTicketProvider, fake_github: FakeGitHub, event_log: Path
) -> None:
    provider.react({"kind": "issue-comment", "repository": "octo/repo", "id": "424242"}, "eyes")  # 404
    fake_github.fault("POST", r".*/reactions", status=500)
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "eyes")
    failed = logged(event_log, "reaction.failed")
    assert [(r["reason"], r["error"].split(": ")[1]) for r in failed] == [
        ("api-error", "404 Not Found"),
        ("api-error", "500 injected fault"),
    ]


@pytest.mark.parametrize(
    ("ack", "reaction", "reason"),
    [
        ({"kind": "discussion", "repository": "octo/repo", "id": "1"}, "eyes", "invalid-target"),
        ({"kind": "issue", "repository": "octo/../repo", "id": "1"}, "eyes", "invalid-target"),
        ({"kind": "issue", "repository": "octo/repo", "id": "1/../../x"}, "eyes", "invalid-target"),
        ({"kind": "issue", "repository": "octo/repo", "id": "\u0661"}, "eyes", "invalid-target"),
        ({}, "eyes", "invalid-target"),
        ({"kind": "issue", "repository": "octo/repo", "id": "15"}, "thumbs", "unknown-reaction"),
    ],
)
def test_bad_reaction_targets_make_no_request(
    provider: GitHubTicketProvider, fake_github: FakeGitHub, event_log: Path, ack: dict, reaction: str, reason: str
) -> None:
    provider.react(ack, reaction)
    assert fake_github.requests == []
    assert [r["reason"] for r in logged(event_log, "reaction.failed")] == [reason]


def test_an_empty_palette_entry_skips_the_reaction(provider: GitHubTicketProvider, fake_github: FakeGitHub) -> None:
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "")
    assert fake_github.requests == []


# ----------------------------------------------------------------------------------------------------- token


def test_the_token_is_read_at_call_time(
    gh_env: LoopEnv, fake_github: FakeGitHub, provider: GitHubTicketProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_github.tokens["t2"] = "second-bot"
    provider.post_comment(ISSUE, "first")
    monkeypatch.setenv("GH_TOKEN", "t2")
    provider.post_comment(ISSUE, "second")
    monkeypatch.delenv("GH_TOKEN")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)  # the next variable in tokenEnv
    provider.post_comment(ISSUE, "third")
    assert [c["user"]["login"] for c in fake_github.comments_on("octo/repo", 15)] == [BOT, "second-bot", BOT]
    assert [r.login for r in fake_github.requests] == [BOT, "second-bot", BOT]


def test_no_token_is_a_clear_error(
    provider: GitHubTicketProvider, fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, event_log: Path
) -> None:
    monkeypatch.delenv("GH_TOKEN")
    monkeypatch.setenv("GITHUB_TOKEN", "  ")  # blank counts as unset
    with pytest.raises(TokenMissing) as caught:
        provider.post_comment(ISSUE, "x")
    assert str(caught.value) == (
        "no GitHub token: set GH_TOKEN or GITHUB_TOKEN (integrations.github.api.tokenEnv), or log in with gh auth login"
    )
    assert provider.item_state(ISSUE) == "unknown"  # an unavailable check keeps the ref
    ticketing._warned_no_token.clear()
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "eyes")
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "eyes")
    assert [r["reason"] for r in logged(event_log, "reaction.failed")] == ["no-token"]  # warned once
    assert fake_github.requests == []


def test_the_token_never_appears_in_events_or_errors(
    gh_env: LoopEnv,
    fake_github: FakeGitHub,
    provider: GitHubTicketProvider,
    monkeypatch: pytest.MonkeyPatch,
    event_log: Path,
) -> None:
    secret = "ghp_DoNotLogThisToken0123456789"
    fake_github.tokens[secret] = "secret-bot"
    monkeypatch.setenv("GH_TOKEN", secret)
    messages = []
    provider.post_comment(ISSUE, "ok")
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "eyes")
    fake_github.fault("POST", r".*", status=500)
    provider.react({"kind": "issue", "repository": "octo/repo", "id": "15"}, "eyes")
    with pytest.raises(GitHubError) as caught:
        provider.post_comment(ISSUE, "fails")
    messages.append(str(caught.value))
    fake_github.clear_faults()
    monkeypatch.setenv("GH_TOKEN", secret + "-revoked")  # a bad token: 401
    with pytest.raises(GitHubError) as caught:
        provider.labels(ISSUE)
    messages.append(str(caught.value))
    assert messages[1].endswith("401 Bad credentials")
    assert all(secret not in message for message in messages)
    assert secret not in event_log.read_text()
    assert all(secret not in json.dumps(r.headers) for r in fake_github.requests)


# ------------------------------------------------------------------------------------------ hosts and refs


def test_enterprise_api_base(gh_env: LoopEnv, plugin_host: Any) -> None:
    import the_loop_github.plugin

    plugin_host.register(the_loop_github.plugin, "github")
    gh_env.write_config({"version": "0.12.0"})
    provider = GitHubTicketProvider(load_config(gh_env.config_path, plugin_host))
    assert provider.api_base("") == "https://api.github.com"
    assert provider.api_base("ghe.example") == "https://ghe.example/api/v3"
    gh_env.write_config({"integrations": {"github": {"host": "ghe.corp", "api": {"baseUrl": ""}}}})
    provider = GitHubTicketProvider(load_config(gh_env.config_path, plugin_host))
    assert provider.api_base("") == "https://ghe.corp/api/v3"
    assert provider.api_base("ghe.example") == "https://ghe.example/api/v3"


def test_an_explicit_base_url_serves_enterprise_refs(gh_env: LoopEnv, plugin_host: Any) -> None:
    import the_loop_github.plugin

    plugin_host.register(the_loop_github.plugin, "github")
    with FakeGitHub(tokens={TOKEN: BOT}, prefix="/api/v3") as ghe:
        ghe.add_issue("octo/repo", 15)
        gh_env.write_config({"version": "0.12.0", **ghe.config()})
        provider = GitHubTicketProvider(load_config(gh_env.config_path, plugin_host))
        ref = parse_ref("github:ghe.example/octo/repo#15")
        provider.post_comment(ref, "hello")
        provider.react({"kind": "issue", "repository": "ghe.example/octo/repo", "id": "15"}, "eyes")
        assert provider.item_state(ref) == "open"
    assert [(r.method, r.path) for r in ghe.requests] == [
        ("POST", "/repos/octo/repo/issues/15/comments"),
        ("POST", "/repos/octo/repo/issues/15/reactions"),
        ("GET", "/repos/octo/repo/issues/15"),
    ]


def test_the_raw_section_is_read_without_the_plugin_sections(gh_env: LoopEnv, fake_github: FakeGitHub) -> None:
    gh_env.write_config({"version": "0.12.0", **fake_github.config()})
    no_plugins = PluginHost.create(load_entrypoints=False)  # no github section is validated
    provider = GitHubTicketProvider(load_config(gh_env.config_path, no_plugins))
    assert provider.api_base("") == fake_github.url


def test_validate_and_url(provider: GitHubTicketProvider, fake_github: FakeGitHub) -> None:
    provider.validate(ISSUE)
    assert provider.url(ISSUE) == "https://github.com/octo/repo/issues/15"
    for bad in (WorkItemRef("github", "", "..", "repo", 1), parse_ref("fake:octo/repo#1")):
        with pytest.raises(RefError):
            provider.validate(bad)
        with pytest.raises(RefError):
            provider.post_comment(bad, "x")
    assert fake_github.requests == []
