"""Which issues a pull request delivers: the branch convention and closing keywords (A §2.3 X3), through the
normalizer on real payloads."""

from __future__ import annotations

import gh_payloads
import pytest

from the_loop_github.normalize import normalize


def _pull_request_event(body: str, branch: str = "main-fix") -> tuple[str, ...]:
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.opened"), number=20, sender="octocat")
    payload["pull_request"]["body"] = body
    payload["pull_request"]["head"]["ref"] = branch
    event = normalize("pull_request", "d-1", payload)
    return event.work_items  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "branch", "expected"),
    [
        ("Fixes #15", "main-fix", ("github:octo/repo#15",)),
        ("closes: #15, resolved GH-16", "x", ("github:octo/repo#15", "github:octo/repo#16")),
        ("This fixes octo/lib#7", "x", ("github:octo/lib#7",)),  # issue-183: a qualified ref names that repo
        ("resolves https://github.com/octo/other/issues/3", "x", ("github:octo/other#3",)),
        ("", "feat/issue-999", ("github:octo/repo#999",)),
        ("Fixes #15", "issue-15", ("github:octo/repo#15",)),  # each ref once, branch first
        ("fixes #20", "x", ()),  # a reference to itself is ignored
        ("mentions #15 without a keyword", "x", ()),
        ("prefixes #15", "x", ()),
    ],
)
def test_x3_linked_issues_come_first_then_the_pull_request(body: str, branch: str, expected: tuple[str, ...]) -> None:
    assert _pull_request_event(body, branch) == (*expected, "github:octo/repo#20")


def test_a_comment_on_a_pull_request_reads_its_body_for_closing_keywords() -> None:
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=20, body="lgtm", login="octocat", pull_request=True
    )
    payload["issue"]["body"] = "Closes #15"
    event = normalize("issue_comment", "d-2", payload)
    assert event.work_items == ("github:octo/repo#15", "github:octo/repo#20")  # type: ignore[union-attr]
    assert event.pull_request == "github:octo/repo#20"  # type: ignore[union-attr]
    assert event.body == "lgtm"  # type: ignore[union-attr]  # the PR body is read for linkage only, never a command
