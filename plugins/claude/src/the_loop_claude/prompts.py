"""The decision prompts Claude Code shows in its pane, read from the pane's visible text.

A prompt replaces the input box at the foot of the screen: under a full-width rule (``────``, or ``▔▔▔▔`` for the
rewind menu) its question, its options, and last of all a hint line that offers ``Esc to cancel``. An ordinary
screen ends with the input box and the status line under it instead, so text that merely quotes a prompt (the model's
answer, a message) is never read as one. Claude Code 2.1.332's permission prompt, in an 80-column pane::

    ────────────────────────────────────────────────────────────────────────────────
     Bash command
     …
     │ touch x
     …
     Do you want to proceed?
     ❯ 1. Yes
       2. Yes, and always allow access to /srv/work from this project
       3. Yes, and switch to auto mode · auto mode handles these prompts for you
       4. No

     Esc to cancel · Tab to amend

Its options are numbered, and typing the digit picks one at once, wherever the cursor is (no Enter). A menu
without numbers (the folder trust dialog: ``❯ No, exit`` / ``Yes, I trust this folder``) ignores digits: its
options are picked by moving the cursor (``Up`` and ``Down``, from where ``❯`` is on the screen read) and ``Enter``.
Every prompt gets a last option, ``esc``, that cancels it with ``Escape`` (the rewind menu a second Escape opens has
only that one here: its entries are conversation points, not answers).
"""

# ruff: noqa: RUF002 - the pointer is the screen's own character (U+276F), not a ">" look-alike

from __future__ import annotations

import re

from the_loop.interfaces import BlockedPrompt, PromptOption
from the_loop_claude.pane import POINTER

FOOTER = "Esc to cancel"
CANCEL = PromptOption("esc", FOOTER, ("Escape",))
_TOP = re.compile(r"^\s*[─▔]{8,}\s*$")  # the rule a prompt is drawn under
_SEPARATOR = re.compile(r"^\s*[─▔╌━]{8,}\s*$")  # any rule, the dashed ones inside a prompt too
_NUMBERED = re.compile(rf"^ *(?:{POINTER} +)?(\d{{1,2}})\. +(?=\S)")
_CURSOR = re.compile(rf"^ *{POINTER} +(?=\S)")
_GUTTER = re.compile(r"^│ ?")


def blocked_prompt(screen: str) -> BlockedPrompt | None:
    """The prompt at the foot of ``screen`` (a pane's visible text), or None when the screen ends otherwise."""
    lines = [line.rstrip() for line in screen.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or FOOTER not in lines[-1]:
        return None
    width = max(map(len, lines))
    body = lines[_top(lines) : len(lines) - 1]
    found = _numbered(body, width) or _listed(body)
    first, options = found if found else (len(body), ())
    return BlockedPrompt(_text(body[:first]), (*options, CANCEL))


def _top(lines: list[str]) -> int:
    """Where the prompt begins: after the last full-width rule (the screen's top when it scrolled away)."""
    for index in range(len(lines) - 1, -1, -1):
        if _TOP.match(lines[index]):
            return index + 1
    return 0


def _text(lines: list[str]) -> str:
    """The prompt's question as shown, line by line, without its rules, gutters and indentation."""
    kept = (_GUTTER.sub("", line.strip()) for line in lines if not _SEPARATOR.match(line))
    return "\n".join(line for line in kept if line)


def _numbered(body: list[str], width: int) -> tuple[int, tuple[PromptOption, ...]] | None:
    """Options ``1.`` … ``n.`` closing the prompt (a label that wraps goes on, indented under it): where they
    begin and what they are; None when the prompt has no such run."""
    starts = [index for index, line in enumerate(body) if (m := _NUMBERED.match(line)) and m[1] == "1"]
    if not starts:
        return None
    labels: list[str] = []
    column, previous = 0, ""
    for line in body[starts[-1] :]:
        match = _NUMBERED.match(line)
        if match and int(match[1]) == len(labels) + 1:
            labels.append(line[match.end() :])
            column = match.end()
        elif line.strip() and len(line) - len(line.lstrip()) >= column:
            # The label wrapped. A line filled to the prompt's right margin (a column short of the pane's edge) was
            # cut inside a word too long for it, so no space goes between.
            labels[-1] += ("" if len(previous) >= width - 1 else " ") + line.strip()
        elif line.strip():
            return None  # something other than options follows them: not a prompt's options
        previous = line
    if len(labels) < 2:
        return None
    return starts[-1], tuple(PromptOption(str(n), label, (str(n),)) for n, label in enumerate(labels, 1))


def _listed(body: list[str]) -> tuple[int, tuple[PromptOption, ...]] | None:
    """A menu without numbers: the lines beside the cursor line (``❯``), at its indentation."""
    pointed = next(((index, m.end()) for index, line in enumerate(body) if (m := _CURSOR.match(line))), None)
    if pointed is None:
        return None
    cursor, column = pointed

    def member(index: int) -> bool:
        line = body[index]
        return index == cursor or (bool(line.strip()) and len(line) - len(line.lstrip()) == column)

    first = cursor
    while first > 0 and member(first - 1):
        first -= 1
    last = cursor
    while last + 1 < len(body) and member(last + 1):
        last += 1
    if last == first:
        return None
    options = []
    for index in range(first, last + 1):
        moves = ("Down",) * (index - cursor) if index >= cursor else ("Up",) * (cursor - index)
        label = body[index][column:].strip()
        options.append(PromptOption(str(index - first + 1), label, (*moves, "Enter")))
    return first, tuple(options)
