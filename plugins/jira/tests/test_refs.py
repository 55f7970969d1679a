"""Jira refs and placement (J1-J4; E1, E12)."""

from __future__ import annotations

import pytest

from the_loop.refs import RefError, parse_ref
from the_loop_jira.config import JiraSettings
from the_loop_jira.refs import PlacementError, browse_url, comment_url, parse_jira_ref, place, spec_id

SETTINGS = JiraSettings.model_validate(
    {
        "site": "jira.test",
        "deployment": "cloud",
        "api": {"emailEnv": ["E"], "tokenEnv": ["T"]},
        "projects": {"PROJ": {"repository": "octo/repo"}},
    }
)


def test_e1_ref_grammar_url_spec_id_and_tmux_name() -> None:
    ref = parse_jira_ref("jira:Jira.Test/PROJ-12")
    assert str(ref) == "jira:jira.test/PROJ-12"
    assert browse_url(ref) == "https://jira.test/browse/PROJ-12"
    assert comment_url(ref, "10012") == "https://jira.test/browse/PROJ-12?focusedCommentId=10012"
    assert spec_id(ref) == "jira-proj-12"
    assert ref.slug == "jira-jira.test-PROJ-12"
    assert ref.tmux_name == "loop-jira-jira_test-PROJ-12"
    assert (ref.host, ref.owner, ref.repo) == ("jira.test", "PROJ", "")


@pytest.mark.parametrize(
    "text", ["jira:jira.test/proj-12", "jira:jira.test/PROJ-0", "jira:jira.test/P-1", "jira:acme/PROJ-1", "proj-1"]
)
def test_e1_malformed_refs_state_the_expected_shape(text: str) -> None:
    with pytest.raises(RefError, match=r"expected jira:<site>/<KEY>-<n>"):
        parse_jira_ref(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [("jira:evil.example/PROJ-1", "not on the configured site"), ("jira:jira.test/ABC-1", "not under")],
)
def test_e12_placement_refuses_another_site_or_project(text: str, why: str) -> None:
    with pytest.raises(PlacementError, match=why) as caught:
        place(parse_ref(text), SETTINGS)
    assert "nothing was sent" in str(caught.value)


def test_placement_accepts_a_configured_project() -> None:
    ref = parse_ref("jira:jira.test/PROJ-3")
    assert place(ref, SETTINGS) is ref


def test_j5_j9_where_requests_go() -> None:
    def server(**raw: object) -> tuple[str, str]:
        base = {
            "site": "acme.atlassian.net",
            "deployment": "cloud",
            "api": {"emailEnv": ["E"], "tokenEnv": ["T"]},
            "projects": {"PROJ": {}},
        }
        settings = JiraSettings.model_validate({**base, **raw})
        return settings.server(), settings.rest_version

    assert server() == ("https://acme.atlassian.net", "3")
    assert server(deployment="cloud-scoped", cloudId="abc-123") == ("https://api.atlassian.com/ex/jira/abc-123", "3")
    assert server(deployment="data-center", api={"tokenEnv": ["T"]}) == ("https://acme.atlassian.net", "2")
    assert server(serverUrl="http://127.0.0.1:8080/") == ("http://127.0.0.1:8080", "3")
    with pytest.raises(ValueError, match="loopback"):
        server(serverUrl="http://jira.example.com")
    with pytest.raises(ValueError, match="cloudId"):
        server(deployment="cloud-scoped")


def test_j2_no_url_for_a_ref_that_is_not_a_valid_jira_ref() -> None:
    assert browse_url(parse_ref("github:octo/repo#1")) is None
    assert comment_url(parse_ref("github:octo/repo#1"), "1") == ""
