"""The references stay in step with the code: the OpenAPI document names every API route of the app (and nothing
else), docs/web.md's tables name every route and every ``the-loop web`` command and option, and the config
sections refuse an exposed bind the way docs/web.md says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
from starlette.routing import Route, WebSocketRoute

import the_loop_web.plugin
from the_loop.config import ConfigError, load_config
from the_loop.testing import LoopEnv
from the_loop_web.app import ROUTES, TERMINAL_PATH, build_app
from the_loop_web.cli import web
from the_loop_web.openapi import openapi_document

DOC = Path(__file__).resolve().parents[3] / "docs" / "web.md"


def starlette_path(path: str) -> str:
    return path.replace("{ref}", "{rest:path}")


def built(loop_env: LoopEnv, plugin_host: Any, **service: Any) -> Any:
    plugin_host.register(the_loop_web.plugin, "web")
    loop_env.write_config({"service": {"enabled": True, **service}})
    return load_config(loop_env.config_path, plugin_host)


def test_the_openapi_document_names_every_api_route_of_the_app(loop_env: LoopEnv, plugin_host: Any) -> None:
    app = build_app(built(loop_env, plugin_host))
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route) and route.path.startswith("/api/")
        for method in route.methods - {"HEAD"}
    }
    served |= {("GET", route.path) for route in app.routes if isinstance(route, WebSocketRoute)}
    document = openapi_document(ROUTES, TERMINAL_PATH)
    documented = {
        (method.upper(), starlette_path(path))
        for path, operations in document["paths"].items()
        for method in operations
    }
    assert documented == served
    for path, operations in document["paths"].items():
        for operation in operations.values():
            assert operation["summary"] and operation["responses"], path
            public = path == "/api/v1/health"
            assert (operation["security"] == []) == public, path


def test_docs_web_lists_every_route_and_every_web_command_and_option() -> None:
    text = DOC.read_text(encoding="utf-8")
    for spec in ROUTES:
        shown = f"`{spec.path}`"
        assert shown in text, f"docs/web.md does not name {spec.method} {spec.path}"
    assert f"`{TERMINAL_PATH}`" in text

    def walk(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
        found = []
        for name, command in group.commands.items():
            found.append((f"{path} {name}", command))
            if isinstance(command, click.Group):
                found += walk(command, f"{path} {name}")
        return found

    sections = {
        heading.strip(): body for heading, body in re.findall(r"^### ([^\n]+)\n(.*?)(?=^##)", text, re.S | re.M)
    }
    for path, command in walk(web, "the-loop web"):
        if isinstance(command, click.Group):
            continue
        assert path in sections, f"docs/web.md has no '### {path}' section"
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("--") and option != "--help":
                    assert option in sections[path], f"{path}: {option} is not in its docs/web.md section"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "loop.example.com"])
def test_a_bind_that_is_not_loopback_needs_tls_or_the_acknowledgement(
    loop_env: LoopEnv, plugin_host: Any, host: str
) -> None:
    with pytest.raises(ConfigError, match=r"service\.host: .*not loopback"):
        built(loop_env, plugin_host, host=host).section("service")
    assert built(loop_env, plugin_host, host=host, exposed=True).section("service").host == host
    cert, key = loop_env.tmp / "cert.pem", loop_env.tmp / "key.pem"
    settings = built(loop_env, plugin_host, host=host, tls={"certFile": str(cert), "keyFile": str(key)})
    assert settings.section("service").url.startswith("https://")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_binds_need_nothing(loop_env: LoopEnv, plugin_host: Any, host: str) -> None:
    assert built(loop_env, plugin_host, host=host).section("service").loopback


def test_half_a_tls_pair_is_refused(loop_env: LoopEnv, plugin_host: Any) -> None:
    with pytest.raises(ConfigError, match="certFile and keyFile go together"):
        built(loop_env, plugin_host, tls={"certFile": "/etc/cert.pem"}).section("service")
