"""The ``integrations.github`` config section."""

from __future__ import annotations

from pydantic import Field

from the_loop.config.models import Section


class GitHubApi(Section):
    token_env: list[str] = Field(default_factory=lambda: ["GH_TOKEN", "GITHUB_TOKEN"])
    base_url: str = ""


class GitHubSettings(Section):
    host: str = ""
    api: GitHubApi = GitHubApi()

    def api_base_url(self) -> str:
        """``api.baseUrl`` when set; else github.com's API, or ``https://<host>/api/v3`` for Enterprise."""
        if self.api.base_url:
            return self.api.base_url.rstrip("/")
        if self.host and self.host != "github.com":
            return f"https://{self.host}/api/v3"
        return "https://api.github.com"
