"""Prompt rendering: the boot prompt a session starts with, from a template an operator can override.

Templates are plain text with ``$name`` placeholders (:class:`string.Template`): ``$work_item``, ``$url``,
``$event``. ``routing.spawnPromptTemplate`` names an operator's own file (relative to the config file's directory).
Text that reaches a pane is stripped of control characters other than newline and tab (an escape sequence in a
comment must not drive the terminal), and the boot prompt is capped: it travels as one argv element, which tmux
limits to about 16 KB.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from string import Template

BOOT_PROMPT_CAP = 12 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def clean(text: str) -> str:
    """Drop C0/C1 control characters (ESC included) except newline and tab; CRLF becomes LF."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def cap(text: str, limit: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    marker = "\n[… truncated by the-loop]"
    return encoded[: limit - len(marker.encode())].decode("utf-8", errors="ignore") + marker


def load_template(override: str, config_dir: Path, default: str) -> str:
    """The operator's template file when configured, else the packaged default."""
    if override:
        path = Path(override).expanduser()
        return (path if path.is_absolute() else config_dir / path).read_text(encoding="utf-8")
    return resources.files("the_loop.templates").joinpath(default).read_text(encoding="utf-8")


def render_spawn_prompt(template: str, *, work_item: str, url: str, event: str) -> str:
    """The self-contained boot prompt; ``event`` is capped so the whole stays under :data:`BOOT_PROMPT_CAP`."""
    skeleton = Template(template).safe_substitute(work_item=work_item, url=url or "no link", event="")
    room = max(BOOT_PROMPT_CAP - len(skeleton.encode()), 512)
    text = Template(template).safe_substitute(work_item=work_item, url=url or "no link", event=cap(clean(event), room))
    return cap(clean(text).strip(), BOOT_PROMPT_CAP)
