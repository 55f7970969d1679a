"""The ``hello`` config section."""

from __future__ import annotations

from pydantic import Field

from the_loop.config.models import Section


class HelloSettings(Section):
    greeting: str = "hello"
    times: int = Field(1, ge=1, le=10)
