"""Lifecycle hooks: the runner, the ``hooks:`` declaration, local and remote executors, the SDK, the points at the
dispatcher and ``the-loop hooks``. Scenario ids are from jira-lifecycle-standing.md §B.7 (E17 to E26).

Real parts throughout: real tmux (a private server per test) with the fake harness, the fake ticket provider,
remote hooks served on 127.0.0.1 by the SDK's own server, and ``the-loop`` run as a subprocess where a test needs a
second process (a "restart"). Hook modules live in ``hooks_fixtures/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import yaml

from the_loop import control, hookimpl
from the_loop.config import ConfigError, LoadedConfig, load_config
from the_loop.hooks import executors as hooks_executors
from the_loop.hooks import lifecycle
from the_loop.hooks.lifecycle import (
    CONTEXTS,
    Decision,
    SessionSpawn,
    WaitingForInput,
    WorkItemComplete,
    WorkItemStart,
    work_item_facts,
)
from the_loop.hooks.sdk import HookServer, LifecycleHooks, handle_request
from the_loop.interfaces import Channel, ChannelMessage
from the_loop.plugins import get_host
from the_loop.refs import parse_ref
from the_loop.sessions.dispatcher import Outcome
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.store import WorkItemStore
from the_loop.testing import LoopEnv, fake_plugin, free_port, kill_lock_holders
from the_loop.testing.world import REF, World

FIXTURES = Path(__file__).parent / "hooks_fixtures"
TESTS_CORE = Path(__file__).parent
ROOT = Path(__file__).resolve().parents[2]


def calls(log: Path, point: str | None = None) -> list[dict[str, Any]]:
    """What a Recorder hook (hooks_fixtures/hook_recorder.py) was asked, in order."""
    if not log.exists():
        return []
    found = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [c for c in found if point is None or c["point"] == point]


def recorder(name: str, log: Path, answers: dict[str, Any] | None = None, **entry: Any) -> dict[str, Any]:
    """A declared ``module`` entry running the Recorder."""
    return {"name": name, "module": "hook_recorder", "with": {"log": str(log), "answers": answers or {}}, **entry}


# ------------------------------------------------------------------------------------------------ the world


LIFECYCLE = {"routing": {"spawnOnUnmatched": "always", "tmux": {"resumeProbeSeconds": 0.3}}, "hooks": []}


@pytest.fixture
def world(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.syspath_prepend(str(FIXTURES))
    world.configure(defaults=LIFECYCLE)
    return world


def portable_of(world: World, ref: str = REF) -> dict[str, Any]:
    """``ref``'s portable record as the store reads it (empty without one)."""
    return WorkItemStore(world.config.state, config=world.config).read(ref) or {}


@pytest.fixture
def Recorder(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Recorder hook class of hooks_fixtures/hook_recorder.py (also importable by `module: hook_recorder`)."""
    import importlib

    monkeypatch.syspath_prepend(str(FIXTURES))
    return importlib.import_module("hook_recorder").Recorder


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(executor, token_env="")`` → a started HookServer on 127.0.0.1 (stopped at teardown)."""
    servers: list[HookServer] = []

    def start(executor: LifecycleHooks, token_env: str = "") -> HookServer:
        server = HookServer(executor, host="127.0.0.1", port=0, token_env=token_env).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def ctx_for(config: LoadedConfig, point: str, **fields: Any) -> Any:
    return CONTEXTS[point](work_item=work_item_facts(REF, config), **fields)


# ----------------------------------------------------------------------------------------------- the runner


def test_plugins_run_first_in_their_order_then_declared_hooks_each_seeing_earlier_decisions(
    world: World, plugin_host: Any, tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []

    def appender(label: str, **marks: bool) -> Any:
        class Plugin:
            @hookimpl(**marks)
            def loop_session_spawn(self, ctx: SessionSpawn) -> dict[str, str]:
                seen.append((label, ctx.prompt))
                return {"prompt": f"{ctx.prompt}+{label}"}

        return Plugin()

    plugin_host.register(appender("last", trylast=True), "p-last")
    plugin_host.register(appender("a"), "p-a")
    plugin_host.register(appender("first", tryfirst=True), "p-first")
    plugin_host.register(appender("b"), "p-b")
    log = tmp_path / "declared.jsonl"
    world.configure(hooks=[recorder("one", log), recorder("two", log, {"session_spawn": {"prompt": "operator"}})])

    decided = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config)

    assert seen == [("first", "boot"), ("a", "boot+first"), ("b", "boot+first+a"), ("last", "boot+first+a+b")]
    asked = calls(log, "session_spawn")
    assert [c["ctx"]["prompt"] for c in asked] == ["boot+first+a+b+last"] * 2  # each declared hook sees them all
    assert decided.prompt == "operator"  # the operator has the last word
    decided_events = world.events("hooks.decided")
    assert [e["hook"] for e in decided_events] == ["p-first", "p-a", "p-b", "p-last", "hooks:two"]
    assert all(e["changed"] == ["prompt"] and e["work_item"] == REF for e in decided_events)


def test_a_refusal_sticks_and_its_reason_cannot_be_reworded(world: World, plugin_host: Any) -> None:
    class Refuses:
        @hookimpl
        def loop_work_item_start(self, ctx: WorkItemStart) -> Decision:
            return Decision(proceed=False, reason="not on roster")

    class Undoes:
        @hookimpl
        def loop_work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
            assert ctx.proceed is False and ctx.reason == "not on roster"  # it sees the earlier decision
            return replace(ctx, proceed=True, reason="fine after all")

    plugin_host.register(Refuses(), "refuses")
    plugin_host.register(Undoes(), "undoes")
    decided = lifecycle.run(ctx_for(world.config, "work_item_start"), world.config)
    assert (decided.proceed, decided.reason) == (False, "not on roster")
    assert [e["hook"] for e in world.events("hooks.refused")] == ["refuses"]
    assert [e["hook"] for e in world.events("hooks.decided")] == ["refuses"]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ({"proceed": "no", "prompt": "x"}, "'proceed'"),  # E24: nothing applied, the field named
        ({"prompt": 42}, "'prompt'"),
        ({"proceed": 0}, "'proceed'"),  # bool is not int, nor int bool
        (["proceed", False], "list"),
        (WorkItemStart(), "WorkItemStart"),  # another point's context
    ],
)
def test_e24_a_malformed_answer_changes_nothing_and_names_what_is_wrong(
    world: World, plugin_host: Any, answer: Any, named: str
) -> None:
    class Malformed:
        @hookimpl
        def loop_session_spawn(self, ctx: SessionSpawn) -> Any:
            return answer

    plugin_host.register(Malformed(), "malformed")
    decided = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config)
    assert (decided.proceed, decided.prompt) == (True, "boot")
    (failed,) = world.events("hooks.failed")
    assert failed["point"] == "session_spawn" and failed["hook"] == "malformed" and named in failed["error"]
    assert failed["required"] is False and not world.events("hooks.decided")


def test_a_raising_hook_does_not_stop_later_hooks_and_a_required_one_refuses(
    world: World, plugin_host: Any, tmp_path: Path
) -> None:
    class Raises:
        @hookimpl
        def loop_session_spawn(self, ctx: SessionSpawn) -> None:
            raise RuntimeError("hook bug")

        @hookimpl
        def loop_session_spawned(self, ctx: Any) -> None:
            raise RuntimeError("hook bug")

    log = tmp_path / "later.jsonl"
    plugin_host.register(Raises(), "raises")
    world.configure(hooks=[recorder("later", log, {"session_spawn": {"prompt": "from later"}})])
    decided = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config)
    assert (decided.proceed, decided.prompt) == (True, "from later")
    assert world.events("hooks.failed")[0]["error"] == "RuntimeError: hook bug"

    Raises.the_loop_required = True  # type: ignore[attr-defined]
    decided = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config)
    assert decided.proceed is False
    assert decided.reason == "required hook raises failed: RuntimeError: hook bug"
    assert len(calls(log, "session_spawn")) == 2  # the chain went on after the refusal
    # A point without `proceed` cannot be refused: the failure is only logged.
    spawned = lifecycle.run(ctx_for(world.config, "session_spawned"), world.config)
    assert spawned.announce is True
    assert world.events("hooks.failed")[-1]["required"] is True


def test_an_empty_text_is_no_change_and_facts_cannot_be_changed(world: World, plugin_host: Any) -> None:
    class Blanks:
        @hookimpl
        def loop_input_received(self, ctx: Any) -> dict[str, Any]:
            return {"text": "", "actor": "mallory", "work_item": {"ref": "fake:x/y#1"}}

        @hookimpl
        def loop_waiting_for_input(self, ctx: WaitingForInput) -> Decision:
            return Decision(question="", summary="short")

    plugin_host.register(Blanks(), "blanks")
    decided = lifecycle.run(ctx_for(world.config, "input_received", text="hello", actor="alice"), world.config)
    assert (decided.text, decided.actor, decided.work_item.ref) == ("hello", "alice", REF)
    asked = lifecycle.run(ctx_for(world.config, "waiting_for_input", question="Which one?"), world.config)
    assert (asked.question, asked.summary) == ("Which one?", "short")


def test_e26_work_item_complete_can_skip_only_the_announcement(world: World, tmp_path: Path) -> None:
    """E26's runner half: the close path (GitHub plugin II) fires this point and acts on `announce`."""
    log = tmp_path / "complete.jsonl"
    world.configure(hooks=[recorder("quiet", log, {"work_item_complete": {"announce": False}})])
    ctx = ctx_for(world.config, "work_item_complete", state="closed", source="webhook", actor="octocat")
    decided = lifecycle.run(ctx, world.config)
    assert decided.announce is False and decided.state == "closed"
    assert calls(log)[0]["ctx"]["state"] == "closed"
    assert world.events("hooks.decided")[0]["changed"] == ["announce"]


def test_decide_builds_the_context_from_facts_for_one_shot_callers(world: World, tmp_path: Path) -> None:
    """`the-loop ask` calls decide() with its facts and its config, so the declared hooks are asked (issue-393)."""
    log = tmp_path / "ask.jsonl"
    world.configure(hooks=[recorder("polish", log, {"waiting_for_input": {"question": "Which colour, please?"}})])
    facts = {"kind": "question", "question": "colour?", "node": 3, "comment_id": "7"}  # a wrong type, a non-fact
    decided = lifecycle.decide("waiting_for_input", REF, facts, world.config)
    assert isinstance(decided, WaitingForInput)
    assert (decided.question, decided.kind, decided.node) == ("Which colour, please?", "question", "")
    assert calls(log)[0]["ctx"]["question"] == "colour?"


def test_the_runner_never_raises_into_its_caller(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> Any:
        raise RuntimeError("no host")

    monkeypatch.setattr(lifecycle, "_chain", broken)
    ctx = ctx_for(world.config, "work_item_start")
    assert lifecycle.run(ctx, world.config) == ctx
    assert world.events("hooks.failed")[0]["hook"] == "(runner)"


# ------------------------------------------------------------------------------------------ the declaration


def load(tmp_path: Path, document: str) -> LoadedConfig:
    path = tmp_path / "cfg" / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document)
    return load_config(path, get_host())


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        ("{name: x, module: m}", "hooks: must be a list"),
        ("[{module: m}]", "hooks[0]: name is required"),
        ("[{name: Bad_Name, module: m}]", "hooks[0] (Bad_Name): name 'Bad_Name' must be lowercase letters"),
        ("[{name: off, module: m}]", "hooks[0]: name False must be"),  # YAML 1.1: a bare off is false
        ("[{name: a, module: m}, {name: a, module: n}]", "hooks[1] (a): the name is already used by hooks[0]"),
        ("[{name: a}]", "give exactly one of module, path or url (found none)"),
        ("[{name: a, module: m, url: 'https://h/'}]", "(found module, url)"),
        ("[{name: a, module: m, colour: red}]", "unknown key 'colour'"),
        ("[{name: a, module: m, 1: x}]", "unknown key 1"),  # issue-433 bug 2: a non-string key, shown with repr
        ("[{name: a, module: m, tokenEnv: T}]", "tokenEnv is only for url hooks"),
        ("[{name: a, url: 'https://h/', executor: E}]", "executor is only for module and path hooks"),
        ("[{name: a, url: 'https://h/', with: {}}]", "with is only for module and path hooks"),
        ("[{name: a, module: 'not a module'}]", "is not a dotted module name"),
        ("[{name: a, path: hooks/x.txt}]", "must name a .py file"),
        ("[{name: a, module: m, required: 'yes'}]", "required must be true or false"),
        ("[{name: a, module: m, 'on': []}]", "on is empty"),
        ("[{name: a, module: m, 'on': work_item_start}]", "on must be a list of point names"),
        ("[{name: a, module: m, 'on': [session.spawned]}]", "'session.spawned' is not a lifecycle point"),  # PR #357
        ("[{name: a, module: m, 'on': [input_received], on: [input_received]}]", "`on` is given twice"),
        ("[{name: a, url: 'ftp://h/x'}]", "must be http(s)://host/"),
        ("[{name: a, url: 'https:///x'}]", "must be http(s)://host/"),
        ("[{name: a, url: 'https://h/', tokenEnv: 'my token'}]", "tokenEnv must be the NAME"),
        ("[{name: a, url: 'https://h/', headers: {X-Id: 1}}]", "headers must map strings to strings"),
        ("[{name: a, url: 'https://h/', timeoutSeconds: 0}]", "timeoutSeconds must be a number > 0"),
        ("[{name: a, url: 'https://h/', timeoutSeconds: true}]", "timeoutSeconds must be a number > 0"),
    ],
)
def test_l1_a_bad_declaration_is_one_line_naming_the_entry(tmp_path: Path, hooks: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, f"hooks: {hooks}\n")
    text = str(raised.value)
    assert message in text and "\n" not in text
    assert text.startswith(f"{tmp_path / 'cfg' / 'cli-config.yaml'}: hooks")


@pytest.mark.parametrize(
    "url",
    ["http://alice:s3cret-pass@127.0.0.1:9/", "https://s3cret-pass@example.com/x", "ftp://alice:s3cret-pass@h/x"],
    ids=["user-and-password", "token-as-user", "bad-scheme-too"],
)
def test_issue_16_a_hook_url_carrying_credentials_is_refused_without_echoing_them(tmp_path: Path, url: str) -> None:
    """Issue 16 (8): the token has its own key (tokenEnv); a URL's user:password is refused and never printed."""
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, f"hooks: [{{name: h, url: '{url}'}}]\n")
    text = str(raised.value)
    assert "hooks[0] (h): url must not carry credentials" in text
    assert "s3cret-pass" not in text and "alice" not in text


def test_e18_a_token_never_travels_in_cleartext_off_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"hooks\[0\] \(h\): a token is never sent over plain http"):
        load(tmp_path, "hooks: [{name: h, url: 'http://example.com/', tokenEnv: TOK}]\n")
    with pytest.raises(ConfigError, match="headers may not carry Authorization"):
        load(tmp_path, "hooks: [{name: h, url: 'https://example.com/', headers: {authorization: x}}]\n")
    for url in ("http://127.0.0.1:9/", "http://localhost:9/", "http://[::1]:9/", "https://example.com/"):
        config = load(tmp_path, f"hooks: [{{name: h, url: '{url}', tokenEnv: TOK}}]\n")
        (loaded,) = hooks_executors.load_declared(config)  # loading contacts nothing: port 9 has no listener
        assert loaded.points == lifecycle.POINTS


def test_a_bare_yaml_on_key_is_the_on_list(tmp_path: Path) -> None:
    """issue-433 bug 1: YAML 1.1 reads a bare `on:` key as true; it is accepted as `on`."""
    config = load(tmp_path, "hooks:\n  - name: a\n    module: m\n    on: [work_item_start]\n")
    assert config.core.hooks[0].on == ["work_item_start"]
    assert not config.warnings


def test_l16a_on_accepts_every_point_of_the_one_catalog(tmp_path: Path) -> None:
    """GAP L16(a): `on` is checked against the catalog the runner uses, so input_received is as good as the rest."""
    points = ", ".join(lifecycle.POINTS)
    config = load(tmp_path, f"hooks: [{{name: a, module: m, 'on': [{points}]}}]\n")
    assert config.core.hooks[0].on == list(lifecycle.POINTS)


def test_l2_a_path_resolves_beside_the_config_file_without_following_symlinks(tmp_path: Path) -> None:
    """issue-343 F10: the config's directory is where its link is, not where the link points."""
    real = tmp_path / "real"
    (real / "hooks").mkdir(parents=True)
    (real / "cli-config.yaml").write_text("hooks: [{name: a, path: hooks/x.py}, {name: b, path: ~/h.py}]\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "cli-config.yaml").symlink_to(real / "cli-config.yaml")
    (linked / "hooks").symlink_to(real / "hooks")
    config = load_config(linked / "cli-config.yaml", get_host())
    from the_loop.config.hooks import hook_target

    assert hook_target(config.core.hooks[0], config.ref.path) == str(linked / "hooks" / "x.py")
    assert hook_target(config.core.hooks[1], config.ref.path) == str(Path.home() / "h.py")


def test_l3_loading_refuses_what_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    cases = {
        "{name: a, module: no_such_hook_module}": "hook a: loading no_such_hook_module raised ModuleNotFoundError",
        f"{{name: a, path: {tmp_path}/missing.py}}": f"hook a: {tmp_path}/missing.py does not exist",
        "{name: a, module: two_classes}": "expected exactly one LifecycleHooks subclass (found Broken, First, Second)",
        "{name: a, module: two_classes, executor: Nope}": "executor 'Nope' is not defined",
        "{name: a, module: two_classes, executor: NOT_A_HOOK}": "is not a LifecycleHooks subclass or instance",
        "{name: a, module: two_classes, executor: INSTANCE, with: {label: x}}": "is an instance already",
        "{name: a, module: two_classes, executor: Broken}": "Broken(**with) raised ValueError: cannot build",
        "{name: a, module: two_classes, executor: First, with: {nope: 1}}": "First(**with) raised TypeError",
        "{name: a, module: hook_recorder}": "Recorder(**with) raised TypeError",  # `log` is required
    }
    for entry, message in cases.items():
        config = load(tmp_path, f"hooks: [{entry}]\n")
        with pytest.raises(hooks_executors.HookLoadError) as raised:
            hooks_executors.load_declared(config)
        assert message in str(raised.value), entry

    config = load(
        tmp_path,
        "hooks: [{name: a, module: two_classes, executor: INSTANCE}, {name: b, module: x, "
        "enabled: false}, {name: c, module: two_classes, executor: First, 'on': [work_item_start]}]\n",
    )
    loaded = hooks_executors.load_declared(config)  # a disabled entry loads nothing, not even its module
    assert [(hook.name, hook.points) for hook in loaded] == [("a", ("session_spawned",)), ("c", ())]


def test_a_path_module_runs_once_per_file_per_process(tmp_path: Path) -> None:
    hook = tmp_path / "cfg" / "counting.py"
    hook.parent.mkdir(parents=True)
    hook.write_text(
        "import os\nfrom the_loop.hooks.lifecycle import LifecycleHooks\n"
        f"open({str(tmp_path / 'ran')!r}, 'a').write('x')\n"
        "class H(LifecycleHooks):\n    def work_item_start(self, ctx):\n        return None\n"
    )
    for _ in range(3):
        hooks_executors.load_declared(load(tmp_path, "hooks: [{name: a, path: counting.py}]\n"))
    assert (tmp_path / "ran").read_text() == "x"


# ----------------------------------------------------------------------------------------------- the CLI


def test_e17_e19_hooks_lists_without_importing_and_daemons_refuse_naming_the_entry(loop_env: LoopEnv) -> None:
    mark = loop_env.tmp / "imported"
    hooks_dir = loop_env.config_path.parent / "hooks"
    hooks_dir.mkdir()
    shutil.copy(FIXTURES / "raises_on_import.py", hooks_dir / "x.py")
    port = free_port()
    loop_env.env.update(
        HOOK_IMPORTED_MARK=str(mark),
        THE_LOOP_GH_WEBHOOK_SECRET="s3cret",
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS_CORE), os.environ.get("PYTHONPATH")])),
        THE_LOOP_EXTRA_PLUGINS="plugins_for_tests.loop_test_plugin",
    )
    loop_env.write_config(
        'version: "0.12.0"\n'
        f"webhooks: {{ghWebhook: {{enabled: true, port: {port}}}}}\n"
        "polling: {enabled: true, intervalSeconds: 60, sources: [{provider: fake}]}\n"
        "hooks:\n  - name: bad\n    path: hooks/x.py\n    on: [work_item_start]\n    required: true\n"
    )
    try:
        listed = loop_env.run("hooks")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1] == f"bad  path {hooks_dir / 'x.py'}  [required]"
        as_json = loop_env.run("hooks", "--format", "json")
        assert json.loads(as_json.stdout) == {
            "config": str(loop_env.config_path),
            "hooks": [
                {
                    "name": "bad",
                    "kind": "path",
                    "target": str(hooks_dir / "x.py"),
                    "on": ["work_item_start"],  # E19: the bare `on:` key
                    "required": True,
                    "enabled": True,
                    "executor": "",
                    "with": {},
                }
            ],
        }
        assert not mark.exists()  # nothing was imported

        started = loop_env.run("start")
        assert started.returncode == 1
        for service in ("gh-webhook", "poller"):
            line = next(line for line in started.stdout.splitlines() if line.startswith(service))
            assert "failed" in line, started.stdout
            log = (loop_env.root / "logs" / f"{service}.out").read_text()
            assert f"error: {service} cannot start: hook bad: loading {hooks_dir / 'x.py'} raised RuntimeError" in log
        assert mark.exists()  # the daemons did try it
        failed = [e for e in loop_env.events() if e["event"] == "daemon.failed"]
        assert {e["service"] for e in failed} == {"gh-webhook", "poller"}
        assert not (loop_env.root / "gh-webhook.pid").exists() and not (loop_env.root / "poll.pid").exists()
    finally:
        kill_lock_holders(loop_env.root)


def test_hooks_list_exits_1_with_the_error_on_a_bad_declaration(loop_env: LoopEnv) -> None:
    loop_env.write_config("hooks: [{name: a, module: m, tokenEnv: T}]\n")
    text = loop_env.run("hooks", "list")
    assert text.returncode == 1
    assert text.stderr == f"error: {loop_env.config_path}: hooks[0] (a): tokenEnv is only for url hooks\n"
    as_json = loop_env.run("hooks", "list", "--format", "json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"].endswith("hooks[0] (a): tokenEnv is only for url hooks")
    validate = loop_env.run("config", "validate")  # any config-needing command: exit 2, one line
    assert validate.returncode == 2 and validate.stderr.count("error:") == 1 and "hooks[0] (a)" in validate.stderr


def test_hooks_list_shows_remote_entries_and_an_empty_declaration(loop_env: LoopEnv) -> None:
    assert loop_env.run("hooks").stdout.startswith("no lifecycle hooks declared")
    loop_env.write_config(
        "hooks: [{name: r, url: 'https://hooks.example/x', tokenEnv: HOOK_TOKEN, headers: {X-Team: core}}]\n"
    )
    (row,) = json.loads(loop_env.run("hooks", "list", "--format", "json").stdout)["hooks"]
    assert row == {
        "name": "r",
        "kind": "url",
        "target": "https://hooks.example/x",
        "on": None,
        "required": False,
        "enabled": True,
        "tokenEnv": "HOOK_TOKEN",
        "headers": {"X-Team": "core"},
        "timeoutSeconds": 10,
    }


def test_config_show_prints_a_declaration_that_loads_again(loop_env: LoopEnv) -> None:
    loop_env.write_config("hooks: [{name: r, url: 'https://h.example/x'}, {name: l, module: m, enabled: false}]\n")
    shown = loop_env.run("config", "show")
    assert shown.returncode == 0, shown.stderr
    loop_env.write_config(shown.stdout)
    listed = json.loads(loop_env.run("hooks", "list", "--format", "json").stdout)["hooks"]
    assert [(row["name"], row["kind"], row["enabled"]) for row in listed] == [
        ("r", "url", True),
        ("l", "module", False),
    ]


def test_hooks_points_lists_every_point_from_the_code(loop_env: LoopEnv) -> None:
    result = loop_env.run("hooks", "points", "--format", "json")
    assert result.returncode == 0
    rows = json.loads(result.stdout)["points"]
    assert [row["point"] for row in rows] == list(lifecycle.POINTS)
    spawn_row = rows[1]
    assert spawn_row["context"] == "SessionSpawn"
    assert spawn_row["decisions"] == {"prompt": "", "proceed": True, "reason": ""}
    assert spawn_row["facts"] == [
        "work_item",
        "endpoint",
        "harness",
        "cwd",
        "model",
        "effort",
        "harness_args",
        "respawn",
        "loop",
    ]
    assert "work_item_complete  (WorkItemComplete)" in loop_env.run("hooks", "points").stdout


# ------------------------------------------------------------------------------------------- remote and SDK


class Sleepy(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> None:
        time.sleep(2)


def test_the_sdk_answers_json_rpc_with_the_documented_codes(tmp_path: Path, Recorder: Any) -> None:
    hook = Recorder(str(tmp_path / "log.jsonl"), {"work_item_start": {"proceed": False, "reason": "no"}})

    def ask(body: Any) -> dict[str, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return json.loads(handle_request(hook, raw))

    params = {"work_item": {"ref": REF, "number": 15}, "actor": "alice"}
    assert ask({"jsonrpc": "2.0", "id": 7, "method": "work_item_start", "params": params}) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"proceed": False, "reason": "no"},
    }
    assert ask({"jsonrpc": "2.0", "id": 8, "method": "session_spawned", "params": {}})["result"] is None
    assert ask(b"{not json")["error"]["code"] == -32700
    assert ask({"jsonrpc": "1.0", "id": 1, "method": "work_item_start"})["error"]["code"] == -32600
    assert ask({"jsonrpc": "2.0", "id": 1, "method": "session.spawned"})["error"]["code"] == -32601
    bad_param = ask({"jsonrpc": "2.0", "id": 1, "method": "work_item_start", "params": {"actor": 3}})
    assert bad_param["error"]["code"] == -32602 and "actor" in bad_param["error"]["message"]
    bad_fact = ask({"jsonrpc": "2.0", "id": 1, "method": "session_spawn", "params": {"work_item": {"number": "1"}}})
    assert bad_fact["error"]["code"] == -32602
    hook.answers["work_item_start"] = {"proceed": "no"}
    assert ask({"jsonrpc": "2.0", "id": 2, "method": "work_item_start", "params": {}})["error"]["code"] == -32000


def test_the_hook_server_checks_the_bearer_and_serves_health(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDECAR_TOKEN", "t0ken")
    server = serve(Sleepy(), token_env="SIDECAR_TOKEN")
    health = httpx.get(f"{server.url}health", timeout=5)
    assert health.json() == {"ok": True, "points": ["session_spawn"]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "work_item_start", "params": {}}
    assert httpx.post(server.url, json=body, timeout=5).status_code == 401
    wrong = httpx.post(server.url, json=body, headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401
    right = httpx.post(server.url, json=body, headers={"Authorization": "Bearer t0ken"}, timeout=5)
    assert right.json() == {"jsonrpc": "2.0", "id": 1, "result": None}


def test_a_remote_hook_gets_the_context_as_params_with_its_token_read_at_call_time(
    world: World,
    serve: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    Recorder: Any,
) -> None:
    log = tmp_path / "remote.jsonl"
    server = serve(Recorder(str(log), {"session_spawn": {"prompt": "remote prompt"}}), token_env="HOOK_TOKEN")
    world.configure(hooks=[{"name": "r", "url": server.url, "tokenEnv": "HOOK_TOKEN", "on": ["session_spawn"]}])
    ctx = ctx_for(world.config, "session_spawn", harness="fake", cwd="/w", harness_args=("--x",), prompt="boot")

    unset = lifecycle.run(ctx, world.config)  # no token in the environment: nothing is sent
    assert unset.prompt == "boot" and not calls(log)
    assert "HOOK_TOKEN is not set" in world.events("hooks.failed")[0]["error"]

    monkeypatch.setenv("HOOK_TOKEN", "secret-token-value")
    decided = lifecycle.run(ctx, world.config)
    assert decided.prompt == "remote prompt"
    (asked,) = calls(log)
    assert asked["ctx"] == {
        "work_item": {
            "ref": REF,
            "provider": "fake",
            "host": "",
            "owner": "octo",
            "repo": "repo",
            "repository": "octo/repo",
            "number": 15,
            "kind": "",
            "url": "https://tickets.example/octo/repo/15",
            "id": "fake-octo-repo-15",
        },
        "endpoint": {},
        "harness": "fake",
        "cwd": "/w",
        "model": "",
        "effort": "",
        "harness_args": ["--x"],
        "respawn": False,
        "loop": "",
        "prompt": "boot",
        "proceed": True,
        "reason": "",
    }
    # `on` narrows: work_item_start is not asked
    assert lifecycle.run(ctx_for(world.config, "work_item_start"), world.config).proceed is True
    assert len(calls(log)) == 1
    assert "secret-token-value" not in world.config.state.events_path.read_text()


class _RemoteHook(BaseHTTPRequestHandler):
    """A remote hook on 127.0.0.1: each JSON-RPC request gets :meth:`reply`'s answer."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request["id"], "result": None}

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.dumps(self.reply(json.loads(self.rfile.read(length)))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        return


class _WrongId(_RemoteHook):
    """Answers every request with another request's id."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request["id"] + 1, "result": {"prompt": "x"}}


def test_e24_a_reply_with_another_id_is_a_failure(world: World) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WrongId)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        world.configure(hooks=[{"name": "liar", "url": f"http://127.0.0.1:{server.server_address[1]}/"}])
        decided = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config)
    finally:
        server.shutdown()
        server.server_close()
    assert decided.prompt == "boot"
    (failed,) = world.events("hooks.failed")
    assert failed["hook"] == "hooks:liar" and "the reply's id 2 is not the request's 1" in failed["error"]


def test_an_unreachable_or_erroring_remote_hook_is_a_failure(world: World) -> None:
    port = free_port()  # nothing listens there
    world.configure(hooks=[{"name": "gone", "url": f"http://127.0.0.1:{port}/", "timeoutSeconds": 2}])
    decided = lifecycle.run(ctx_for(world.config, "work_item_start"), world.config)
    assert decided.proceed is True
    assert world.events("hooks.failed")[0]["error"].startswith("ConnectError: ")


class _Capture(_RemoteHook):
    """Records each request (headers and body) and answers ``result: null`` to its id."""

    seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        type(self).seen.append((dict(self.headers), request))
        return super().reply(request)


def test_l11_a_remote_call_is_one_json_rpc_post_with_the_entrys_headers_and_a_fresh_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Capture.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HOOK_TOKEN", "t0ken-value")
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        world.configure(hooks=[{"name": "h", "url": url, "tokenEnv": "HOOK_TOKEN", "headers": {"X-Team": "core"}}])
        lifecycle.run(ctx_for(world.config, "work_item_start", actor="alice"), world.config)
        lifecycle.run(ctx_for(world.config, "session_spawned"), world.config)
    finally:
        server.shutdown()
        server.server_close()
    assert [request["id"] for _headers, request in _Capture.seen] == [1, 2]  # increments per executor
    assert [request["method"] for _headers, request in _Capture.seen] == ["work_item_start", "session_spawned"]
    headers, request = _Capture.seen[0]
    assert request["jsonrpc"] == "2.0" and request["params"]["actor"] == "alice"
    assert request["params"]["work_item"]["ref"] == REF
    assert headers["Content-Type"] == "application/json" and headers["Accept"] == "application/json"
    assert headers["X-Team"] == "core" and headers["Authorization"] == "Bearer t0ken-value"
    assert not world.events("hooks.failed")
    assert "t0ken-value" not in world.config.state.events_path.read_text()


# ------------------------------------------------------------------------------- the points at the dispatcher


def test_e20_a_remote_refusal_at_start_disarms_and_explains_once(
    world: World,
    serve: Any,
    tmp_path: Path,
    Recorder: Any,
) -> None:
    log = tmp_path / "roster.jsonl"
    server = serve(Recorder(str(log), {"work_item_start": {"proceed": False, "reason": "not on roster"}}))
    world.configure(hooks=[{"name": "roster", "url": server.url}], workspace={"root": str(tmp_path / "checkouts")})
    ref = parse_ref(REF)
    control.record(world.config, ref, "start", source="comment", actor="mallory")  # an authorized start arrives
    start = world.work_event("start the work", spawn=True, actor="mallory", source="webhook", kind="comment")

    outcome = world.dispatcher.dispatch(start)

    assert outcome == Outcome("dropped", reason="hook-refused", error="not on roster")
    assert world.record() is None and world.runner.probe(ref.tmux_name) == "absent"
    assert not (tmp_path / "checkouts").exists()  # no checkout: the point comes before it
    assert "control" not in portable_of(world) and "lifecycle" not in portable_of(world)
    (asked,) = calls(log)
    assert asked["point"] == "work_item_start"
    assert (asked["ctx"]["command"], asked["ctx"]["actor"], asked["ctx"]["harness"]) == ("start", "mallory", "fake")
    refused = world.events("hooks.refused")
    assert [(e["point"], e["hook"], e["reason"]) for e in refused] == [
        ("work_item_start", "hooks:roster", "not on roster")
    ]
    assert [e["reason"] for e in world.events("dispatch.dropped")] == ["hook-refused"]
    (comment,) = world.comments()
    assert "not on roster" in comment and fake_plugin.MARKER in comment

    again = world.dispatcher.dispatch(start)  # a redelivery of the same start does nothing
    assert again.reason == "duplicate-delivery"
    assert len(world.comments()) == 1 and len(calls(log)) == 1


def test_e22_a_path_hook_replaces_the_boot_prompt_but_not_the_cwd(world: World) -> None:
    world.configure(hooks=[{"name": "rules", "path": str(FIXTURES / "rules_prompt.py")}])
    harness = world.spawn()
    (start,) = harness.records("start")
    assert start["cwd"] == str(world.tmp / "work")
    boot = harness.submitted()[0]
    assert boot.startswith("RULES\n\n") and "start the work" in boot
    (decided,) = world.events("hooks.decided")
    assert (decided["point"], decided["hook"], decided["changed"]) == ("session_spawn", "hooks:rules", ["prompt"])


@pytest.mark.parametrize("required", [True, False])
def test_e23_a_remote_hook_past_its_timeout(world: World, serve: Any, tmp_path: Path, required: bool) -> None:
    later = tmp_path / "later.jsonl"
    server = serve(Sleepy())
    world.configure(
        hooks=[
            {"name": "slow", "url": server.url, "timeoutSeconds": 1, "required": required},
            recorder("later", later),
        ]
    )
    began = time.monotonic()
    outcome = world.dispatcher.dispatch(world.work_event("start the work", spawn=True))
    assert time.monotonic() - began < 10
    (failed,) = [e for e in world.events("hooks.failed") if e["point"] == "session_spawn"]
    assert failed["hook"] == "hooks:slow" and "no answer within 1s" in failed["error"]
    assert len(calls(later, "session_spawn")) == 1  # the chain went on
    if required:
        assert outcome.status == "dropped" and outcome.reason == "hook-refused"
        assert outcome.error.startswith("required hook slow failed: no answer within 1s")
        assert world.record() is None and world.runner.probe(parse_ref(REF).tmux_name) == "absent"
        (spawn_failed,) = world.events("session.spawn_failed")
        assert spawn_failed["error"].startswith("refused by a lifecycle hook: required hook slow failed")
        assert spawn_failed["will_retry"] is False and spawn_failed["harness"] == "fake"
        assert len(world.comments()) == 1  # the explanation, no attach comment
    else:
        assert outcome.status == "spawned"
        assert world.runner.probe(parse_ref(REF).tmux_name) == "live"


def test_session_spawned_can_skip_only_the_attach_comment(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    world.configure(hooks=[{"name": "quiet", "module": "two_classes", "executor": "First"}])
    world.spawn()
    assert world.comments() == []
    assert world.events("session.spawned") and not world.events("session.announced")
    world.configure()
    world.dispatcher.dispatch(
        world.work_event("start the work", spawn=True, delivery_id="other", ref="fake:octo/repo#16")
    )
    assert len(world.comments("fake:octo/repo#16")) == 1  # without the hook the comment is posted


def test_input_received_rewords_or_refuses_a_delivery(world: World, plugin_host: Any) -> None:
    class Moderator:
        @hookimpl
        def loop_input_received(self, ctx: Any) -> dict[str, Any] | None:
            if "secret" in ctx.text:
                return {"proceed": False, "reason": "no secrets in prompts"}
            if "shout" in ctx.text:
                return {"text": ctx.text.upper()}
            return {"text": ""}  # empty: keep it as it is

    plugin_host.register(Moderator(), "moderator")
    harness = world.spawn()
    assert (
        world.dispatcher.dispatch(world.work_event("please shout", kind="comment", actor="alice")).status == "delivered"
    )
    assert world.dispatcher.dispatch(world.work_event("as it is", kind="comment")).status == "delivered"
    assert harness.wait_for_submitted(3)[1:] == ["PLEASE SHOUT", "as it is"]

    refused = world.dispatcher.dispatch(world.work_event("the secret is 42", kind="comment", actor="alice"))
    assert refused == Outcome("dropped", reason="input-refused", error="no secrets in prompts")
    time.sleep(0.3)
    assert len(harness.submitted()) == 3
    assert "no secrets in prompts" in world.comments()[-1]
    assert (
        world.dispatcher.dispatch(world.work_event("CI passed", kind="ci")).status == "delivered"
    )  # not input: not asked


def test_a_respawn_asks_session_spawn_again_but_never_work_item_start(world: World, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    world.configure(hooks=[recorder("rec", log)])
    world.spawn()
    world.runner.kill(parse_ref(REF).tmux_name)
    world.configure(hooks=[recorder("rec", log)])  # a restart, too
    assert world.dispatcher.dispatch(world.work_event("after the crash", kind="comment")).status == "respawned"
    points = [(c["point"], c["ctx"].get("respawn")) for c in calls(log)]
    assert points == [
        ("work_item_start", None),
        ("session_spawn", False),
        ("session_spawned", False),
        ("input_received", None),
        ("session_spawn", True),
        ("session_spawned", True),
    ]


def test_l8_a_refused_respawn_launches_nothing_and_the_input_is_settled(world: World, plugin_host: Any) -> None:
    class NoRespawns:
        @hookimpl
        def loop_session_spawn(self, ctx: SessionSpawn) -> Decision | None:
            return Decision(proceed=False, reason="no relaunch tonight") if ctx.respawn else None

    plugin_host.register(NoRespawns(), "no-respawns")
    harness = world.spawn()
    target = world.record().own.tmux_target
    world.runner.kill(target)

    outcome = world.dispatcher.dispatch(world.work_event("are you there?", kind="comment", actor="alice"))

    assert outcome == Outcome("dropped", reason="hook-refused", error="no relaunch tonight")
    assert world.runner.probe(target) == "absent" and len(harness.records("start")) == 1
    (failed,) = world.events("session.spawn_failed")
    assert failed["error"] == "refused by a lifecycle hook: no relaunch tonight" and failed["will_retry"] is False
    assert "no relaunch tonight" in world.comments()[-1]
    assert [e["point"] for e in world.events("hooks.refused")] == ["session_spawn"]


def test_a_plugin_implementing_the_points_refuses_a_start_like_a_declared_hook(world: World, plugin_host: Any) -> None:
    class Gate:
        the_loop_required = True

        @hookimpl
        def loop_work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
            return replace(ctx, proceed=False, reason="freeze week")

    plugin_host.register(Gate(), "gate")
    outcome = world.dispatcher.dispatch(world.work_event("start the work", spawn=True))
    assert outcome == Outcome("dropped", reason="hook-refused", error="freeze week")
    assert "freeze week" in world.comments()[0]


def test_a_declared_hook_that_raises_stops_neither_the_dispatcher_nor_later_hooks(world: World, tmp_path: Path) -> None:
    log = tmp_path / "later.jsonl"
    world.configure(
        hooks=[
            {"name": "buggy", "module": "raises_at_points"},
            recorder("later", log, {"session_spawn": {"prompt": "boot from the later hook"}}),
        ]
    )
    harness = world.spawn()
    assert harness.submitted()[0] == "boot from the later hook"  # the hook after the failing one was asked
    assert world.dispatcher.dispatch(world.work_event("a comment", kind="comment", actor="alice")).status == "delivered"
    assert harness.wait_for_submitted(2)[-1] == "a comment"
    failed = [(e["point"], e["hook"], e["error"]) for e in world.events("hooks.failed")]
    assert failed == [
        ("session_spawn", "hooks:buggy", "RuntimeError: hook bug at spawn"),
        ("input_received", "hooks:buggy", "RuntimeError: hook bug at input"),
    ]
    assert [c["point"] for c in calls(log)] == ["work_item_start", "session_spawn", "session_spawned", "input_received"]


class _RecordingChannel(Channel):
    """A conversation surface that keeps what it was asked to post."""

    name = "recording"
    posts: ClassVar[list[ChannelMessage]] = []

    @classmethod
    def enabled(cls, config: LoadedConfig) -> bool:
        return True

    def subscribed(self) -> tuple[str, ...]:
        return ("work-item.closed",)

    def open_conversation(self, ref: Any, title: str) -> dict[str, str]:
        return {"channel": "C1", "thread": "T1"}

    def publish(self, binding: Any, message: ChannelMessage) -> None:
        type(self).posts.append(message)


class _ChannelPlugin:
    @hookimpl
    def loop_register_channels(self) -> list[type[Channel]]:
        return [_RecordingChannel]


@pytest.mark.parametrize("announce", [False, True], ids=["announce-false", "default"])
def test_e26_a_closing_ticket_skips_only_the_channel_post_when_a_hook_says_announce_false(
    world: World, plugin_host: Any, tmp_path: Path, announce: bool
) -> None:
    from the_loop.sessions import closing

    _RecordingChannel.posts = []
    at_call: list[str] = []

    class Watcher:
        @hookimpl
        def loop_work_item_complete(self, ctx: WorkItemComplete) -> None:
            at_call.append(world.record().own.status)  # L10: asked before anything is cleared

    plugin_host.register(_ChannelPlugin(), "recording")
    plugin_host.register(Watcher(), "watcher")
    answers = {} if announce else {"work_item_complete": {"announce": False}}
    log = tmp_path / "complete.jsonl"
    world.configure(hooks=[recorder("quiet", log, answers)])
    world.spawn()
    assert portable_of(world)["channels"]["recording"]["thread"] == "T1"  # a bound conversation

    closing.work_item_ended(
        world.config, REF, reason="issue-closed", actor="octocat", authorized=False, source="webhook"
    )

    assert at_call == ["active"]
    (asked,) = calls(log, "work_item_complete")
    assert (asked["ctx"]["state"], asked["ctx"]["source"], asked["ctx"]["actor"]) == ("closed", "webhook", "octocat")
    ended = portable_of(world)["ended"]
    assert (ended["state"], ended["reason"]) == ("closed", "issue-closed")
    assert [e["work_item"] for e in world.events("work_item.ended")] == [REF]
    assert world.record().own.status == "closed"
    posted = [(m.event_type, m.work_item) for m in _RecordingChannel.posts]
    if announce:
        assert posted == [("work-item.closed", REF)]
    else:
        assert posted == []
        assert [e["changed"] for e in world.events("hooks.decided")] == [["announce"]]


# ------------------------------------------------------------------------------- once per arming, across processes


@pytest.fixture
def operator(loop_env: LoopEnv, tmux_runner: TmuxRunner) -> LoopEnv:
    work = loop_env.tmp / "work"
    work.mkdir()
    loop_env.env.update(
        THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
        FAKE_HARNESS_LOG=str(loop_env.tmp / "{session}.jsonl"),
        FAKE_TICKETS=str(loop_env.tmp / "tickets.json"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")])),
    )
    loop_env.socket = tmux_runner.socket  # type: ignore[attr-defined]
    return loop_env


def configure(env: LoopEnv, hooks: list[dict[str, Any]]) -> None:
    routing = {
        "defaultHarness": "fake",
        "spawnOnUnmatched": "always",
        "spawnWorkdir": str(env.tmp / "work"),
        "tmux": {"socketName": env.socket, "resumeProbeSeconds": 0.3},  # type: ignore[attr-defined]
    }
    env.write_config(yaml.safe_dump({"routing": routing, "hooks": hooks}))


def portable(env: LoopEnv) -> dict[str, Any]:
    path = env.root / "portable" / "fake-octo-repo-15.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_a_refused_start_is_asked_again_only_after_a_new_arming_in_any_process(operator: LoopEnv) -> None:
    log = operator.tmp / "asked.jsonl"
    refuse = {"work_item_start": {"proceed": False, "reason": "not on roster"}}
    configure(operator, [recorder("roster", log, refuse)])

    refused = operator.run("sessions", "start", "--work-item", REF)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: a lifecycle hook refused the start: not on roster"
    assert "control" not in portable(operator) and "lifecycle" not in portable(operator)
    tickets = json.loads((operator.tmp / "tickets.json").read_text())["items"][REF]["comments"]
    assert len(tickets) == 1 and "not on roster" in tickets[0]
    assert operator.run("sessions", "say", "--work-item", REF, "--text", "hi").returncode == 1  # no session
    assert len(calls(log, "work_item_start")) == 1

    # A new arming in a new process asks again; this time the spawn is deferred (the harness is missing).
    configure(operator, [recorder("roster", log)])
    deferred = operator.run("sessions", "start", "--work-item", REF, FAKE_HARNESS_PYTHON="/nonexistent/python")
    assert deferred.returncode == 1 and "not found on PATH" in deferred.stderr
    assert len(calls(log, "work_item_start")) == 2
    assert re.match(r"^\d{4}-\d\d-\d\dT", portable(operator)["lifecycle"]["startedAt"])

    # Re-entered later by another process ("after a restart"): this arming was asked already.
    resumed = operator.run("sessions", "start", "--work-item", REF)
    assert resumed.returncode == 0, resumed.stderr
    assert len(calls(log, "work_item_start")) == 2
    assert len(calls(log, "session_spawn")) == 2  # asked at each launch attempt, though

    # stop disarms and clears the mark: the next start is a new arming, asked again.
    assert operator.run("sessions", "stop", "--work-item", REF, "--no-comment").returncode == 0
    assert "lifecycle" not in portable(operator)
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    assert len(calls(log, "work_item_start")) == 3
    comments = json.loads((operator.tmp / "tickets.json").read_text())["items"][REF]["comments"]
    assert sum("lifecycle hook refused" in c for c in comments) == 1  # the explanation appeared once


def test_l4_a_one_shot_command_runs_hookless_when_the_declaration_cannot_load(operator: LoopEnv) -> None:
    configure(operator, [{"name": "ghost", "module": "no_such_hook_module", "required": True}])
    started = operator.run("sessions", "start", "--work-item", REF)
    assert started.returncode == 0, started.stderr
    assert "lifecycle hooks not loaded, running without them: hook ghost" in started.stderr
    assert f"watch: the-loop sessions attach --work-item {REF} --read-only" in started.stdout  # where to look
    failed = [e for e in operator.events() if e["event"] == "hooks.load_failed"]
    assert len(failed) == 1 and failed[0]["strict"] is False and "ghost" in failed[0]["error"]


def test_l16b_sessions_reset_clears_the_mark_so_the_next_start_is_asked_again(operator: LoopEnv) -> None:
    log = operator.tmp / "asked.jsonl"
    configure(operator, [recorder("rec", log)])
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    assert "startedAt" in portable(operator)["lifecycle"]
    assert len(calls(log, "work_item_start")) == 1

    reset = operator.run("sessions", "reset", "--work-item", REF)
    assert reset.returncode == 0, reset.stderr
    assert "lifecycle" not in portable(operator)
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    assert len(calls(log, "work_item_start")) == 2


def test_l9_a_refused_say_is_an_error_to_the_caller_and_nothing_is_delivered(operator: LoopEnv) -> None:
    log = operator.tmp / "asked.jsonl"
    configure(operator, [recorder("gate", log, {"input_received": {"proceed": False, "reason": "quiet hours"}})])
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0

    said = operator.run("sessions", "say", "--work-item", REF, "--text", "one more thing")

    assert said.returncode == 1
    assert said.stderr.strip() == f"error: not delivered to {REF}: quiet hours"
    refused = [e for e in operator.events() if e["event"] == "hooks.refused"]
    assert [(e["point"], e["hook"], e["reason"]) for e in refused] == [("input_received", "hooks:gate", "quiet hours")]
    (asked,) = calls(log, "input_received")
    assert (asked["ctx"]["source"], asked["ctx"]["text"]) == ("verb", "one more thing")
    harnesses = list(operator.tmp.glob("*.jsonl"))
    submitted = [
        json.loads(line)["msg"] for path in harnesses for line in path.read_text().splitlines() if '"msg"' in line
    ]
    assert "one more thing" not in submitted


def test_issue_393_ask_inside_a_session_runs_the_daemons_declared_hooks(operator: LoopEnv) -> None:
    hooks_dir = operator.config_path.parent / "hooks"
    hooks_dir.mkdir()
    (hooks_dir / "polish.py").write_text(
        "from the_loop.hooks.lifecycle import LifecycleHooks\n\n\n"
        "class Polish(LifecycleHooks):\n"
        "    def waiting_for_input(self, ctx):\n"
        "        return {'question': ctx.question + ' (asked by the agent)'}\n"
    )
    configure(operator, [{"name": "polish", "path": "hooks/polish.py"}])

    # As a session runs it: no -c, only what the dispatcher exports into the pane.
    asked = operator.run(
        "ask",
        "--question",
        "Blue or green?",
        config=False,
        THE_LOOP_CLI_CONFIG=str(operator.config_path),
        THE_LOOP_WORK_ITEM=REF,
    )

    assert asked.returncode == 0, asked.stderr
    comments = json.loads((operator.tmp / "tickets.json").read_text())["items"][REF]["comments"]
    assert len(comments) == 1 and comments[0].startswith("Blue or green? (asked by the agent)")
    logged = operator.events()
    assert [e["hooks"] for e in logged if e["event"] == "hooks.loaded"] == [["polish"]]
    decided = [e for e in logged if e["event"] == "hooks.decided"]
    assert [(e["point"], e["hook"], e["changed"]) for e in decided] == [
        ("waiting_for_input", "hooks:polish", ["question"])
    ]


def test_l3_a_daemon_loads_the_declaration_at_start(loop_env: LoopEnv) -> None:
    loop_env.env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS_CORE), str(FIXTURES), os.environ.get("PYTHONPATH")])),
        THE_LOOP_EXTRA_PLUGINS="plugins_for_tests.loop_test_plugin",
    )
    loop_env.write_config(
        "polling: {enabled: true, intervalSeconds: 60, sources: [{provider: fake}]}\n"
        f"hooks: [{{name: rec, module: hook_recorder, with: {{log: {loop_env.tmp / 'x.jsonl'}}}}}, "
        "{name: unused, module: nowhere, enabled: false}]\n"
    )
    result = loop_env.run("daemon", "run", "poller", "--once")
    assert result.returncode == 0, result.stderr
    (loaded,) = [e for e in loop_env.events() if e["event"] == "hooks.loaded"]
    assert (loaded["hooks"], loaded["count"], loaded["config"]) == (["rec"], 1, str(loop_env.config_path))
    assert loaded["source"] == "poller"


# ----------------------------------------------------------------------------------------------------- docs


def test_the_lifecycle_reference_table_matches_the_context_types() -> None:
    text = (ROOT / "docs" / "plugins" / "lifecycle.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4:
            rows[cells[0].strip("`")] = cells
    assert list(rows) == list(lifecycle.POINTS)
    for point, cls in CONTEXTS.items():
        context, facts, decisions = rows[point][1:4]
        assert context == f"`{cls.__name__}`", point
        assert re.findall(r"`([a-z_]+)`", facts) == list(cls.fact_names()), point
        documented = dict(re.findall(r"`([a-z_]+)` \(`([^`]*)`\)", decisions))
        expected = {name: json.dumps(value) for name, value in cls.decision_defaults().items()}
        assert documented == expected, point


def test_the_points_the_hookspecs_declare_are_the_points_the_runner_knows() -> None:
    from the_loop import hookspecs

    declared = [name for name in vars(hookspecs.LifecycleSpecs) if name.startswith("loop_")]
    assert declared == [f"loop_{point}" for point in lifecycle.POINTS]
    assert set(CONTEXTS) == set(lifecycle.POINTS)
    assert isinstance(WorkItemComplete().to_params()["work_item"], dict)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_the_worked_example_of_each_executor_kind_runs_as_documented(
    world: World, plugin_host: Any, serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/plugins/lifecycle.md: the module, path and url examples (and the plugin one) are run as written."""
    import importlib.util

    text = (ROOT / "docs" / "plugins" / "lifecycle.md").read_text(encoding="utf-8")
    module_code, path_code, sidecar_code, plugin_code = _blocks(text, "python")
    module_yaml, path_yaml, url_yaml = (yaml.safe_load(block)["hooks"] for block in _blocks(text, "yaml"))

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "roster_hooks.py").write_text(module_code)
    monkeypatch.syspath_prepend(str(modules))
    world.configure(hooks=module_yaml)
    assert lifecycle.run(ctx_for(world.config, "work_item_start", actor="alice"), world.config).proceed is True
    refused = lifecycle.run(ctx_for(world.config, "work_item_start", actor="mallory"), world.config)
    assert (refused.proceed, refused.reason) == (False, "mallory is not on the roster")

    rules = world.config.ref.path.parent / "hooks" / "house_rules.py"  # `path` is beside the config file
    rules.parent.mkdir()
    rules.write_text(path_code)
    world.configure(hooks=path_yaml)
    prompt = lifecycle.run(ctx_for(world.config, "session_spawn", prompt="boot"), world.config).prompt
    assert prompt.startswith("House rules: ") and prompt.endswith("\n\nboot")

    sidecar = tmp_path / "roster_sidecar.py"
    sidecar.write_text(sidecar_code)
    spec = importlib.util.spec_from_file_location("roster_sidecar", sidecar)
    assert spec is not None and spec.loader is not None
    side = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(side)  # not as __main__: the example's own server does not start
    monkeypatch.setenv("ROSTER_TOKEN", "sidecar-token")
    server = serve(side.Roster(), token_env="ROSTER_TOKEN")
    (entry,) = url_yaml
    world.configure(hooks=[{**entry, "url": server.url}])
    refused = lifecycle.run(ctx_for(world.config, "work_item_start", actor="carol"), world.config)
    assert (refused.proceed, refused.reason) == (False, "not on roster")
    assert lifecycle.run(ctx_for(world.config, "work_item_start", actor="bob"), world.config).proceed is True

    (params_example,) = [b for b in _blocks(text, "json") if '"method": "session_spawn"' in b]
    params = json.loads(params_example)["params"]
    assert list(params) == [*SessionSpawn.fact_names(), *SessionSpawn.decision_defaults()]

    plugin = types.ModuleType("doc_plugin")
    exec(compile(plugin_code, "lifecycle.md (plugin example)", "exec"), plugin.__dict__)
    plugin_host.register(plugin, "doc-plugin")
    private = CONTEXTS["session_spawned"](work_item=work_item_facts("fake:octo/private-x#1", world.config))
    assert lifecycle.run(private, world.config).announce is False
    assert lifecycle.run(ctx_for(world.config, "session_spawned"), world.config).announce is True
