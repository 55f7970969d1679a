"""The OpenAPI 3.1 document of the API, built from the route table (``app.ROUTES``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from the_loop import __version__
from the_loop_web.auth import COOKIE

if TYPE_CHECKING:
    from the_loop_web.app import Spec


def openapi_document(routes: tuple[Spec, ...], terminal_path: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API, from :data:`ROUTES`."""
    paths: dict[str, Any] = {}
    for spec in routes:
        if not spec.api:
            continue
        operation: dict[str, Any] = {
            "summary": spec.summary,
            "operationId": re.sub(r"[^A-Za-z0-9]+", "_", f"{spec.method} {spec.path}").strip("_"),
            "responses": {"200": {"description": "OK"}},
        }
        if spec.role is not None:
            operation["security"] = [{"bearer": []}, {"cookie": []}]
            operation["responses"]["401"] = {"description": "no credential, or one that is not (or no longer) valid"}
            operation["x-role"] = spec.role
            if spec.role == "operator":
                operation["responses"]["403"] = {"description": "a viewer's token, or a browser request without CSRF"}
                operation["responses"]["409"] = {"description": "not done: the body says why (effect, message)"}
        else:
            operation["security"] = []
        if spec.parameters:
            operation["parameters"] = [
                {
                    "name": name,
                    "in": where,
                    "required": where == "path",
                    "description": text,
                    "schema": {"type": "string"},
                }
                for name, where, text in spec.parameters
            ]
        if spec.body:
            operation["requestBody"] = {
                "required": spec.body[0] in ("text",),
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                field: {"type": "boolean"} if field == "comment" else {"type": "string"}
                                for field in spec.body
                            },
                        }
                    }
                },
            }
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation
    paths[terminal_path] = {
        "get": {
            "summary": "WebSocket: the live terminal of the work item's session (tmux attach; read-only for a "
            "viewer). Frames: binary = terminal bytes; text JSON {type: resize, cols, rows}.",
            "operationId": "terminal",
            "parameters": [{"name": "ref", "in": "path", "required": True, "schema": {"type": "string"}}],
            "security": [{"bearer": []}, {"cookie": []}],
            "x-role": "viewer",
            "responses": {"101": {"description": "switching protocols"}, "401": {"description": "no credential"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "the-loop control plane", "version": __version__},
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the-loop web token create"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": COOKIE},
            }
        },
        "paths": paths,
    }
