"""Which issues a pull request delivers (A §2.3 X3/X4): closing references, the branch convention and the closing
keywords of its body.

X3's order is (a) GitHub's ``closingIssuesReferences`` — asked through GraphQL by the ticket provider, off the
request path, so it is prepended by the router — then (b) ``issue-<n>`` / ``issue/<n>`` in the head branch, then (c)
closing keywords in the body, with the pull request itself added last by the normalizer. A qualified keyword
(``octo/lib#7``, a full issue URL) names that repository's item (issue-183); a reference to the pull request itself
is ignored. A ref only the branch names is *unconfirmed*: the router checks it exists before routing by it (X5).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from the_loop.refs import WorkItemRef
from the_loop_github.refs import ref_for, ref_from_repository

__all__ = ["CLOSING_REFERENCES_QUERY", "branch_refs", "closing_references", "keyword_refs", "linked_refs"]

BRANCH = re.compile(r"(?:^|[^A-Za-z0-9])issue[-/](\d{1,10})(?![0-9])", re.IGNORECASE)
KEYWORD = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+"
    r"(?:https://(?P<host>[A-Za-z0-9.-]+(?::\d+)?)/(?P<url_owner>[A-Za-z0-9._-]+)/(?P<url_repo>[A-Za-z0-9._-]+)/issues/(?P<url_number>\d{1,10})"
    r"|(?:(?P<owner>[A-Za-z0-9._-]+)/(?P<repo>[A-Za-z0-9._-]+))?#(?P<number>\d{1,10})"
    r"|GH-(?P<gh_number>\d{1,10}))\b",
    re.IGNORECASE,
)
# X3(a): the issues GitHub itself will close when the pull request merges (first 25 are plenty for routing).
CLOSING_REFERENCES_QUERY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      closingIssuesReferences(first: 25) {
        nodes { number url repository { nameWithOwner name owner { login } } }
      }
    }
  }
}
"""


def _unique(refs: Iterable[WorkItemRef | None], entity: WorkItemRef | None) -> list[WorkItemRef]:
    found: list[WorkItemRef] = []
    for ref in refs:
        if ref is not None and ref != entity and ref not in found:
            found.append(ref)
    return found


def branch_refs(payload: Mapping[str, Any], branch: Any, entity: WorkItemRef | None = None) -> list[WorkItemRef]:
    """X3(b)/X4: the issues a branch name points at (``feat/issue-15``), always in the event's repository."""
    if not isinstance(branch, str):
        return []
    return _unique((ref_for(payload, int(match.group(1))) for match in BRANCH.finditer(branch)), entity)


def keyword_refs(payload: Mapping[str, Any], body: Any, entity: WorkItemRef | None) -> list[WorkItemRef]:
    """X3(c): the issues a pull request body says it closes; a qualified ref names that repository's item."""
    if not isinstance(body, str):
        return []
    found: list[WorkItemRef | None] = []
    for match in KEYWORD.finditer(body):
        if match["url_number"]:
            host = match["host"].lower()
            prefix = "" if host == "github.com" else f"{host}/"
            found.append(
                ref_from_repository(f"{prefix}{match['url_owner']}/{match['url_repo']}", int(match["url_number"]))
            )
        elif match["number"] and match["owner"]:
            repository = f"{entity.host}/" if entity is not None and entity.host else ""
            found.append(ref_from_repository(f"{repository}{match['owner']}/{match['repo']}", int(match["number"])))
        else:
            found.append(ref_for(payload, int(match["number"] or match["gh_number"])))
    return _unique(found, entity)


def linked_refs(
    payload: Mapping[str, Any], pull: Mapping[str, Any], entity: WorkItemRef | None
) -> tuple[list[WorkItemRef], list[WorkItemRef]]:
    """The issues ``pull`` (a pull request, or an issue that is one) says it delivers, best first, and those of
    them resting on the branch convention alone (unconfirmed, X5)."""
    head = pull.get("head")
    by_branch = branch_refs(payload, head.get("ref") if isinstance(head, Mapping) else None, entity)
    by_keyword = keyword_refs(payload, pull.get("body"), entity)
    return _unique([*by_branch, *by_keyword], entity), [ref for ref in by_branch if ref not in by_keyword]


def closing_references(data: Any, pull_request: WorkItemRef) -> list[WorkItemRef] | None:
    """X3(a): the refs in a ``closingIssuesReferences`` GraphQL answer (None when it names no pull request). Each
    node's repository comes from ``repository.nameWithOwner``, else ``owner.login`` + ``name``, else its URL, else
    the pull request's."""
    pull = _at(data, "data", "repository", "pullRequest")
    if not isinstance(pull, Mapping):
        return None
    nodes = _at(pull, "closingIssuesReferences", "nodes")
    found: list[WorkItemRef | None] = []
    for node in nodes if isinstance(nodes, list) else []:
        number = node.get("number") if isinstance(node, Mapping) else None
        if isinstance(number, bool) or not isinstance(number, int):
            continue
        found.append(ref_from_repository(_node_repository(node, pull_request), number))
    return _unique(found, pull_request)


def _at(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _node_repository(node: Mapping[str, Any], pull_request: WorkItemRef) -> str:
    host = f"{pull_request.host}/" if pull_request.host else ""
    name_with_owner = _at(node, "repository", "nameWithOwner")
    if isinstance(name_with_owner, str) and name_with_owner.count("/") == 1:
        return f"{host}{name_with_owner}"
    owner, name = _at(node, "repository", "owner", "login"), _at(node, "repository", "name")
    if isinstance(owner, str) and isinstance(name, str):
        return f"{host}{owner}/{name}"
    url = node.get("url")
    match = re.fullmatch(r"https?://([^/]+)/([^/]+)/([^/]+)/issues/\d+", url) if isinstance(url, str) else None
    if match:
        prefix = "" if match[1].lower() == "github.com" else f"{match[1].lower()}/"
        return f"{prefix}{match[2]}/{match[3]}"
    return pull_request.repository
