"""GitHub refs on top of core's grammar: building from payload parts, validity, URLs."""

from __future__ import annotations

import pytest

from the_loop.refs import WorkItemRef, parse_ref
from the_loop_github.refs import host_of, item_url, ref_for, ref_from_repository, valid_ref


def payload(full_name: str = "octo/repo", html_url: str | None = "https://github.com/octo/repo") -> dict:
    repository: dict = {"full_name": full_name}
    if html_url is not None:
        repository["html_url"] = html_url
    return {"repository": repository}


def test_github_com_stays_implicit() -> None:
    ref = ref_for(payload(), 15)
    assert ref == parse_ref("github:octo/repo#15")
    assert str(ref) == "github:octo/repo#15"
    assert ref is not None and ref.tmux_name == "loop-github-octo-repo-15"


def test_a18_enterprise_refs_carry_the_host_and_their_tmux_name() -> None:
    ref = ref_for(payload(html_url="https://GHE.example/octo/repo"), 15)
    assert str(ref) == "github:ghe.example/octo/repo#15"
    assert ref is not None and ref.tmux_name == "loop-github-ghe_example-octo-repo-15"
    with_port = ref_for(payload(html_url="https://ghe:8443/octo/repo"), 3)
    assert str(with_port) == "github:ghe:8443/octo/repo#3"


@pytest.mark.parametrize("number", [0, -1, "15", None, True, 1.5])
def test_numbers_must_be_positive_integers(number: object) -> None:
    assert ref_for(payload(), number) is None


def test_host_of_only_takes_http_urls() -> None:
    assert host_of("https://GitHub.com/x") == "github.com"
    assert host_of("ftp://github.com/x") is None
    assert host_of("github.com/x") is None
    assert host_of(42) is None
    assert host_of("http://[::1") is None  # unparseable


def test_urls_only_for_valid_refs() -> None:
    assert item_url(parse_ref("github:octo/repo#15")) == "https://github.com/octo/repo/issues/15"
    assert item_url(parse_ref("github:ghe.example/octo/repo#15")) == "https://ghe.example/octo/repo/issues/15"
    assert item_url(WorkItemRef("github", "", "octo", "re/po", 1)) is None
    assert item_url(WorkItemRef("github", "evil.example/x", "octo", "repo", 1)) is None
    assert item_url(WorkItemRef("github", "", "..", "..", 1)) is None
    assert item_url(parse_ref("jira:acme.atlassian.net/PROJ-12")) is None


def test_valid_ref_refuses_other_schemes_and_key_forms() -> None:
    assert valid_ref(parse_ref("github:octo/repo#1"))
    assert not valid_ref(parse_ref("fake:octo/repo#1"))
    assert not valid_ref(WorkItemRef("github", "ghe.example", "PROJ", "", 12))


def test_ref_from_an_ack_repository() -> None:
    assert ref_from_repository("octo/repo", 7) == parse_ref("github:octo/repo#7")
    assert ref_from_repository("ghe.example/octo/repo", 7) == parse_ref("github:ghe.example/octo/repo#7")
    assert ref_from_repository("octo/repo/../x", 7) is None
    assert ref_from_repository("", 7) is None
