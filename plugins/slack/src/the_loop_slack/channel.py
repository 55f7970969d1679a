"""Slack as a :class:`~the_loop.interfaces.Channel`: transport and rendering only, through slack-sdk.

Core decides when to open, what to post, which replies count and where they go (:mod:`the_loop.channels`); this
class turns that into Web API calls against ``channels.slack.apiBaseUrl``. Tokens are read from the variables
``botTokenEnv`` / ``appTokenEnv`` name, at each call, and never logged, stored or put in an error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from the_loop.interfaces import ChannelError, ChannelMessage, InboundMessage, Press, ReadingChannel

if TYPE_CHECKING:
    import httpx
    from slack_sdk import WebClient

    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop_slack.config import SlackSettings

TOKEN_SHAPED = re.compile(r"\b(xox[abpr]|xapp)-[A-Za-z0-9-]+")
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9_-]{1,20}$")
REACTION = re.compile(r"^[a-z0-9_+-]{1,100}$")
MAX_CHARS_FLOOR, MAX_CHARS_DEFAULT, MAX_CHARS_CAP = 200, 1500, 2900
HEADER_LIMIT = 150
TIMEOUT = 10  # seconds per Web API call: a slow Slack must not hold a publisher for long
TITLES = {
    "session.awaiting_input": "Question from the agent",
    "session.blocked": "Waiting for a decision",
    "session.idle": "No activity",
    "budget.warning": "Budget nearly spent",
    "budget.exhausted": "Budget spent: paused",
    "admission.queued": "Queued for a slot",
    "decision-pending": "Decision needed",
    "phase-approval-pending": "Approval needed",
    "pr-review-pending": "Pull request ready for review",
    "security-sign-off-pending": "Security sign-off needed",
    "conflict-escalated": "Escalated",
    "work-item-complete": "Done",
    "comment.agent": "The agent commented",
    "comment.human": "New comment",
    "work-item.closed": "Closed",
    "channel.moved": "Conversation moved",
}
_names: dict[tuple[str, str], str] = {}  # (api base, channel name) -> id, resolved once per process
_missed: dict[tuple[str, str], tuple[float, bool]] = {}  # a name not found: (when, listing cut short)
NAME_RETRY = 3600.0
NAME_PAGES = 20


class Redacting(logging.Filter):
    """slack-sdk logs requests and payloads at debug: no token-shaped string leaves through these loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = TOKEN_SHAPED.sub("[redacted]", message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True


def guarded_logger(name: str) -> logging.Logger:
    """The logger slack-sdk gets: its records pass :class:`Redacting` first."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, Redacting) for f in logger.filters):
        logger.addFilter(Redacting())
    return logger


def settings_of(config: LoadedConfig) -> SlackSettings:
    return config.section("channels.slack")


def fit(text: str, limit: int, mode: str = "digest") -> str:
    """``text`` within ``limit`` characters: cut at a line or word when it can be, marked as shortened."""
    if len(text) <= limit:
        return text
    note = " … (shortened; the full text is on the ticket)" if mode == "digest" else "…"
    room = max(0, limit - len(note))
    cut = text[:room]
    for separator in ("\n\n", "\n", " "):
        at = cut.rfind(separator)
        if at > room // 2:
            cut = cut[:at]
            break
    return cut.rstrip() + note


class SlackChannel(ReadingChannel):
    name = "slack"

    def __init__(self, config: LoadedConfig) -> None:
        super().__init__(config)
        self.settings = settings_of(config)
        self._bot_id: str | None = None
        self.transport: httpx.BaseTransport | None = None  # a test seam for attachment fetches (issue-416)

    # ------------------------------------------------------------------------------------------ settings

    @classmethod
    def enabled(cls, config: LoadedConfig) -> bool:
        try:
            return bool(settings_of(config).enabled)
        except KeyError:  # a config loaded without this plugin has no section: off
            return False

    def subscribed(self) -> Collection[str]:
        return tuple(self.settings.subscribe)

    def granted(self) -> Collection[str]:
        return tuple(self.settings.publish)

    def max_chars(self) -> int:
        value = self.settings.max_chars
        return MAX_CHARS_DEFAULT if value < MAX_CHARS_FLOOR else min(value, MAX_CHARS_CAP)

    def read_mode(self) -> Literal["poll", "socket", "off"]:
        mode = self.settings.read.mode
        return mode if mode in ("poll", "socket") else "off"  # unknown or gateway (later): never a local reader

    def read_interval(self) -> float:
        return float(self.settings.read.interval_seconds)

    def catch_up_interval(self) -> float:
        seconds = self.settings.read.catch_up_seconds
        return 0.0 if seconds <= 0 else float(max(60, seconds))  # 1-59 reads as 60

    # -------------------------------------------------------------------------------------------- clients

    def token(self, which: Literal["bot", "app"] = "bot") -> str:
        variable = self.settings.bot_token_env if which == "bot" else self.settings.app_token_env
        value = os.environ.get(variable, "")
        if not value:
            raise ChannelError(f"no Slack {which} token: set the environment variable {variable}")
        return value

    def client(self, token: str | None = None) -> WebClient:
        """A WebClient on ``apiBaseUrl``, built per use so a rotated token is picked up at the next call."""
        from slack_sdk import WebClient

        base = self.settings.api_base_url
        return WebClient(
            token=token or self.token(),
            base_url=base if base.endswith("/") else base + "/",
            timeout=TIMEOUT,
            logger=guarded_logger("the_loop_slack.web"),
        )

    def fetch_attachment(self, url: str, limit: int) -> bytes:
        """A file on a message, with the bot token, only from Slack's hosts or ``apiBaseUrl``'s (issue-416)."""
        from the_loop_slack.files import allowed, fetch

        if not allowed(url, self.settings.api_base_url):  # refused before the token is even read
            raise ChannelError("attachment host not allowed")
        return fetch(url, self.token(), limit, self.settings.api_base_url, self.transport)

    def _call(self, method: Callable[..., Any], **kwargs: Any) -> Any:
        """One Web API call; a refusal becomes :class:`ChannelError` (a 429 carrying its ``Retry-After``)."""
        from slack_sdk.errors import SlackApiError, SlackRequestError

        try:
            return method(**kwargs)
        except SlackApiError as exc:
            response = exc.response
            status = getattr(response, "status_code", 0)
            retry_after = None
            if status == 429:
                headers = {str(k).lower(): v for k, v in (getattr(response, "headers", {}) or {}).items()}
                raw = headers.get("retry-after", "")
                try:
                    retry_after = float(raw[0] if isinstance(raw, list) else raw)
                except (TypeError, ValueError):
                    retry_after = 60.0
            code = ""
            if isinstance(getattr(response, "data", None), dict):
                code = str(response.data.get("error") or "")
            raise ChannelError(f"slack refused ({status} {code or 'error'})", retry_after=retry_after) from None
        except (SlackRequestError, OSError) as exc:
            raise ChannelError(f"slack unreachable: {type(exc).__name__}") from None

    def home(self) -> str:
        """The channel id roots go to: ``channels.slack.channel`` as an id, or a name resolved once per process (a
        name not found is looked up again at most hourly; meanwhile every post is a refusal, never a fallback)."""
        raw = self.settings.channel.strip()
        if not raw:
            raise ChannelError("no Slack channel: set channels.slack.channel (see the-loop add-channel for rooms)")
        if CHANNEL_ID.match(raw):
            return raw
        name = raw.lstrip("#")
        key = (self.settings.api_base_url, name)
        missed = _missed.get(key)
        if key not in _names and (missed is None or time.monotonic() - missed[0] >= NAME_RETRY):
            truncated = self._look_up(key)
            if key not in _names:
                _missed[key] = (time.monotonic(), truncated)
        if key not in _names:
            cut = " (the workspace listing was cut short: give the channel id)" if _missed[key][1] else ""
            raise ChannelError(f"channels.slack.channel {raw!r} names no channel the bot can see{cut}")
        return _names[key]

    def _look_up(self, key: tuple[str, str]) -> bool:
        """Page ``conversations.list`` (public and private, ≤20 pages) for the name; whether it was cut short."""
        client = self.client()
        cursor = ""
        for _page in range(NAME_PAGES):
            page = self._call(
                client.conversations_list,
                limit=1000,
                cursor=cursor or None,
                exclude_archived=True,
                types="public_channel,private_channel",
            )
            for found in page.get("channels") or []:
                if found.get("name") == key[1]:
                    _names[key] = str(found["id"])
                    return False
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return False
        return True

    # --------------------------------------------------------------------------------------------- posting

    def open_conversation(self, ref: WorkItemRef, title: str) -> Mapping[str, Any]:
        sentence = "Every message about this work item lands here as a reply."
        if self.read_mode() != "off":
            sentence += " Replies from authorized people reach its session."
        return self._intro(ref, self.home(), sentence)

    def open_room(self, ref: WorkItemRef, room: str) -> Mapping[str, Any]:
        if not CHANNEL_ID.match(room):
            raise ChannelError("a room is named by its conversation id (C…, G…, D…)")
        sentence = "This channel is this work item's conversation: every message about it is posted here."
        if self.read_mode() != "off":
            sentence += " Messages from authorized people here reach its session."
        return self._intro(ref, room, sentence)

    def _intro(self, ref: WorkItemRef, where: str, sentence: str) -> Mapping[str, Any]:
        """The top-level message a conversation starts with: the ref, a sentence, a button to the ticket."""
        from the_loop.toolkit import provider_url

        return self._top_level(where, f"the-loop · {ref}", sentence, provider_url(ref, self.config) or "")

    def open_thread(self, room: str, title: str, text: str) -> Mapping[str, Any]:
        where = room.strip() or self.home()
        if not CHANNEL_ID.match(where):
            raise ChannelError("a standing session's Slack channel is named by its conversation id (C…, G…, D…)")
        return self._top_level(where, title, text, "")

    def _top_level(self, where: str, title: str, sentence: str, url: str) -> Mapping[str, Any]:
        """Post a header, a sentence and (when given) a button; the binding of the thread it starts."""
        client = self.client()
        header = title[:HEADER_LIMIT]
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": header}},
            {"type": "section", "text": {"type": "mrkdwn", "text": sentence}},
        ]
        if url:
            blocks.append(_button(url))
        posted = self._call(client.chat_postMessage, channel=where, text=f"{header}\n{sentence}", blocks=blocks)
        ts = str(posted.get("ts") or "")
        if not ts:
            raise ChannelError("slack returned no ts for the root message")
        channel = str(posted.get("channel") or where)
        permalink = ""
        try:
            permalink = str(self._call(client.chat_getPermalink, channel=channel, message_ts=ts).get("permalink") or "")
        except ChannelError:
            pass  # best-effort: the binding stands without it
        return {"channel": channel, "thread": ts, "permalink": permalink}

    def render(self, message: ChannelMessage) -> tuple[str, list[dict[str, Any]]]:
        """(fallback text, blocks) within ``message.max_chars``."""
        title = TITLES.get(message.event_type, message.event_type)
        who = f" · {message.actor}" if message.actor else ""
        header = f"{title}{who} · {message.work_item}"[:HEADER_LIMIT] if message.work_item else title
        limit = message.max_chars
        verbosity = self.settings.verbosity if self.settings.verbosity in ("quiet", "normal", "verbose") else "normal"
        body = "" if verbosity == "quiet" else fit(message.text.strip(), limit, self.settings.long_messages)
        blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": header}}]
        if body:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": body}})
        if verbosity == "verbose":
            detail = f"event: {message.event_type}"
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": detail}]})
        if message.url:
            blocks.append(_button(message.url))
        fallback = fit("\n".join(part for part in (header, body, message.url) if part), limit, "truncate")
        return fallback, blocks

    def publish(self, binding: Mapping[str, Any], message: ChannelMessage) -> None:
        text, blocks = self.render(message)
        channel = str(binding.get("channel") or "") or self.home()
        thread = str(binding.get("thread") or "")
        extra = {"thread_ts": thread} if thread else {}  # a room takes no thread_ts (Slack refuses "")
        posted = self._call(self.client().chat_postMessage, channel=channel, text=text, blocks=blocks, **extra)
        if not posted.get("ts"):
            raise ChannelError("slack returned no ts for the reply")

    def health(self) -> str:
        token = "set" if os.environ.get(self.settings.bot_token_env) else "unset"
        where = self.settings.channel or "(no channel)"
        return f"channel {where}; bot token {self.settings.bot_token_env} {token}; read {self.read_mode()}"

    # --------------------------------------------------------------------------------------------- reading

    def bot_identity(self) -> str:
        if self._bot_id is None:
            try:
                self._bot_id = str(self._call(self.client().auth_test).get("user_id") or "")
            except ChannelError:
                return ""  # unknown this time: the bot_id check still holds
        return self._bot_id

    def read_replies(self, binding: Mapping[str, Any], after: str) -> list[InboundMessage]:
        from the_loop.toolkit import channels

        channel, root = str(binding["channel"]), str(binding["thread"])
        client = self.client()
        found: list[InboundMessage] = []
        cursor = ""
        while True:  # every page (upstream read one)
            page = self._call(
                client.conversations_replies,
                channel=channel,
                ts=root,
                oldest=after or root,
                limit=200,
                cursor=cursor or None,
            )
            for raw in page.get("messages") or []:
                ts = str(raw.get("ts") or "")
                if ts and ts != root and channels.newer(ts, after):
                    found.append(inbound(channel, raw, root))
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                break
        found.sort(key=lambda m: float(m.message_id) if _numeric(m.message_id) else 0.0)
        return found

    def acknowledge(self, message: InboundMessage, state: Literal["received", "completed", "error"]) -> None:
        reactions = self.settings.reactions
        name = str(getattr(reactions, state, "") or "").strip(":")
        if not reactions.enabled or not REACTION.match(name):
            return
        self._call(self.client().reactions_add, channel=message.channel_id, name=name, timestamp=message.message_id)

    def tell(self, message: InboundMessage, text: str) -> None:
        """An ephemeral answer only the writer sees, in the message's thread."""
        extra = {"thread_ts": message.thread_id} if message.thread_id != message.message_id else {}
        self._call(
            self.client().chat_postEphemeral, channel=message.channel_id, user=message.author_id, text=text, **extra
        )

    def kickoff(self) -> Mapping[str, Any]:
        if not self.settings.channel.strip():
            return {}
        kick = self.settings.kickoff
        return {"conversation": self.home(), "repo": kick.repo, "labels": list(kick.labels)}

    def read_top_level(self, conversation: str, after: str) -> list[InboundMessage]:
        """``conversations.history`` newer than ``after`` (every page; only the newest message for a baseline),
        thread replies left out (they are read through their root's binding)."""
        from the_loop.toolkit import channels

        client = self.client()
        found: list[InboundMessage] = []
        cursor = ""
        while True:
            extra = {"oldest": after} if after else {}
            page = self._call(
                client.conversations_history,
                channel=conversation,
                limit=200 if after else 1,
                cursor=cursor or None,
                **extra,
            )
            for raw in page.get("messages") or []:
                ts = str(raw.get("ts") or "")
                top = not raw.get("thread_ts") or raw.get("thread_ts") == ts
                if ts and top and channels.newer(ts, after):
                    found.append(inbound(conversation, raw))
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor or not after:
                break
        found.sort(key=lambda m: float(m.message_id) if _numeric(m.message_id) else 0.0)
        return found

    def reply(self, message: InboundMessage, text: str) -> None:
        self._call(self.client().chat_postMessage, channel=message.channel_id, thread_ts=message.message_id, text=text)

    def ask(self, message: InboundMessage, options: Sequence[str]) -> None:
        from the_loop_slack.picker import QUESTION, blocks

        self._call(
            self.client().chat_postMessage,
            channel=message.channel_id,
            thread_ts=message.message_id,
            text=QUESTION,
            blocks=blocks(options),
        )

    def settle(self, press: Press, text: str) -> None:
        """The picker's message rewritten with the outcome, its controls gone (``chat.update``)."""
        section = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
        self._call(
            self.client().chat_update, channel=press.channel_id, ts=press.control_id, text=text, blocks=[section]
        )

    def listen(
        self,
        sink: Callable[[InboundMessage], str],
        should_stop: Callable[[], bool],
        connected: Callable[[], None] = lambda: None,
        pressed: Callable[[Press], str] | None = None,
    ) -> None:
        from the_loop_slack.listener import run_socket_mode

        run_socket_mode(self, sink, should_stop, connected, pressed)

    def missing_scopes(self) -> list[str]:
        """The bot scopes this configuration needs that ``auth.test`` says the token lacks (issue-362: a DM that
        posts fine but is never read). Empty when the token reports no scopes (nothing to compare)."""
        client = self.client()
        auth = self._call(client.auth_test)
        headers = {str(k).lower(): v for k, v in (getattr(auth, "headers", None) or {}).items()}
        granted = {scope.strip() for scope in str(headers.get("x-oauth-scopes", "")).split(",") if scope.strip()}
        if not granted:
            return []
        home = self.home()
        info = self._call(client.conversations_info, channel=home).get("channel") or {}
        kind = "channels"
        if info.get("is_im") or home.startswith("D"):
            kind = "im"
        elif info.get("is_mpim"):
            kind = "mpim"
        elif info.get("is_private") or home.startswith("G"):
            kind = "groups"
        needed = ["chat:write", f"{kind}:history"]
        if self.settings.reactions.enabled:
            needed.append("reactions:write")
        if self.read_mode() == "socket":
            needed.append("app_mentions:read")
        return [scope for scope in needed if scope not in granted]


def _numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _button(url: str) -> dict[str, Any]:
    button = {"type": "button", "action_id": "the-loop:open", "text": {"type": "plain_text", "text": "Open"}}
    return {"type": "actions", "elements": [{**button, "url": url}]}


def inbound(channel: str, raw: Mapping[str, Any], thread: str = "") -> InboundMessage:
    """A Slack message (Web API or Events API shape) in the neutral form; a top-level one is its own thread."""
    ts = str(raw.get("ts") or "")
    subtype = str(raw.get("subtype") or "")
    return InboundMessage(
        channel_id=channel,
        thread_id=str(raw.get("thread_ts") or thread or ts),
        message_id=ts,
        author_id=str(raw.get("user") or ""),
        text=str(raw.get("text") or ""),
        is_bot=bool(raw.get("bot_id")) or subtype == "bot_message",
        subtype=subtype,
        files=tuple(_file(file) for file in raw.get("files") or () if isinstance(file, Mapping)),
    )


def _file(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A file's metadata only (never its content): what core needs to fetch, save and name it."""
    size = raw.get("size")
    return {
        "id": str(raw.get("id") or ""),
        "name": str(raw.get("name") or raw.get("title") or "file"),
        "size": size if isinstance(size, int) else None,
        "url": str(raw.get("url_private_download") or raw.get("url_private") or ""),
        "mimetype": str(raw.get("mimetype") or ""),
        "permalink": str(raw.get("permalink") or ""),
    }
