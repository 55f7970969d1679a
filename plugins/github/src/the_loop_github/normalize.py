"""A GitHub delivery (event name, delivery id, parsed payload) → core's :class:`~the_loop.models.InboundEvent`, or a
:class:`Drop` with its reason.

What is read, and only that (A §3 "payload fields read"): the event and action filters (F1, F2, F6), the work item
(X1/X2: an issue event yields that issue; X3: a pull-request event the issues it delivers, then itself; X4: a CI
event the pull requests it names and the issues its branches name), the actor (G2), the comment or review body
(never an issue or PR body), labels, the close reason, the CI conclusion (M8), the dedupe key (decision 6), what to
react on, and the excerpt: an allow-list per event (P3), never the raw payload, no ``user``/``sender`` objects, no
API URLs. A payload of the wrong shape anywhere reads as "absent", never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from the_loop.models import Actor, InboundEvent
from the_loop.refs import WorkItemRef
from the_loop_github.refs import SCHEME, host_of, ref_for, repository_key

__all__ = ["DEFAULT_EVENTS", "FORGED_KEY", "Drop", "normalize"]

# F2: what a receiver with no `webhooks.ghWebhook.events` list accepts (so `ping` and `push` drop).
DEFAULT_EVENTS = (
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "workflow_run",
    "check_run",
    "check_suite",
    "status",
)
# F1: only in-process ingresses may name a provider; a pushed payload that does is forged.
FORGED_KEY = "x-the-loop-provider"
# F6: the actions routed per event (a review also needs a body). `status` has no action.
ACTIONS: dict[str, frozenset[str]] = {
    "issue_comment": frozenset({"created"}),
    "pull_request_review": frozenset({"submitted"}),
    "pull_request_review_comment": frozenset({"created"}),
    "issues": frozenset({"opened", "labeled", "reopened", "closed"}),
    "pull_request": frozenset({"opened", "labeled", "reopened", "ready_for_review", "closed"}),
    "workflow_run": frozenset({"completed"}),
    "check_run": frozenset({"completed"}),
    "check_suite": frozenset({"completed"}),
    "status": frozenset({""}),
}
CI_EVENTS = frozenset({"workflow_run", "check_run", "check_suite", "status"})
# M8: only a completed check run with one of these conclusions, or a status in FAILING_STATES, is worth an agent's
# turn; a suite or workflow run only summarizes its check runs, which arrive on their own.
FAILING_CONCLUSIONS = frozenset({"failure", "timed_out", "action_required", "startup_failure"})
FAILING_STATES = frozenset({"failure", "error"})
LIFECYCLE_KINDS = {"opened": "opened", "labeled": "labeled", "reopened": "reopened", "closed": "closed"}

# P3: the fields each container contributes to the excerpt (`author` is added for comments and reviews).
FIELDS: dict[str, tuple[str, ...]] = {
    "comment": ("path", "line", "body", "html_url"),
    "review": ("state", "body", "html_url"),
    "issue": ("number", "title", "state", "state_reason", "html_url"),  # state_reason: how a close ends it
    "pull_request": ("number", "title", "state", "draft", "merged", "html_url"),
    "label": ("name",),
    "workflow_run": ("name", "event", "status", "conclusion", "head_branch", "html_url"),
    "check_run": ("name", "status", "conclusion", "output", "html_url", "details_url"),
    "check_suite": ("status", "conclusion", "head_branch", "head_sha"),
}
OUTPUT_FIELDS = ("title", "summary")
STATUS_FIELDS = ("state", "context", "description", "target_url")  # a `status` payload keeps them at its root
EXCERPTS: dict[str, tuple[str, ...]] = {
    "issue_comment": ("comment",),
    "pull_request_review_comment": ("comment",),
    "pull_request_review": ("review",),
    "issues": ("actor", "issue", "label"),
    "pull_request": ("actor", "pull_request", "label"),
    "workflow_run": ("workflow_run",),
    "check_run": ("check_run",),
    "check_suite": ("check_suite",),
    "status": ("status",),
}
FREE_TEXT = frozenset({"body", "description", "summary"})  # capped by core's renderer; other strings here
SHORT_CAP = 512
NODE_ID = re.compile(r"^[A-Za-z0-9_=+/-]{1,200}$")
BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


@dataclass(frozen=True)
class Drop:
    """A delivery that is not routed; ``reason`` is the ``routing.dropped`` reason."""

    reason: str


CLOSE_STATES = ("closed", "merged")


def close_key(ref: object, state: str) -> str:
    """Decision 6's key of an item's close: ``github:close:<ref>:<state>`` (``closed`` or ``merged``)."""
    return f"{SCHEME}:close:{ref}:{state}"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _login(user: Any) -> str | None:
    login = (_str(_dict(user).get("login")) or "").strip()
    return login or None


def _url(value: Any) -> str:
    """A web URL kept only when it is http(s) with a host, and short."""
    return value if host_of(value) and len(value) <= SHORT_CAP else ""


def _scalar(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return value if key in FREE_TEXT else value[:SHORT_CAP]
    if value is None or isinstance(value, bool | int | float):
        return value
    return None


def _pick(source: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    picked: dict[str, Any] = {}
    for key in fields:
        if key == "output":
            output = {name: _scalar(name, _dict(source.get(key)).get(name)) for name in OUTPUT_FIELDS}
            output = {name: value for name, value in output.items() if value is not None}
            if output:
                picked[key] = output
            continue
        value = _scalar(key, source.get(key))
        if value is not None:
            picked[key] = value
    return picked


def excerpt_for(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """P3: the allow-listed view of ``payload`` for the prompt. Unknown events use every known container present."""
    containers = EXCERPTS.get(event) or ("actor", *FIELDS)
    excerpt: dict[str, Any] = {}
    for name in containers:
        if name == "actor":
            login = _login(payload.get("sender"))
            if login:
                excerpt["actor"] = login
        elif name == "status":
            excerpt.update(_pick(payload, STATUS_FIELDS))
        elif isinstance(payload.get(name), Mapping):
            picked = _pick(payload[name], FIELDS[name])
            if name in ("comment", "review"):
                login = _login(payload[name].get("user"))
                if login:
                    picked["author"] = login
            if picked:
                excerpt[name] = picked
    return excerpt


def _pull_request_numbers(event: str, payload: Mapping[str, Any]) -> list[Any]:
    """X4 (entity part): the PRs a CI event names."""
    if event == "check_run":
        run = _dict(payload.get("check_run"))
        lists = [run.get("pull_requests"), _dict(run.get("check_suite")).get("pull_requests")]
    elif event in ("check_suite", "workflow_run"):
        lists = [_dict(payload.get(event)).get("pull_requests")]
    else:
        lists = []
    return [_dict(item).get("number") for items in lists if isinstance(items, list) for item in items]


def _ci_branches(event: str, payload: Mapping[str, Any]) -> list[Any]:
    """X4 (branch part): the branch names a CI event carries; a ``status`` only its ``branches[].name``."""
    if event == "status":
        branches = payload.get("branches")
        return [_dict(branch).get("name") for branch in branches] if isinstance(branches, list) else []
    run = _dict(payload.get(event))
    if event == "check_run":
        return [_dict(run.get("check_suite")).get("head_branch")]
    return [run.get("head_branch")]


def _ci_conclusion(event: str, payload: Mapping[str, Any]) -> str:
    """M8: ``failure`` for a failing completed check run or status; otherwise what it says (``summary`` for a
    suite or workflow run, whatever its result)."""
    if event == "status":
        state = _str(payload.get("state")) or ""
        return "failure" if state in FAILING_STATES else state[:SHORT_CAP]
    if event != "check_run":
        return "summary"
    conclusion = _str(_dict(payload.get("check_run")).get("conclusion")) or ""
    return "failure" if conclusion in FAILING_CONCLUSIONS else conclusion[:SHORT_CAP]


def _from_fork(event: str, payload: Mapping[str, Any]) -> bool:
    """Whether the CI ran on another repository's branch (a fork): its branch name, chosen by an outsider, names
    nothing here. Judged on the head repository the payload names; none named means the event's own."""
    run = _dict(payload.get(event))
    head = _dict(run.get("head_repository") or _dict(run.get("check_suite")).get("head_repository"))
    name = _str(head.get("full_name")) or ""
    own = _str(_dict(payload.get("repository")).get("full_name")) or ""
    return bool(name and own) and name.lower() != own.lower()


def _ci_refs(event: str, payload: Mapping[str, Any]) -> tuple[list[WorkItemRef], list[WorkItemRef]]:
    """X4: the pull requests a CI event names, then the issues its branches name (those unconfirmed, X5)."""
    from the_loop_github.linkage import branch_refs

    pulls = [ref for ref in (ref_for(payload, n) for n in _pull_request_numbers(event, payload)) if ref is not None]
    names = [] if _from_fork(event, payload) else _ci_branches(event, payload)
    branches = [ref for name in names for ref in branch_refs(payload, name)]
    pulls = list(dict.fromkeys(pulls))
    return pulls, [ref for ref in dict.fromkeys(branches) if ref not in pulls]


def _subject(event: str, payload: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """The issue or PR the event is on, and whether it is a pull request."""
    if event in ("issues", "issue_comment"):
        issue = _dict(payload.get("issue"))
        return issue, "pull_request" in issue
    if event.startswith("pull_request"):
        return _dict(payload.get("pull_request")), True
    return {}, False


def _labels(subject: Mapping[str, Any]) -> tuple[str, ...]:
    labels = subject.get("labels")
    if not isinstance(labels, list):
        return ()
    names = (_str(_dict(label).get("name")) for label in labels)
    return tuple(dict.fromkeys(name for name in names if name))


def _kind(event: str, action: str) -> str:
    if event == "issue_comment":
        return "comment"
    if event == "pull_request_review":
        return "review"
    if event == "pull_request_review_comment":
        return "review-comment"
    if event in CI_EVENTS:
        return "ci"
    if event in ("issues", "pull_request"):
        return LIFECYCLE_KINDS.get(action, "other")
    return "other"


def _object_key(kind: str, obj: Mapping[str, Any]) -> str | None:
    """The object's own dedupe key: its node id, or, when that is missing or malformed, its numeric id (a replay
    stripped of its node id must still be a duplicate; the ``id:`` prefix keeps the two spaces apart)."""
    node_id = _str(obj.get("node_id"))
    if node_id and NODE_ID.match(node_id):
        return f"{SCHEME}:{kind}:{node_id}"
    number = _positive(obj.get("id"))
    return f"{SCHEME}:{kind}:id:{number}" if number else None


def _head_branch(payload: Mapping[str, Any], repository: str) -> str:
    """The pull request's head branch, when its head lives in the pull request's own repository ("" for a fork's,
    whose branch the repository's clone cannot fetch, and for anything that is not a plain branch name)."""
    head = _dict(_dict(payload.get("pull_request")).get("head"))
    name = _str(head.get("ref")) or ""
    full_name = _str(_dict(head.get("repo")).get("full_name")) or ""
    if not name or not repository or full_name.casefold() != "/".join(repository.split("/")[-2:]).casefold():
        return ""
    return name if BRANCH.match(name) and ".." not in name else ""


def normalize(
    event: str,
    delivery_id: str,
    payload: Mapping[str, Any],
    *,
    events: Sequence[str] = (),
    received_at: str = "",
    transport: str = "webhook",
) -> InboundEvent | Drop:
    """Normalize one delivery. ``events`` is ``webhooks.ghWebhook.events`` (empty: :data:`DEFAULT_EVENTS`)."""
    if FORGED_KEY in payload:
        return Drop("forged-provider")
    if event not in (events or DEFAULT_EVENTS):
        return Drop("disabled-event")
    action = _str(payload.get("action")) or ""
    allowed = ACTIONS.get(event)
    if allowed is not None and action not in allowed:
        return Drop("ignored-action")
    review = _dict(payload.get("review"))
    if event == "pull_request_review" and not (_str(review.get("body")) or "").strip():
        return Drop("ignored-action")  # F6: a review is routed only with something to say

    kind = _kind(event, action)
    subject, is_pull = _subject(event, payload)
    entity = ref_for(payload, subject.get("number"), subject) if subject else None
    unconfirmed: list[WorkItemRef] = []
    pull_request = entity if entity is not None and is_pull else None
    if kind == "ci":
        pulls, unconfirmed = _ci_refs(event, payload)
        candidates: tuple[WorkItemRef, ...] = (*pulls, *unconfirmed)
        pull_request = pulls[0] if pulls else None
    elif entity is not None and is_pull:
        from the_loop_github.linkage import linked_refs

        linked, unconfirmed = linked_refs(payload, subject, entity)
        candidates = (*linked, entity)  # X3: the issues it delivers, then itself
    else:
        candidates = (entity,) if entity is not None else ()
    comment = _dict(payload.get("comment"))
    repository = repository_key(payload)

    actor_login = None
    body = None
    if event in ("issue_comment", "pull_request_review_comment"):
        actor_login, body = _login(comment.get("user")), _str(comment.get("body"))
    elif event == "pull_request_review":
        actor_login, body = _login(review.get("user")), _str(review.get("body"))
    elif kind != "ci":
        actor_login = _login(payload.get("sender"))

    closed = None
    if action == "closed" and event in ("issues", "pull_request"):
        closed = "issue-closed" if event == "issues" else "pr-merged" if subject.get("merged") is True else "pr-closed"

    dedupe_key = None
    if event == "issue_comment":
        dedupe_key = _object_key("comment", comment)
    elif event == "pull_request_review":
        dedupe_key = _object_key("review", review)
    elif event == "pull_request_review_comment":
        dedupe_key = _object_key("review-comment", comment)
    elif closed and entity is not None:
        dedupe_key = close_key(entity, "merged" if closed == "pr-merged" else "closed")

    ack: dict[str, str] = {}
    comment_id = _positive(comment.get("id"))
    if repository and event in ("issue_comment", "pull_request_review_comment") and comment_id:
        ack = {
            "kind": "issue-comment" if event == "issue_comment" else "review-comment",
            "repository": repository,
            "id": str(comment_id),
        }
    elif repository and entity is not None:
        ack = {"kind": "issue", "repository": repository, "id": str(entity.number)}

    if event in ("issue_comment", "pull_request_review_comment"):
        url = comment.get("html_url")
    elif event == "pull_request_review":
        url = review.get("html_url")
    elif event == "status":
        url = payload.get("target_url")
    else:
        url = _dict(payload.get(event)).get("html_url") if kind == "ci" else subject.get("html_url")
    label = _str(_dict(payload.get("label")).get("name")) if action == "labeled" else None
    head_branch = _head_branch(payload, repository) if event.startswith("pull_request") else ""
    return InboundEvent(
        dedupe_key=dedupe_key or delivery_id,
        delivery_id=delivery_id,
        provider=SCHEME,
        transport=transport,  # type: ignore[arg-type]
        event=event,
        action=action,
        kind=kind,  # type: ignore[arg-type]
        repository=repository,
        actor=Actor(provider=SCHEME, id=actor_login) if actor_login else None,
        body=body,
        entity=str(entity) if entity is not None else None,
        work_items=tuple(str(ref) for ref in candidates),
        pull_request=str(pull_request) if pull_request is not None else None,
        head_branch=head_branch,
        unconfirmed=tuple(str(ref) for ref in unconfirmed),
        conclusion=_ci_conclusion(event, payload) if kind == "ci" else "",
        labels=_labels(subject),
        label_added=label or None,
        closed=closed,  # type: ignore[arg-type]
        url=_url(url),
        excerpt=excerpt_for(event, payload),
        ack=ack,
        received_at=received_at,
        # D4: a comment or review is one object whichever ingress (or redelivery) brings it, so a control command in
        # it is claimed in local/control-deliveries.json and never runs twice — even once the inbox has forgotten it
        shared_dedupe=bool(dedupe_key) and kind in ("comment", "review", "review-comment"),
    )
