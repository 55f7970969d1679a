"""Which issues a pull request delivers (A §2.3 X3): the branch convention and the closing keywords of its body.

Refs come out in X3's order — branch convention, then closing keywords — with the pull request itself added last by
the normalizer. A qualified keyword (``octo/lib#7``, a full issue URL) names that repository's item (issue-183); a
reference to the pull request itself is ignored. Closing references through GraphQL come with a later change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from the_loop.refs import WorkItemRef
from the_loop_github.refs import ref_for, ref_from_repository

BRANCH = re.compile(r"(?:^|[^A-Za-z0-9])issue[-/](\d{1,10})(?![0-9])", re.IGNORECASE)
KEYWORD = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+"
    r"(?:https://(?P<host>[A-Za-z0-9.-]+(?::\d+)?)/(?P<url_owner>[A-Za-z0-9._-]+)/(?P<url_repo>[A-Za-z0-9._-]+)/issues/(?P<url_number>\d{1,10})"
    r"|(?:(?P<owner>[A-Za-z0-9._-]+)/(?P<repo>[A-Za-z0-9._-]+))?#(?P<number>\d{1,10})"
    r"|GH-(?P<gh_number>\d{1,10}))\b",
    re.IGNORECASE,
)


def linked_refs(payload: Mapping[str, Any], pull: Mapping[str, Any], entity: WorkItemRef | None) -> list[WorkItemRef]:
    """The issues ``pull`` (a pull request, or an issue that is one) says it delivers, best first."""
    found: list[WorkItemRef] = []

    def add(ref: WorkItemRef | None) -> None:
        if ref is not None and ref != entity and ref not in found:
            found.append(ref)

    head = pull.get("head")
    branch = head.get("ref") if isinstance(head, Mapping) else None
    if isinstance(branch, str):
        for match in BRANCH.finditer(branch):
            add(ref_for(payload, int(match.group(1))))
    body = pull.get("body")
    if isinstance(body, str):
        for match in KEYWORD.finditer(body):
            if match["url_number"]:
                host = match["host"].lower()
                prefix = "" if host == "github.com" else f"{host}/"
                add(ref_from_repository(f"{prefix}{match['url_owner']}/{match['url_repo']}", int(match["url_number"])))
            elif match["number"] and match["owner"]:
                repository = f"{entity.host}/" if entity is not None and entity.host else ""
                add(ref_from_repository(f"{repository}{match['owner']}/{match['repo']}", int(match["number"])))
            else:
                add(ref_for(payload, int(match["number"] or match["gh_number"])))
    return found
