"""Core's ref grammar, slug rule and tmux name (ARCHITECTURE §4), which every provider and file name builds on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from the_loop.refs import RefError, WorkItemRef, parse_ref, slug_for, tmux_name
from the_loop.state import is_record_name


@pytest.mark.parametrize(
    ("text", "canonical", "slug", "session"),
    [
        ("github:octo/repo#15", "github:octo/repo#15", "github-octo-repo-15", "loop-github-octo-repo-15"),
        ("github:github.com/octo/repo#15", "github:octo/repo#15", "github-octo-repo-15", "loop-github-octo-repo-15"),
        ("github:OCTO/Repo#15", "github:octo/repo#15", "github-octo-repo-15", "loop-github-octo-repo-15"),
        (
            "github:GHE.corp.example/octo/repo#15",
            "github:ghe.corp.example/octo/repo#15",
            "github-ghe.corp.example-octo-repo-15",
            "loop-github-ghe_corp_example-octo-repo-15",
        ),
        (
            "jira:acme.atlassian.net/PROJ-12",
            "jira:acme.atlassian.net/PROJ-12",
            "jira-acme.atlassian.net-PROJ-12",
            "loop-jira-acme_atlassian_net-PROJ-12",
        ),
        ("gitea:git.example:3000/o/r.js#7", "gitea:git.example:3000/o/r.js#7", "gitea-git.example-3000-o-r.js-7", None),
    ],
)
def test_parse_canonical_form_slug_and_tmux_name(text: str, canonical: str, slug: str, session: str | None) -> None:
    ref = parse_ref(text)
    assert str(ref) == canonical
    assert parse_ref(str(ref)) == ref
    assert ref.slug == slug_for(ref) == slug
    assert is_record_name(f"{slug}.json")  # the registry and portable store list it
    if session is not None:
        assert ref.tmux_name == tmux_name(slug) == session
    assert not set(ref.tmux_name) & {".", ":"}  # tmux would rename a session holding these


@pytest.mark.parametrize(
    "text",
    [
        "",
        "bad ref",
        "octo/repo#15",
        "github:octo/repo",
        "github:octo/repo#0",
        "github:octo/repo#-1",
        "github:octo/repo#12345678901",
        "GitHub:octo/repo#1",
        "github:octo/re po#1",
        "jira:PROJ-12",
        "jira:acme.atlassian.net/proj-12",
    ],
)
def test_malformed_refs_are_refused_naming_the_shapes(text: str) -> None:
    with pytest.raises(RefError, match=r"expected <provider>:\[<host>/\]<owner>/<repo>#<n>"):
        parse_ref(text)


_segment = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)
_refs = st.builds(
    WorkItemRef,
    provider=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
    host=st.sampled_from(["", "ghe.corp.example", "git.example:3000"]),
    owner=_segment,
    repo=_segment,
    number=st.integers(min_value=1, max_value=9_999_999_999),
)


@given(_refs)
def test_round_trip_and_file_safe_slugs(ref: WorkItemRef) -> None:
    assert parse_ref(str(ref)) == ref
    assert "/" not in ref.slug and ref.slug.endswith(f"-{ref.number}")
    assert is_record_name(f"{ref.slug}.json")
    assert ref.tmux_name.startswith("loop-")


@given(_refs, st.randoms())
def test_a_ref_has_one_spelling_whatever_the_case_it_is_written_in(ref: WorkItemRef, rng: object) -> None:
    """Forges compare owner and repository names case-insensitively: OCTO/Demo#7 is octo/demo#7 (issue 16)."""
    text = "".join(c.upper() if rng.random() < 0.5 else c for c in str(ref).split(":", 1)[1])  # type: ignore[attr-defined]
    assert parse_ref(f"{ref.provider}:{text}") == ref
