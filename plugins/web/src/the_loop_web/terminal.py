"""The browser terminal (placeholder until it lands)."""

from __future__ import annotations

from typing import Any


async def serve(web: Any, websocket: Any) -> None:
    await websocket.close(code=1008)
