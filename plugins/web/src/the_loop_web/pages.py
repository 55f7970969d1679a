"""Server-rendered pages (placeholder until the dashboard lands)."""

from __future__ import annotations

import html
from typing import Any


def refused(status: int, reason: str) -> str:
    return f"<!doctype html><title>{status}</title><p>{html.escape(reason)} — <a href='/login'>log in</a></p>"


def login() -> str:
    return "<!doctype html><title>the-loop</title><form method=post action=/login><input name=token></form>"


def dashboard(found: dict[str, Any], caller: Any, stale_after: int) -> str:
    return "<!doctype html><title>the-loop</title>"


def work_item(found: dict[str, Any], caller: Any) -> str:
    return "<!doctype html><title>the-loop</title>"
