"""The Jira poll source (J10-J12, J15, J16) for ``polling.sources[]`` entries with ``provider: jira``.

Per configured project, one JQL search built only from validated, quoted config; each armed ticket's thread read
whole (a failing page raises, so ``poll.seenComments`` never advances on a partial list). First sight baselines the
thread, except control comments not yet executed here. A ticket with a live session that is no longer listed and
that Jira says is done becomes a closure with no sender (cleanup is then deferred, ``no-actor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import PollSource, ServiceContext
from the_loop.refs import RefError, parse_ref
from the_loop.toolkit import Inbox
from the_loop.toolkit import claims as control_claims
from the_loop_jira.client import POLL_TIMEOUT_SECONDS, JiraClient, JiraError, jira_label
from the_loop_jira.ingest import ingest_comment, is_command, note_reopened
from the_loop_jira.normalize import closure_event, comment_key, origin
from the_loop_jira.refs import SCHEME, ref_for
from the_loop_jira.ticketing import client_for, settings_of

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop_jira.client import JiraIssue

__all__ = ["JiraPollSource", "preflight"]


def preflight(config: LoadedConfig) -> tuple[list[tuple[str, list[str]]], list[dict[str, Any]]]:
    """(project, arming labels) pairs to search, and the scopes that fail before anything is sent (J11)."""
    settings = settings_of(config)
    scopes: list[tuple[str, list[str]]] = []
    failed: list[dict[str, Any]] = []
    for source in config.core.polling.sources:
        if source.provider != SCHEME:
            continue
        labels = list(source.labels) or list(config.core.routing.auto_execute_labels)
        for project in source.projects:
            scope = f"jira:{settings.site}/{project}"
            problem = ""
            if project not in settings.projects:
                problem = f"project {project!r} is not under integrations.jira.projects"
            elif not settings.projects[project].repository:
                problem = f"project {project} is mirror-only (no repository): it is never a work-item source"
            elif not labels:
                problem = "no arming label (polling.sources[].labels or routing.autoExecuteLabels)"
            else:
                try:
                    [jira_label(label) for label in labels]
                except Exception as exc:
                    problem = str(exc)
            if problem:
                failed.append({"scope": scope, "error": problem, "permanent": True})
            elif (project, labels) not in scopes:
                scopes.append((project, labels))
    return scopes, failed


class JiraPollSource(PollSource):
    name = "jira"

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config
        self.inbox = Inbox.for_config(config)
        self.store = config.store
        self._throttled = ""  # why this cycle stopped asking the site (a 429 or a timeout), or ""

    @property
    def client(self) -> JiraClient:
        return client_for(self.config, timeout=POLL_TIMEOUT_SECONDS)  # J7: poll reads wait longer

    def poll_once(self, context: ServiceContext) -> dict[str, Any]:
        settings = settings_of(self.config)
        counts: dict[str, Any] = {"itemsSeen": 0, "commentsForwarded": 0, "closures": 0, "failures": 0}
        scopes, failed = preflight(self.config)
        self.client.credentials()  # a missing credential fails the whole cycle, naming the variables
        listed: set[str] = set()
        polled = 0
        self._throttled = ""
        for project, labels in scopes:
            if self._halted(context, counts):
                break
            try:
                issues = self.client.search(project, labels)
            except JiraError as exc:
                failed.append({"scope": f"jira:{settings.site}/{project}", "error": str(exc)})
                self._note(exc)
                continue
            polled += 1
            for issue in issues:
                if self._halted(context, counts):
                    break
                ref = ref_for(settings.site, issue.key)
                if ref is None:
                    continue
                listed.add(str(ref))
                counts["itemsSeen"] += 1
                forwarded = self._guarded(ref, issue)
                if forwarded is None:
                    counts["failures"] += 1
                else:
                    counts["commentsForwarded"] += forwarded
        searched = {project for project, _ in scopes}
        if not self._halted(context, counts):  # a throttled or stopping cycle asks the site nothing more
            counts["closures"] = self._closures(listed, searched, context)
        counts["scopesPolled"] = polled
        counts["scopesFailed"] = failed
        return counts

    # ----------------------------------------------------------------------------------------------- item

    def _halted(self, context: ServiceContext, counts: dict[str, Any]) -> bool:
        """Stop here: a stop was asked (``interrupted``) or the site throttled us this cycle (``throttled``)."""
        if context.should_stop():
            counts["interrupted"] = True
        if self._throttled:
            counts["throttled"] = self._throttled
        return bool(counts.get("interrupted") or self._throttled)

    def _note(self, exc: JiraError) -> None:
        """A 429 or a timeout: the site is struggling, so this cycle stops asking it (the library already waited)."""
        if exc.throttled and not self._throttled:
            self._throttled = str(exc)[:300]

    def _guarded(self, ref: WorkItemRef, issue: JiraIssue) -> int | None:
        """:meth:`_item`, with any failure confined to this ticket: logged, retried next cycle, the rest go on."""
        try:
            return self._item(ref, issue)
        except JiraError as exc:
            self._note(exc)
            error = str(exc)
        except Exception as exc:  # a state or markup failure on one ticket must not starve the others
            error = f"{type(exc).__name__}: {exc}"
        events.emit("poll.item_error", level="warning", work_item=str(ref), error=error[:300], will_retry=True)
        return None

    def _item(self, ref: WorkItemRef, issue: JiraIssue) -> int:
        """Read the whole thread and forward what is new; raises when the thread could not be read (the ledger
        then stays where it was)."""
        comments = self.client.comments(ref)
        record = self.store.read(ref) or {}
        if note_reopened(self.config, ref, record, "poll"):  # listed: armed and not done
            record = self.store.read(ref) or {}
        ledger = dict(record.get("poll") or {})
        first_sight = "seenComments" not in ledger
        seen = [str(value) for value in ledger.get("seenComments") or ()]
        claimed = set(control_claims.claimed(self.config.state)) if first_sight else set()
        forwarded = 0
        for comment in comments:
            if comment.id in seen:
                continue
            pending_command = (
                origin(comment) != "self"
                and is_command(self.config, comment.body_md)
                and comment_key(ref.host, comment.id) not in claimed
            )
            if first_sight and not pending_command:
                seen.append(comment.id)  # baseline: what was said before we looked is history
                continue
            result = ingest_comment(self.config, self.inbox, ref, issue, comment, "poll")
            forwarded += result == "forwarded"
            seen.append(comment.id)
        if first_sight or seen != list(ledger.get("seenComments") or ()):
            self.store.update_section(ref, "poll", {**ledger, "seenComments": seen})
        return forwarded

    # -------------------------------------------------------------------------------------------- closures

    def _closures(self, listed: set[str], searched: set[str], context: ServiceContext) -> int:
        """J16: a live session's ticket that left the listing and is done in Jira closes, with no sender."""

        site = settings_of(self.config).site
        closures = 0
        for record in self.config.registry.records():
            try:
                ref = parse_ref(record.work_item)
            except RefError:
                continue
            own = record.own
            if ref.provider != SCHEME or ref.host != site or ref.owner not in searched or str(ref) in listed:
                continue
            if own is None or not own.live:
                continue
            if context.should_stop() or self._throttled:
                break
            try:
                issue = self.client.issue(ref)
            except JiraError as exc:
                self._note(exc)
                events.emit("poll.item_error", level="warning", work_item=str(ref), error=str(exc), will_retry=True)
                continue
            if issue.moved_to or issue.status_category != "done":
                continue
            event = closure_event(ref, issue, "poll")
            if self.inbox.put(event.dedupe_key, event.inbox_entry()):
                events.emit("poll.closure_detected", work_item=str(ref), delivery_id=event.delivery_id)
                closures += 1
        return closures
