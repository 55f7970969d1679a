"""The web tests' world: the GitHub world (the real receiver, the fake GitHub, the fake harness on a private tmux
server) with the real control plane beside it (``the-loop daemon run service`` on a free loopback port) and two
tokens made by the real CLI: ``viewer`` and ``operator``.

``web_world(**service)`` makes one; ``world.api(method, path, token=…)`` calls the API with httpx, ``world.gh`` is
the :class:`~gh_world.GitHubWorld` underneath (``world.gh.start_work()`` arms and spawns ``octo/repo#15``).
"""

from __future__ import annotations

import subprocess
from typing import Any
from urllib.parse import quote

import httpx
from gh_receiver import daemon, stop
from gh_world import REF, GitHubWorld

from the_loop.testing import free_port, wait_for

ITEM = "/api/v1/work-items/" + quote(REF, safe="")


class WebWorld:
    def __init__(self, gh: GitHubWorld, **service: Any) -> None:
        self.gh, self.env = gh, gh.env
        self.port = free_port()
        settings = {"enabled": True, "port": self.port, **service}
        self.env.edit_config(lambda config: config.update(service=settings))
        self.viewer = self.token("viewer", "viewer")
        self.operator = self.token("operator", "operator")
        self.process: subprocess.Popen[str] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self, name: str, role: str) -> str:
        done = self.env.run("web", "token", "create", name, "--role", role)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start(self) -> None:
        self.process = daemon(self.env, "service")
        wait_for(lambda: self.healthy() or self.process.poll() is not None, timeout=20)
        assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, method: str, path: str, token: str | None = "", **kwargs: Any) -> httpx.Response:
        """``method path`` on the service; ``token`` "" means the viewer's, None no credential at all."""
        headers = dict(kwargs.pop("headers", {}))
        chosen = self.viewer if token == "" else token
        if chosen is not None:
            headers["authorization"] = f"Bearer {chosen}"
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop(self.process)
