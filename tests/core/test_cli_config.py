"""CLI parsing and config loading (F1-F13), env.file, and the config commands: validate, show, init, migrate-config.

Every test runs the real CLI in a subprocess against a throw-away HOME, a config under ``$T/cfg/.the-loop`` and a
cwd elsewhere (the ``loop_env`` fixture).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.config import ConfigError, load_config
from the_loop.plugins import get_host
from the_loop.testing import LoopEnv, write_plugin_dist

CURRENT = 'version: "0.12.0"\n'
RETIRED = """\
# operator's note: keep this comment
version: "0.12.0"
polling:
  stateFile: x.json  # the old shared ledger
  intervalSeconds: 30
routing:
  # who may steer
  authorizedUsers: [dana]
"""


def tree(*roots: Path) -> set[Path]:
    return {path for root in roots if root.exists() for path in root.rglob("*")}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def show_json(loop_env: LoopEnv, *args: str, **env: str) -> dict:
    result = loop_env.run(*args, "config", "show", "--format", "json", config=False, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def status_json(loop_env: LoopEnv, *args: str, **env: str) -> dict:
    result = loop_env.run(*args, "status", "--format", "json", config=False, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def status_config_line(loop_env: LoopEnv, *args: str, **env: str) -> str:
    """The path on ``status``'s provenance line ``config <path>``."""
    result = loop_env.run(*args, "status", config=False, **env)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.split()[:1] == ["config"]]
    return line.split(None, 1)[1]


# ------------------------------------------------------------------------------------------------ parsing


def test_f1_help_lists_commands_and_creates_nothing(loop_env: LoopEnv) -> None:
    loop_env.write_config(CURRENT)
    before = tree(loop_env.home, loop_env.cwd, loop_env.tmp / "cfg")

    result = loop_env.run("--help")

    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.split("Commands:")[1].splitlines() if line.startswith("  ")}
    assert {"start", "stop", "status", "restart", "sessions", "events", "migrate-config"} <= listed
    assert {"config", "init", "plugins"} <= listed
    assert tree(loop_env.home, loop_env.cwd, loop_env.tmp / "cfg") == before


def test_f2_no_arguments_prints_usage_on_stderr_and_exits_2(loop_env: LoopEnv) -> None:
    result = loop_env.run(config=False)

    assert result.returncode == 2
    assert "Usage:" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "content",
    ["polling: {stateFile: x.json}\n", "- a\n", "42\n", "version: [unclosed\n", 'version: "0.3.0"\n'],
    ids=["retired-f3", "list", "scalar", "syntax", "too-old"],
)
def test_f3_help_and_version_never_read_the_config(loop_env: LoopEnv, content: str) -> None:
    loop_env.write_config(content)
    for args in (
        ["--version"],
        ["--help"],
        ["events", "--help"],
        ["config", "validate", "--help"],
        ["migrate-config", "--help"],
        ["init", "--help"],
        ["plugins", "--help"],
    ):
        result = loop_env.run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "error" not in result.stderr
        assert "Traceback" not in result.stderr
    assert loop_env.run("--version").stdout.startswith("the-loop ")


# -------------------------------------------------------------------------------------------- resolution


def test_f4_config_resolution_order_flag_env_cwd_home(loop_env: LoopEnv) -> None:
    places = {
        "flag": loop_env.tmp / "flag" / "c.yaml",
        "env": loop_env.tmp / "env" / "c.yaml",
        "cwd": loop_env.cwd / ".the-loop" / "cli-config.yaml",
        "home": loop_env.home / ".the-loop" / "cli-config.yaml",
    }
    for name, path in places.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'version: "0.12.0"\nstate: {{root: /roots/{name}}}\n')

    def chosen(with_flag: bool, with_env: bool) -> tuple[str, str]:
        args = ("-c", str(places["flag"])) if with_flag else ()
        env = {"THE_LOOP_CLI_CONFIG": str(places["env"])} if with_env else {}
        path = status_config_line(loop_env, *args, **env)
        assert show_json(loop_env, *args, **env)["configPath"] == path  # config show agrees with status
        return path, status_json(loop_env, *args, **env)["stateRoot"]

    # Everything present: the flag beats the env, the env beats the cwd, the cwd beats the home.
    assert chosen(True, True) == (str(places["flag"]), "/roots/flag")
    assert chosen(False, True) == (str(places["env"]), "/roots/env")
    assert chosen(False, False) == (str(places["cwd"]), "/roots/cwd")
    places["cwd"].unlink()
    assert chosen(False, False) == (str(places["home"]), "/roots/home")
    # Only one present: that one, each time.
    places["home"].unlink()
    assert chosen(True, False) == (str(places["flag"]), "/roots/flag")
    assert chosen(False, True) == (str(places["env"]), "/roots/env")


def test_f4_env_config_is_taken_even_when_missing(loop_env: LoopEnv) -> None:
    home_config = loop_env.home / ".the-loop" / "cli-config.yaml"
    home_config.parent.mkdir()
    home_config.write_text(CURRENT)
    missing = loop_env.tmp / "nowhere" / "c.yaml"

    data = show_json(loop_env, THE_LOOP_CLI_CONFIG=str(missing))

    assert data["configPath"] == str(missing)
    assert data["configExists"] is False
    assert data["stateRoot"] == str(loop_env.tmp / "nowhere" / ".the-loop")


def test_f5_state_root_is_anchored_on_the_config_file(loop_env: LoopEnv) -> None:
    loop_env.write_config(CURRENT)
    assert status_json(loop_env, "-c", str(loop_env.config_path))["stateRoot"] == str(loop_env.root)

    other = loop_env.tmp / "x" / "c.yaml"
    other.parent.mkdir()
    for root, expected in (
        ("st", loop_env.tmp / "x" / "st"),
        ("~/tl", loop_env.home / "tl"),
        ("/abs/where", Path("/abs/where")),
    ):
        other.write_text(f'version: "0.12.0"\nstate: {{root: "{root}"}}\n')
        assert status_json(loop_env, "-c", str(other))["stateRoot"] == str(expected)
        data = show_json(loop_env, "-c", str(other))
        assert data["stateRoot"] == str(expected)
        assert data["config"]["state"]["root"] == str(expected)  # show prints the root resolved


@pytest.mark.parametrize("command", [["status"], ["config", "show"]])
def test_f6_non_string_state_root_warns_once_and_uses_the_default(loop_env: LoopEnv, command: list[str]) -> None:
    loop_env.write_config(CURRENT)
    unaffected = loop_env.run(*command, "--format", "json").returncode
    loop_env.write_config('version: "0.12.0"\nstate: {root: [a]}\n')

    result = loop_env.run(*command, "--format", "json")

    assert result.returncode == unaffected == 0
    assert len(warning_lines(result.stderr)) == 1
    assert "state.root" in result.stderr
    assert json.loads(result.stdout)["stateRoot"] == str(loop_env.root)


# ----------------------------------------------------------------------------------------- broken files


@pytest.mark.parametrize("command", [["status"], ["config", "validate"], ["config", "show"], ["events"]])
def test_f7_yaml_syntax_error_names_file_and_line(loop_env: LoopEnv, command: list[str]) -> None:
    loop_env.write_config('version: "0.12.0"\nrouting:\n  enabled: [true\n  other: 1\n')

    result = loop_env.run(*command)

    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1
    assert str(loop_env.config_path) in result.stderr
    assert "line " in error_lines(result.stderr)[0]
    assert "Traceback" not in result.stderr
    assert warning_lines(result.stderr) == []


@pytest.mark.parametrize("command", [["status"], ["config", "validate"]])
@pytest.mark.parametrize("document", ["- a\n", "42\n"])
def test_f8_non_mapping_document_exits_2_naming_the_file(loop_env: LoopEnv, document: str, command: list[str]) -> None:
    loop_env.write_config(document)

    result = loop_env.run(*command)

    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1
    assert str(loop_env.config_path) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["start"],
        ["sessions", "list"],
        ["config", "validate"],
        ["config", "show"],
        ["events"],
        ["hello", "x"],
    ],
)
def test_f9_retired_key_is_refused_naming_the_remedy(loop_env: LoopEnv, command: list[str]) -> None:
    loop_env.write_config(RETIRED)
    before = tree(loop_env.root)

    result = loop_env.run(*command)

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert "polling.stateFile" in line
    assert "state.root" in line
    assert "the-loop migrate-config" in line
    assert tree(loop_env.root) == before  # nothing created under the state root


# -------------------------------------------------------------------------------------------- migrating


def test_f10_migrate_config_dry_run_then_real_run_then_idempotent(loop_env: LoopEnv) -> None:
    loop_env.write_config(RETIRED)
    original = loop_env.config_path.read_bytes()

    dry = loop_env.run("migrate-config", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "polling.stateFile" in dry.stdout
    assert "version → 0.12.0" in dry.stdout
    assert "intervalSeconds: 30" in dry.stdout  # the YAML preview
    assert loop_env.config_path.read_bytes() == original
    assert not loop_env.config_path.with_name("cli-config.yaml.bak").exists()

    real = loop_env.run("migrate-config")
    assert real.returncode == 0, real.stderr
    assert loop_env.config_path.with_name("cli-config.yaml.bak").read_bytes() == original
    migrated = loop_env.config_path.read_text()
    assert "stateFile" not in migrated
    assert "# operator's note: keep this comment" in migrated
    assert "# who may steer" in migrated
    assert migrated.index("polling:") < migrated.index("routing:")  # key order kept
    assert loop_env.run("status").returncode == 0
    assert loop_env.run("config", "validate").returncode == 0
    [event] = [e for e in loop_env.events() if e["event"] == "config.migrated"]
    assert event["keys"] == ["polling.stateFile"]

    again = loop_env.run("migrate-config")
    assert again.returncode == 0
    assert again.stdout.strip() == "config is already current; nothing to migrate"
    assert loop_env.config_path.read_text() == migrated


def test_f10_migrate_config_writes_atomically_and_keeps_the_mode(loop_env: LoopEnv) -> None:
    loop_env.write_config("routing:\n  autoExecuteLabel: go\n")
    loop_env.config_path.chmod(0o640)

    result = loop_env.run("migrate-config")

    assert result.returncode == 0, result.stderr
    assert "routing.autoExecuteLabel → routing.autoExecuteLabels" in result.stdout
    text = loop_env.config_path.read_text()
    assert text.startswith('version: "0.12.0"\n')  # a version the file never had goes first
    assert stat.S_IMODE(loop_env.config_path.stat().st_mode) == 0o640
    assert not [p for p in loop_env.config_path.parent.iterdir() if p.name.endswith(".tmp")]


def test_migrate_config_too_old_version_is_rewritten(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.3.0"\nrouting: {enabled: false}\n')

    result = loop_env.run("migrate-config", "--dry-run")

    assert result.returncode == 0
    assert "version 0.3.0 → 0.12.0" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("a: b: c\n", "line 1"), ("- a\n", "mapping")],
    ids=["missing", "unparseable", "not-a-mapping"],
)
def test_migrate_config_refuses_missing_or_unparseable_files(
    loop_env: LoopEnv, content: str | None, message: str
) -> None:
    if content is not None:
        loop_env.write_config(content)

    result = loop_env.run("migrate-config")

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert message in line
    assert str(loop_env.config_path) in line
    assert "Traceback" not in result.stderr


def test_migrate_config_path_works_while_the_chosen_config_is_broken(loop_env: LoopEnv) -> None:
    loop_env.write_config("- not a mapping\n")
    other = loop_env.tmp / "other.yaml"
    other.write_text("integrations:\n  slack: {channel: C1}\n")

    result = loop_env.run("migrate-config", "--path", str(other))

    assert result.returncode == 0, result.stderr
    assert "integrations.slack → channels.slack" in result.stdout
    assert yaml.safe_load(other.read_text())["channels"] == {"slack": {"channel": "C1"}}


# ------------------------------------------------------------------------------------------ warnings


@pytest.mark.parametrize("command", [["status"], ["config", "show"]])
def test_f11_routing_runner_warns_once_and_is_ignored(loop_env: LoopEnv, command: list[str]) -> None:
    loop_env.write_config('version: "0.12.0"\nrouting: {runner: process}\n')

    result = loop_env.run(*command)

    assert result.returncode == 0
    assert len([line for line in warning_lines(result.stderr) if "routing.runner" in line]) == 1


def test_f12_unknown_keys_warn_once_per_path_and_validate_exits_1(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nbogusTop: 1\nrouting: {bogus: 2}\n')

    for command in (["status"], ["config", "show"]):
        shown = loop_env.run(*command)
        assert shown.returncode == 0
        warnings = warning_lines(shown.stderr)
        assert len([w for w in warnings if w.endswith("unknown key bogusTop")]) == 1
        assert len([w for w in warnings if w.endswith("unknown key routing.bogus")]) == 1

    checked = loop_env.run("config", "validate")
    assert checked.returncode == 1
    assert "unknown key: bogusTop" in checked.stdout
    assert "unknown key: routing.bogus" in checked.stdout

    as_json = json.loads(loop_env.run("config", "validate", "--format", "json").stdout)
    assert as_json["ok"] is False
    assert as_json["unknownKeys"] == ["bogusTop", "routing.bogus"]
    assert as_json["problems"] == []


@pytest.mark.parametrize("command", [["status"], ["config", "validate"]])
def test_f13_too_old_version_is_refused(loop_env: LoopEnv, command: list[str]) -> None:
    loop_env.write_config('version: "0.3.0"\n')

    result = loop_env.run(*command)

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert "0.3.0" in line
    assert "0.12.0" in line


def test_f13_newer_version_warns(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "99.0.0"\n')

    status = loop_env.run("status")
    assert status.returncode == 0
    assert any("99.0.0" in w and "newer" in w for w in warning_lines(status.stderr))
    result = loop_env.run("config", "validate", "--format", "json")

    assert result.returncode == 0
    [warning] = [w for w in json.loads(result.stdout)["warnings"] if "99.0.0" in w]
    assert "newer than 0.12.0" in warning


# ------------------------------------------------------------------------------------------- env.file


def test_env_file_loads_without_overriding_set_variables(loop_env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = loop_env.config_path.parent / "secrets.env"
    secrets.write_text("export TL_TEST_NEW=\"a\\tb\"\nTL_TEST_SET=from-file\n# comment\nTL_TEST_SINGLE='$x'\n")
    secrets.chmod(0o600)
    loop_env.write_config('version: "0.12.0"\nenv: {file: secrets.env}\n')
    monkeypatch.delenv("TL_TEST_NEW", raising=False)
    monkeypatch.delenv("TL_TEST_SINGLE", raising=False)
    monkeypatch.setenv("TL_TEST_SET", "from-shell")

    load_config(loop_env.config_path, get_host())

    assert os.environ["TL_TEST_NEW"] == "a\tb"
    assert os.environ["TL_TEST_SINGLE"] == "$x"
    assert os.environ["TL_TEST_SET"] == "from-shell"


def test_env_file_readable_by_others_is_refused(loop_env: LoopEnv) -> None:
    secrets = loop_env.config_path.parent / "secrets.env"
    secrets.write_text("TL_TEST_TOKEN=hunter2\n")
    secrets.chmod(0o644)
    loop_env.write_config('version: "0.12.0"\nenv: {file: secrets.env}\n')

    result = loop_env.run("config", "validate")

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert "env.file" in line
    assert str(secrets) in line
    assert "hunter2" not in result.stderr + result.stdout


def test_env_file_bad_line_is_reported_by_number_never_by_content(loop_env: LoopEnv) -> None:
    secrets = loop_env.config_path.parent / "secrets.env"
    secrets.write_text("TL_TEST_OK=1\nthis line leaks s3cr3t-value\n")
    secrets.chmod(0o600)
    loop_env.write_config('version: "0.12.0"\nenv: {file: secrets.env}\n')

    result = loop_env.run("config", "validate")

    assert result.returncode == 0, result.stderr
    assert any("line 2" in w for w in warning_lines(result.stderr))
    assert "s3cr3t" not in result.stderr + result.stdout


def test_missing_env_file_is_a_config_error(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nenv: {file: nope.env}\n')
    with pytest.raises(ConfigError, match=r"env\.file: .*nope\.env does not exist"):
        load_config(loop_env.config_path, get_host())


# ----------------------------------------------------------------------------------------- validate


def test_validate_ok_prints_the_path(loop_env: LoopEnv) -> None:
    loop_env.write_config(CURRENT)

    result = loop_env.run("config", "validate")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"config OK: {loop_env.config_path}"


def test_validate_reports_the_first_invalid_value_by_key(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nwebhooks: {ghWebhook: {port: 99999}}\n')

    result = loop_env.run("config", "validate", "--format", "json")

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: {loop_env.config_path}: webhooks.ghWebhook.port: ")  # the file, then the key
    status = loop_env.run("status")
    assert status.returncode == 2
    assert error_lines(status.stderr) == [line]
    assert "Traceback" not in status.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert "webhooks.ghWebhook.port" in document["problems"][0]


HARNESS_PLUGIN = """
from the_loop import hookimpl
from the_loop.interfaces import Capabilities, HarnessAdapter


class Tmuxy(HarnessAdapter):
    name = "tmuxy"
    capabilities = Capabilities(tmux_hostable=True, preassigned_session_id=True, can_resume=True)

    def fresh_argv(self, launch):
        return ["tmuxy"]

    def resume_argv(self, launch):
        return ["tmuxy", "--resume"]


class Headless(Tmuxy):
    name = "headless"
    capabilities = Capabilities(tmux_hostable=False, preassigned_session_id=False, can_resume=False)


@hookimpl
def loop_register_harnesses():
    return [Tmuxy, Headless]
"""


@pytest.mark.parametrize(
    ("harness", "reason"),
    [("nosuch", "is not an installed harness adapter"), ("headless", "cannot be hosted in tmux")],
)
@pytest.mark.parametrize(
    "enabler",
    [
        "routing: {enabled: true, ",
        "webhooks: {ghWebhook: {enabled: true, allowUnsigned: true}}\nrouting: {enabled: true, ",
    ],
    ids=["routing", "routing-with-receiver"],
)
def test_validate_refuses_a_default_harness_that_cannot_route(
    loop_env: LoopEnv, harness: str, reason: str, enabler: str
) -> None:
    site = write_plugin_dist(loop_env.tmp / "site", "fakeharness", HARNESS_PLUGIN)
    loop_env.write_config(f'version: "0.12.0"\n{enabler}defaultHarness: {harness}}}\n')

    result = loop_env.run("config", "validate", PYTHONPATH=str(site))

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert f"routing.defaultHarness: {harness!r}" in line
    assert reason in line


def test_validate_accepts_an_installed_tmux_hostable_harness(loop_env: LoopEnv) -> None:
    site = write_plugin_dist(loop_env.tmp / "site", "fakeharness", HARNESS_PLUGIN)
    loop_env.write_config('version: "0.12.0"\nrouting: {enabled: true, defaultHarness: tmuxy}\n')

    result = loop_env.run("config", "validate", PYTHONPATH=str(site))

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config OK:")


def test_validate_only_warns_about_the_harness_when_nothing_routes(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nrouting: {defaultHarness: nosuch}\n')

    result = loop_env.run("config", "validate")

    assert result.returncode == 0
    assert any("'nosuch'" in w for w in warning_lines(result.stderr))
    assert error_lines(result.stderr) == []


# --------------------------------------------------------------------------------------------- show


def test_show_fills_defaults_includes_plugin_sections_and_no_secret_values(loop_env: LoopEnv) -> None:
    secrets = loop_env.config_path.parent / "secrets.env"
    secrets.write_text("THE_LOOP_GH_WEBHOOK_SECRET=file-secret-value\n")
    secrets.chmod(0o600)
    loop_env.write_config('version: "0.12.0"\nenv: {file: secrets.env}\nhello: {greeting: hi}\n')

    as_json = loop_env.run("config", "show", "--format", "json", THE_LOOP_SLACK_BOT_TOKEN="xoxb-shell-value")
    as_yaml = loop_env.run("config", "show", THE_LOOP_SLACK_BOT_TOKEN="xoxb-shell-value")

    assert as_json.returncode == 0, as_json.stderr
    config = json.loads(as_json.stdout)["config"]
    assert config["webhooks"]["ghWebhook"]["port"] == 8787
    assert config["webhooks"]["ghWebhook"]["secretEnv"] == "THE_LOOP_GH_WEBHOOK_SECRET"
    assert config["routing"]["tmux"]["keepSessionOnClose"] is True
    assert config["hello"] == {"greeting": "hi", "times": 1}
    assert config["channels"]["slack"]["botTokenEnv"] == "THE_LOOP_SLACK_BOT_TOKEN"
    assert as_yaml.returncode == 0
    assert "secretEnv: THE_LOOP_GH_WEBHOOK_SECRET" in as_yaml.stdout
    assert f"# state root: {loop_env.root}" in as_yaml.stdout
    for output in (as_json.stdout + as_json.stderr, as_yaml.stdout + as_yaml.stderr):
        assert "file-secret-value" not in output
        assert "xoxb-shell-value" not in output


# --------------------------------------------------------------------------------------------- init


def test_init_writes_a_starter_that_validates(loop_env: LoopEnv) -> None:
    result = loop_env.run("init")

    assert result.returncode == 0, result.stderr
    text = loop_env.config_path.read_text()
    assert text.count("\n# ") > 10  # the main keys, commented with their defaults
    assert "secretEnv: THE_LOOP_GH_WEBHOOK_SECRET" in text
    assert "env.file" in text
    assert stat.S_IMODE(loop_env.config_path.stat().st_mode) == 0o644
    checked = loop_env.run("config", "validate")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"config OK: {loop_env.config_path}"


def test_init_refuses_to_overwrite_without_force(loop_env: LoopEnv) -> None:
    loop_env.write_config("- broken\n")

    refused = loop_env.run("init")
    assert refused.returncode == 2
    assert error_lines(refused.stderr) and "--force" in refused.stderr
    assert loop_env.config_path.read_text() == "- broken\n"

    forced = loop_env.run("init", "--force")
    assert forced.returncode == 0, forced.stderr
    assert loop_env.run("config", "validate").returncode == 0


def test_init_path_writes_where_asked(loop_env: LoopEnv) -> None:
    target = loop_env.tmp / "new" / "my.yaml"

    result = loop_env.run("init", "--path", str(target), config=False)

    assert result.returncode == 0, result.stderr
    assert target.is_file()
    assert not (loop_env.home / ".the-loop").exists()
    assert loop_env.run("-c", str(target), "config", "validate", config=False).returncode == 0


def test_init_asks_in_the_interactive_form_and_writes_the_starter_when_every_answer_is_empty(
    loop_env: LoopEnv,
) -> None:
    result = loop_env.run("init", "--interactive", input="\n\n\n\n")
    assert result.returncode == 0, result.stderr
    assert "GitHub repository to watch, as OWNER/REPO (empty: skip)" in result.stdout
    assert "# polling:" in loop_env.config_path.read_text()  # the commented starter


def test_init_merges_each_plugins_part_into_cores() -> None:
    from the_loop.cli.init import merged

    base = {"version": "0.12.0", "routing": {"enabled": True, "authorizedUsers": ["octocat"]}}
    part = {"routing": {"authorizedUsers": ["octocat", {"jira": "acc-1"}]}, "polling": {"enabled": True}}
    assert merged(base, part) == {
        "version": "0.12.0",
        "routing": {"enabled": True, "authorizedUsers": ["octocat", {"jira": "acc-1"}]},
        "polling": {"enabled": True},
    }
    assert base["routing"]["authorizedUsers"] == ["octocat"]  # neither side is changed


# --------------------------------------------------------------------------------------------- regressions


def test_issue_97_the_yaml_parser_is_required_and_its_absence_is_never_silent(loop_env: LoopEnv) -> None:
    """Upstream read a config as empty, silently, when no YAML parser was installed. Here PyYAML is a hard
    dependency of core, and were it missing anyway a config-reading command fails loudly instead of running on
    defaults."""
    import tomllib

    core = tomllib.loads((Path(__file__).parents[2] / "core" / "pyproject.toml").read_text())["project"]
    assert any(req.lower().startswith("pyyaml") for req in core["dependencies"])

    loop_env.write_config('version: "0.12.0"\npolling: {enabled: true, sources: [{provider: fake}]}\n')
    no_yaml = loop_env.tmp / "no-yaml"
    no_yaml.mkdir()
    (no_yaml / "yaml.py").write_text("raise ModuleNotFoundError(\"No module named 'yaml'\", name='yaml')\n")

    result = loop_env.run("status", PYTHONPATH=str(no_yaml))

    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert "yaml" in line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # never a status computed from an empty config


def test_a_poll_source_no_installed_plugin_provides_is_refused_by_name(loop_env: LoopEnv) -> None:
    """Decision 8: provider names are checked against what is installed, never against a closed list."""
    loop_env.write_config('version: "0.12.0"\npolling: {enabled: true, sources: [{provider: nosuch}]}\n')

    validated = loop_env.run("config", "validate")
    assert validated.returncode == 2
    [line] = error_lines(validated.stderr)
    assert "polling.sources[0].provider: 'nosuch'" in line

    started = loop_env.run("start")
    assert started.returncode == 1
    assert "poller      misconfigured" in started.stdout.splitlines()
    assert "polling.sources[0].provider: 'nosuch'" in started.stdout
    assert not (loop_env.root / "poll.pid").exists()

    status = loop_env.run("status")
    assert status.returncode == 1
    assert "problem:    polling.sources[0].provider: 'nosuch'" in status.stdout


@pytest.mark.parametrize("args", [["--bogus"], ["status", "--bogus"], ["nosuchcommand"]])
def test_an_unknown_option_or_command_prints_usage_on_stderr_and_exits_2(loop_env: LoopEnv, args: list[str]) -> None:
    """F §1.4 R2."""
    loop_env.write_config(CURRENT)

    result = loop_env.run(*args)

    assert result.returncode == 2
    assert "Usage:" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


JIRA = "site: jira.test, deployment: cloud, projects: {PROJ: {repository: octo/repo}}"
RETIRED_KEYS = {
    "routing.control.ghBinary": ("routing: {control: {ghBinary: gh}}\n", "routing.control.ghBinary"),
    "routing.reactions.ghBinary": ("routing: {reactions: {ghBinary: gh}}\n", "routing.reactions.ghBinary"),
    "routing.announce.ghBinary": ("routing: {announce: {ghBinary: gh}}\n", "routing.announce.ghBinary"),
    "webhooks.ghWebhook.routing": (
        "webhooks: {ghWebhook: {routing: {spawnOnUnmatched: labeled, control: {ghBinary: gh}}}}\n",
        "webhooks.ghWebhook.routing",
    ),
    "polling.stateFile": ("polling: {stateFile: x.json}\n", "polling.stateFile"),
    "integrations.slack": ("integrations: {slack: {channel: C1}}\n", "integrations.slack"),
    "collaborators": ("collaborators: [dana]\n", "collaborators"),
    "notifications": ("notifications: {slack: true}\n", "notifications"),
    "channels.slack.events": ("channels: {slack: {events: [session.awaiting_input]}}\n", "channels.slack.events"),
    "channels.slack.authorizedUsers": (
        "channels: {slack: {authorizedUsers: [U0DANA]}}\n",
        "channels.slack.authorizedUsers",
    ),
    "polling.sources.repos": (
        "polling: {sources: [{provider: github, repos: [octo/repo]}]}\n",
        "polling.sources[0].repos",
    ),
    "polling.sources.label": (
        "polling: {sources: [{provider: github, label: go}]}\n",
        "polling.sources[0].label",
    ),
    "routing.autoExecuteLabel": ("routing: {autoExecuteLabel: go}\n", "routing.autoExecuteLabel"),
    "integrations.github.transport": ("integrations: {github: {transport: cli}}\n", "integrations.github.transport"),
    "integrations.github.cli": ("integrations: {github: {cli: {binary: gh}}}\n", "integrations.github.cli"),
    "integrations.jira.api.tokenEnv": (
        f"integrations: {{jira: {{{JIRA}, api: {{emailEnv: [E], tokenEnv: T}}}}}}\n",
        "integrations.jira.api.tokenEnv",
    ),
    "integrations.jira.api.baseUrl": (
        f"integrations: {{jira: {{{JIRA}, api: {{emailEnv: [E], tokenEnv: [T], baseUrl: 'https://j.test'}}}}}}\n",
        "integrations.jira.api.baseUrl",
    ),
}


@pytest.mark.parametrize(("body", "key"), list(RETIRED_KEYS.values()), ids=list(RETIRED_KEYS))
def test_every_retired_key_is_refused_then_migrated_in_one_run(loop_env: LoopEnv, body: str, key: str) -> None:
    """F §2.3's table: each retired key is refused naming it and the remedy; one `migrate-config` run leaves a
    config that loads, and a second run has nothing to do."""
    loop_env.write_config(CURRENT + body)

    refused = loop_env.run("status")
    assert refused.returncode == 2
    [line] = error_lines(refused.stderr)
    assert key in line and "the-loop migrate-config" in line

    migrated = loop_env.run("migrate-config")
    assert migrated.returncode == 0, migrated.stderr
    assert key in migrated.stdout
    validated = loop_env.run("config", "validate")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    again = loop_env.run("migrate-config")
    assert again.stdout.strip() == "config is already current; nothing to migrate"


def test_migrate_config_moves_values_to_their_new_homes(loop_env: LoopEnv) -> None:
    loop_env.write_config(
        CURRENT
        + "webhooks: {ghWebhook: {port: 9000, routing: {spawnOnUnmatched: labeled, control: {ghBinary: gh}}}}\n"
        + "channels: {slack: {events: [session.awaiting_input], authorizedUsers: [U0DANA]}}\n"
        + "polling: {sources: [{provider: github, repos: [octo/repo], label: go}]}\n"
    )

    assert loop_env.run("migrate-config").returncode == 0

    migrated = yaml.safe_load(loop_env.config_path.read_text())
    assert migrated["webhooks"] == {"ghWebhook": {"port": 9000}}
    assert migrated["routing"] == {
        "spawnOnUnmatched": "labeled",
        "control": {},
        "authorizedUsers": [{"slack": "U0DANA"}],
    }
    assert migrated["channels"]["slack"] == {"subscribe": ["session.awaiting_input"]}
    assert migrated["repositories"] == ["octo/repo"]
    assert migrated["polling"]["sources"] == [{"provider": "github", "labels": ["go"]}]


@pytest.mark.parametrize(
    ("fleet", "key"),
    [
        ({"fleet": {"nats": {"servers": ["nats://127.0.0.1:4222"]}}}, "instance.name"),
        ({"instance": {"name": "w1", "role": "worker"}}, "instance.role"),
        ({"instance": {"name": "w1"}, "fleet": {"nats": {"servers": ["http://x:1"]}}}, "fleet.nats.servers"),
        ({"instance": {"name": "a b"}}, "instance.name"),
        ({"fleet": {"leaseSeconds": 1}}, "fleet.leaseSeconds"),
        ({"instance": {"scope": {"mode": "closed"}}}, "instance.scope.mode"),
    ],
    ids=["no-name", "role-without-fleet", "not-a-nats-url", "bad-name", "short-lease", "bad-scope"],
)
def test_issue_22_a_bad_fleet_config_is_one_error_line_naming_the_key(
    loop_env: LoopEnv, fleet: dict[str, Any], key: str
) -> None:
    loop_env.write_config({"version": "0.12.0", **fleet})

    result = loop_env.run("config", "validate")

    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and key in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_issue_22_a_credential_variable_named_but_not_set_stops_the_worker(loop_env: LoopEnv) -> None:
    loop_env.write_config(
        {
            "version": "0.12.0",
            "routing": {"enabled": False},
            "instance": {"name": "w1", "role": "worker"},
            "fleet": {"nats": {"servers": ["nats://127.0.0.1:1"], "tokenEnv": "THE_LOOP_TEST_NATS_TOKEN"}},
        }
    )

    validate = loop_env.run("config", "validate")
    run = loop_env.run("daemon", "run", "fleet-worker")

    assert (
        validate.returncode == 2
        and "fleet.nats.tokenEnv: THE_LOOP_TEST_NATS_TOKEN is not set" in validate.stdout + validate.stderr
    )
    assert run.returncode == 1 and "THE_LOOP_TEST_NATS_TOKEN is not set" in run.stderr
