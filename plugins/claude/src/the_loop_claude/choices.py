"""Whether this machine's Claude Code accepts a model or an effort level, measured without spending a token.

- **Effort**: ``claude --help`` (offline, no login, well under a second) lists the levels ``--effort`` takes —
  ``--effort <level>  Effort level for the current session (low, medium, high, xhigh, max)``. A level in that list
  is ``ok``; a level missing from a list that was read is ``refused``; no list read (the binary is missing or fails,
  the help no longer has the option or its list) is ``unknown``.
- **Model**: the Messages API the session would talk to lists the models its credential may use:
  ``GET {ANTHROPIC_BASE_URL or https://api.anthropic.com}/v1/models`` with ``anthropic-version: 2023-06-01`` and the
  session's own credential (``x-api-key`` from ``ANTHROPIC_API_KEY``, else ``Authorization: Bearer`` from
  ``ANTHROPIC_AUTH_TOKEN``), read from the environment the pane would get (core's ``harness_environ``). Listing
  models is free: no message is sent. A name that is a listed id, or an alias (no ``-`` in it, such as ``opus``)
  that is one of a listed id's ``-``-separated words, is ``ok`` — a ``[1m]``-style suffix is Claude Code's and is
  set aside for the match; a list that was read and matched nothing is ``refused``; no list (no such credential, as
  with a subscription login; the API unreachable or answering 401, 403, 429 or 5xx; a body that is not a model
  list) is ``unknown``.

The credential goes into the request header and nowhere else: it is never logged, stored or put in a message.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
HELP_TIMEOUT = 15.0
LIST_TIMEOUT = 5.0
MAX_PAGES = 10
_SUFFIX = re.compile(r"\[[^\[\]]*\]$")  # Claude Code's own context-window suffix: "sonnet[1m]"
_OPTION = re.compile(r"^\s{0,8}(?:-\w, )?--[\w-]+")  # the first line of one option in `claude --help`


def effort_levels(help_text: str) -> list[str] | None:
    """The levels ``--effort`` lists in ``claude --help``'s text, or None when the option or its list is not there.

    The option's description may wrap over several lines; its list is the first parenthesized, comma-separated run
    of words in it."""
    lines = help_text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"^\s*--effort\b", line)), None)
    if start is None:
        return None
    description = [lines[start]]
    for line in lines[start + 1 :]:
        if _OPTION.match(line) or not line.strip():
            break
        description.append(line)
    found = re.search(r"\(([A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)+)\)", " ".join(" ".join(description).split()))
    return [level.strip() for level in found[1].split(",")] if found else None


def read_help(binary: str, env: Mapping[str, str]) -> str | None:
    """``claude --help``'s text, or None when it could not be run or failed."""
    try:
        result = subprocess.run(
            [binary, "--help"],
            capture_output=True,
            text=True,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            timeout=HELP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def list_models(env: Mapping[str, str], timeout: float = LIST_TIMEOUT) -> list[str] | None:
    """Every model id the API the session would use lists for its credential (every page), or None when the list
    could not be read: no credential, unreachable, a refusal or an error status, or a body of another shape."""
    import httpx

    headers = {"anthropic-version": API_VERSION, "accept": "application/json"}
    if env.get("ANTHROPIC_API_KEY"):
        headers["x-api-key"] = env["ANTHROPIC_API_KEY"]
    elif env.get("ANTHROPIC_AUTH_TOKEN"):
        headers["authorization"] = f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}"
    else:
        return None  # a subscription login (or none): the Messages API would not list models for it
    base = (env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    ids: list[str] = []
    params: dict[str, str | int] = {"limit": 1000}
    try:
        proxy = _proxy(env, base)
        with httpx.Client(timeout=timeout, trust_env=False, proxy=proxy, follow_redirects=False) as client:
            for _page in range(MAX_PAGES):
                answer = client.get(f"{base}/v1/models", headers=headers, params=params)
                if answer.status_code != 200:
                    return None
                body = answer.json()
                data = body.get("data") if isinstance(body, dict) else None
                if not isinstance(data, list):
                    return None
                ids += [str(item["id"]) for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
                if not body.get("has_more") or not body.get("last_id"):
                    return ids
                params = {"limit": 1000, "after_id": str(body["last_id"])}
    except (httpx.HTTPError, ValueError):
        return None
    return ids  # more pages than anyone lists: what was read is the answer


def _proxy(env: Mapping[str, str], url: str) -> str | None:
    """The proxy the session's environment names for ``url`` (``HTTPS_PROXY``, ``ALL_PROXY``, either case), unless
    ``NO_PROXY`` exempts its host: Claude Code goes through it, so the question does too."""
    import urllib.request

    import httpx

    scheme = httpx.URL(url).scheme
    named = {key.lower(): value for key, value in env.items() if value}
    proxy = named.get(f"{scheme}_proxy") or named.get("all_proxy")
    if not proxy or urllib.request.proxy_bypass_environment(httpx.URL(url).host, {"no": named.get("no_proxy", "")}):
        return None
    return proxy


def model_listed(name: str, ids: Sequence[str]) -> bool:
    """Whether ``name`` is one of ``ids``, or an alias of one: a name without ``-`` (``opus``) that is one of an
    id's ``-``-separated words (``claude-opus-4-1-20250805``), so ``son`` is no alias of a sonnet. A trailing
    ``[…]`` suffix (``sonnet[1m]``) is set aside first."""
    bare = _SUFFIX.sub("", name)
    if not bare:
        return False
    if bare in ids:
        return True
    return "-" not in bare and any(bare.lower() in model.lower().split("-") for model in ids)
