"""Markdown ⇄ Jira markup (J24-J26): the-loop writes Markdown; Cloud wants ADF, Data Center wiki markup.

Writing: Markdown is parsed once (markdown-it-py, CommonMark + tables + strikethrough) into ADF; wiki markup is
serialised from that ADF, so both deployments say the same thing. Raw HTML is dropped except a bare
``<!-- the-loop:<name> -->`` (a gate sentinel, which Jira cannot hide: it becomes a visible ``[the-loop:<name>]``
paragraph) and ``<summary>`` (bold).

Reading: ADF (or wiki text) back to Markdown. A sentinel paragraph opening or closing a body turns back into the
hidden marker only on a service-account comment; anyone else's stays literal text (J25).
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["AGENT_MARKER", "RELAY_MARKER", "adf_to_wiki", "defang", "to_adf", "to_markdown"]

AGENT_MARKER = "[the-loop:agent-comment]"
RELAY_MARKER = "[the-loop:relay]"
_SENTINEL_HTML = re.compile(r"^\s*<!--\s*the-loop:([a-z0-9][a-z0-9-]*)\s*-->\s*$")
_SENTINEL_TEXT = re.compile(r"^\[the-loop:([a-z0-9][a-z0-9-]*)\]$")
# Every spelling of a live marker prefix in quoted text: plain, backslash-escaped, entity-encoded.
_LIVE = re.compile(r"the(?:-|\\-|&#45;|&#x2[dD];|&dash;|&hyphen;)loop(?::|&#58;|&colon;)(?=[A-Za-z0-9])")
_SUMMARY = re.compile(r"<summary>([^<]*)</summary>", re.I)
_HIDDEN = re.compile(r"<!--\s*the-loop:[a-z0-9][a-z0-9-]*\s*-->")
log = logging.getLogger(__name__)


def defang(text: str) -> str:
    """J26: every visible spelling of ``the-loop:<name>`` gets U+2011 for its hyphen, so only the writer's own
    trailer and its hidden sentinels stay live."""
    kept: list[str] = []

    def hold(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return f"\x00{len(kept) - 1}\x00"

    text = _HIDDEN.sub(hold, text)
    text = _LIVE.sub("the\u2011loop:", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text)


# ------------------------------------------------------------------------------------------ Markdown → ADF


def _parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _text(text: str, marks: list[dict[str, Any]]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "text", "text": text}
    if marks:
        node["marks"] = [dict(mark) for mark in marks]
    return node


def _inline(children: list[Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for token in children:
        kind = token.type
        if kind == "text" and token.content:
            nodes.append(_text(token.content, marks))
        elif kind == "code_inline":
            nodes.append(_text(token.content, [*marks, {"type": "code"}]))
        elif kind in ("softbreak", "hardbreak"):
            nodes.append({"type": "hardBreak"} if kind == "hardbreak" else _text(" ", marks))
        elif kind in ("strong_open", "em_open", "s_open"):
            marks.append({"type": {"strong_open": "strong", "em_open": "em", "s_open": "strike"}[kind]})
        elif kind == "link_open":
            marks.append({"type": "link", "attrs": {"href": str(token.attrGet("href") or "")}})
        elif kind in ("strong_close", "em_close", "s_close", "link_close") and marks:
            marks.pop()
        elif kind == "html_inline" and token.content.strip().lower() in ("<summary>", "</summary>"):
            if token.content.strip().lower() == "<summary>":
                marks.append({"type": "strong"})
            elif marks:
                marks.pop()
    return [node for node in nodes if node.get("type") != "text" or node["text"]]


def _task(inline: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]] | None:
    """``[ ] text`` / ``[x] text`` at the start of a list item's paragraph."""
    if not inline or inline[0].get("type") != "text" or inline[0].get("marks"):
        return None
    match = re.match(r"^\[( |x|X)\]\s+", inline[0]["text"])
    if not match:
        return None
    rest = inline[0]["text"][match.end() :]
    state = "DONE" if match.group(1) in "xX" else "TODO"
    return state, ([_text(rest, [])] if rest else []) + inline[1:]


class _AdfBuilder:
    def __init__(self) -> None:
        self.tasks = 0

    def blocks(self, tokens: list[Any], start: int, stop_type: str | None) -> tuple[list[dict[str, Any]], int]:
        nodes: list[dict[str, Any]] = []
        i = start
        while i < len(tokens):
            token = tokens[i]
            if stop_type and token.type == stop_type:
                return nodes, i + 1
            kind = token.type
            if kind == "paragraph_open":
                inline = _inline(tokens[i + 1].children or [])
                if inline:
                    nodes.append({"type": "paragraph", "content": inline})
                i += 3
            elif kind == "heading_open":
                level = int(token.tag[1])
                nodes.append({"type": "heading", "attrs": {"level": level}, "content": _inline(tokens[i + 1].children)})
                i += 3
            elif kind in ("fence", "code_block"):
                language = (token.info or "").split()[0] if token.info else ""
                node: dict[str, Any] = {"type": "codeBlock", "attrs": {"language": language} if language else {}}
                code = token.content.rstrip("\n")
                if code:
                    node["content"] = [_text(code, [])]
                nodes.append(node)
                i += 1
            elif kind == "hr":
                nodes.append({"type": "rule"})
                i += 1
            elif kind == "blockquote_open":
                content, i = self.blocks(tokens, i + 1, "blockquote_close")
                nodes.append({"type": "blockquote", "content": content})
            elif kind in ("bullet_list_open", "ordered_list_open"):
                close = kind.replace("_open", "_close")
                node, i = self.list(tokens, i + 1, close, ordered=kind.startswith("ordered"))
                nodes.append(node)
            elif kind == "table_open":
                node, i = self.table(tokens, i + 1)
                nodes.append(node)
            elif kind == "html_block":
                match = _SENTINEL_HTML.match(token.content)
                if match:
                    nodes.append({"type": "paragraph", "content": [_text(f"[the-loop:{match.group(1)}]", [])]})
                for summary in _SUMMARY.findall(token.content):  # `<details><summary>…` opens a block: keep its title
                    if summary.strip():
                        nodes.append({"type": "paragraph", "content": [_text(summary.strip(), [{"type": "strong"}])]})
                i += 1  # any other raw HTML (payload envelopes, <details>) is dropped
            else:
                i += 1
        return nodes, i

    def list(self, tokens: list[Any], i: int, close: str, *, ordered: bool) -> tuple[dict[str, Any], int]:
        items: list[list[dict[str, Any]]] = []
        while tokens[i].type != close:
            if tokens[i].type == "list_item_open":
                content, i = self.blocks(tokens, i + 1, "list_item_close")
                items.append(content)
            else:
                i += 1
        i += 1
        tasks = [_task(item[0]["content"]) if item and item[0]["type"] == "paragraph" else None for item in items]
        if items and not ordered and all(tasks):
            self.tasks += 1
            children = []
            for n, task in enumerate(tasks, 1):
                state, inline = task  # type: ignore[misc]
                children.append(
                    {
                        "type": "taskItem",
                        "attrs": {"localId": f"the-loop-task-{self.tasks}-{n}", "state": state},
                        "content": inline,
                    }
                )
            return {
                "type": "taskList",
                "attrs": {"localId": f"the-loop-tasks-{self.tasks}"},
                "content": children,
            }, i
        kind = "orderedList" if ordered else "bulletList"
        return {"type": kind, "content": [{"type": "listItem", "content": item} for item in items]}, i

    def table(self, tokens: list[Any], i: int) -> tuple[dict[str, Any], int]:
        rows: list[dict[str, Any]] = []
        row: list[dict[str, Any]] = []
        while tokens[i].type != "table_close":
            kind = tokens[i].type
            if kind in ("th_open", "td_open"):
                cell = "tableHeader" if kind == "th_open" else "tableCell"
                inline = _inline(tokens[i + 1].children or [])
                para = {"type": "paragraph", "content": inline} if inline else {"type": "paragraph"}
                row.append({"type": cell, "content": [para]})
                i += 3
            elif kind == "tr_close":
                rows.append({"type": "tableRow", "content": row})
                row = []
                i += 1
            else:
                i += 1
        return {"type": "table", "content": rows}, i + 1


def to_adf(markdown: str) -> dict[str, Any]:
    """A Markdown body as an ADF ``doc``."""
    tokens = _parser().parse(markdown)
    content, _ = _AdfBuilder().blocks(tokens, 0, None)
    return {"type": "doc", "version": 1, "content": content}


# ---------------------------------------------------------------------------------------------- ADF → wiki


# How each ADF text mark is spelled in the two targets (``{text}``, and ``{href}`` for links).
_WIKI_MARKS = {
    "strong": "*{text}*",
    "em": "_{text}_",
    "strike": "-{text}-",
    "code": "{{{{{text}}}}}",
    "link": "[{text}|{href}]",
}
_MD_MARKS = {
    "strong": "**{text}**",
    "em": "*{text}*",
    "strike": "~~{text}~~",
    "code": "`{text}`",
    "link": "[{text}]({href})",
}


def _render_inline(nodes: list[dict[str, Any]], marks: dict[str, str], hard_break: str) -> str:
    """ADF inline nodes as text in one target's spelling; a mention is its display text."""
    out = []
    for node in nodes or ():
        kind = node.get("type")
        if kind == "hardBreak":
            out.append(hard_break)
            continue
        if kind == "mention":
            out.append(str((node.get("attrs") or {}).get("text", "")))
            continue
        text = str(node.get("text", ""))
        for mark in node.get("marks") or ():
            template = marks.get(str(mark.get("type")))
            if template is not None:
                text = template.format(text=text, href=(mark.get("attrs") or {}).get("href", ""))
        out.append(text)
    return "".join(out)


def _wiki_inline(nodes: list[dict[str, Any]]) -> str:
    return _render_inline(nodes, _WIKI_MARKS, "\\\\\n")


def _wiki_block(node: dict[str, Any], depth: str = "") -> str:
    kind = node.get("type")
    content = node.get("content") or []
    if kind == "paragraph":
        return _wiki_inline(content)
    if kind == "heading":
        return f"h{(node.get('attrs') or {}).get('level', 1)}. {_wiki_inline(content)}"
    if kind == "codeBlock":
        language = (node.get("attrs") or {}).get("language")
        code = "".join(str(c.get("text", "")) for c in content)
        return f"{{code:{language}}}\n{code}\n{{code}}" if language else f"{{code}}\n{code}\n{{code}}"
    if kind == "rule":
        return "----"
    if kind == "blockquote":
        return "{quote}\n" + "\n\n".join(_wiki_block(c) for c in content) + "\n{quote}"
    if kind in ("bulletList", "orderedList"):
        bullet = depth + ("#" if kind == "orderedList" else "*")
        lines = []
        for item in content:
            parts = item.get("content") or []
            first = _wiki_block(parts[0]) if parts else ""
            lines.append(f"{bullet} {first}")
            lines += [_wiki_block(p, bullet) for p in parts[1:]]
        return "\n".join(lines)
    if kind == "taskList":
        marks = {"DONE": "(/)", "TODO": "(x)"}
        return "\n".join(
            f"* {marks.get((i.get('attrs') or {}).get('state'), '(x)')} {_wiki_inline(i.get('content') or [])}"
            for i in content
        )
    if kind == "table":
        lines = []
        for row in content:
            cells = row.get("content") or []
            sep = "||" if cells and cells[0].get("type") == "tableHeader" else "|"
            texts = [" ".join(_wiki_block(p) for p in cell.get("content") or []) for cell in cells]
            lines.append(sep + sep.join(texts) + sep)
        return "\n".join(lines)
    return _wiki_inline(content)


def adf_to_wiki(doc: dict[str, Any]) -> str:
    return "\n\n".join(_wiki_block(node) for node in doc.get("content") or [])


# ------------------------------------------------------------------------------------------- → Markdown


def _md_inline(nodes: list[dict[str, Any]]) -> str:
    return _render_inline(nodes, _MD_MARKS, "\n")


def _md_block(node: dict[str, Any]) -> str:
    kind = node.get("type")
    content = node.get("content") or []
    if kind == "paragraph":
        return _md_inline(content)
    if kind == "heading":
        return "#" * int((node.get("attrs") or {}).get("level", 1)) + " " + _md_inline(content)
    if kind == "codeBlock":
        language = (node.get("attrs") or {}).get("language") or ""
        return f"```{language}\n" + "".join(str(c.get("text", "")) for c in content) + "\n```"
    if kind == "rule":
        return "---"
    if kind == "blockquote":
        return "\n".join("> " + line for line in "\n\n".join(_md_block(c) for c in content).splitlines())
    if kind in ("bulletList", "orderedList"):
        lines = []
        for n, item in enumerate(content, 1):
            bullet = f"{n}." if kind == "orderedList" else "-"
            parts = [_md_block(p) for p in item.get("content") or []]
            lines.append(f"{bullet} " + "\n  ".join("\n".join(parts).splitlines()))
        return "\n".join(lines)
    if kind == "taskList":
        return "\n".join(
            f"- [{'x' if (i.get('attrs') or {}).get('state') == 'DONE' else ' '}] {_md_inline(i.get('content') or [])}"
            for i in content
        )
    if kind == "table":
        rows = [
            "| "
            + " | ".join(" ".join(_md_block(p) for p in c.get("content") or []) for c in r.get("content") or [])
            + " |"
            for r in content
        ]
        if rows:
            width = len(content[0].get("content") or [])
            rows.insert(1, "|" + " --- |" * width)
        return "\n".join(rows)
    log.debug("unknown ADF node %r read as text", kind)
    return _md_inline(content) if content and content[0].get("type") == "text" else "\n".join(map(_md_block, content))


def _wiki_to_markdown(text: str) -> str:
    text = re.sub(
        r"\{code(?::([\w+-]+))?\}\n?(.*?)\n?\{code\}",
        lambda m: f"```{m.group(1) or ''}\n{m.group(2)}\n```",
        text,
        flags=re.S,
    )
    text = re.sub(r"^\* \(/\) ", "- [x] ", text, flags=re.M)
    text = re.sub(r"^\* \(x\) ", "- [ ] ", text, flags=re.M)
    text = re.sub(r"^h([1-6])\. ", lambda m: "#" * int(m.group(1)) + " ", text, flags=re.M)
    return text


def to_markdown(body: Any, *, service_account: bool = False) -> str:
    """An ADF doc or a wiki string as Markdown. On a service-account comment a top-level sentinel paragraph opening
    or closing the body becomes the hidden marker again; the agent/relay markers always stay literal."""
    if isinstance(body, dict):
        blocks = [_md_block(node) for node in body.get("content") or []]
    elif isinstance(body, str):
        blocks = _wiki_to_markdown(body).split("\n\n")
    else:
        return ""
    if service_account and blocks:
        for index in {0, len(blocks) - 1}:
            match = _SENTINEL_TEXT.match(blocks[index].strip())
            if match and blocks[index].strip() not in (AGENT_MARKER, RELAY_MARKER):
                blocks[index] = f"<!-- the-loop:{match.group(1)} -->"
    return "\n\n".join(block for block in blocks if block != "").strip()
