"""``the-loop plugins`` and third-party plugins seen through the real CLI.

``the-loop-hello`` (examples/) is installed editable in the dev environment; a plugin that fails to import is made
on the fly as a module plus a ``.dist-info`` directory put on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from the_loop.testing import LoopEnv, write_plugin_dist

BROKEN = """
raise RuntimeError("this plugin is broken on purpose")
"""


def plugins_json(loop_env: LoopEnv, **env: str) -> dict[str, dict[str, Any]]:
    result = loop_env.run("plugins", "--format", "json", **env)
    assert result.returncode == 0, result.stderr
    return {plugin["name"]: plugin for plugin in json.loads(result.stdout)}


def commands_in_help(loop_env: LoopEnv, **env: str) -> set[str]:
    result = loop_env.run("--help", **env)
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("Commands:")[1]
    return {line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()}


@pytest.fixture
def configured(loop_env: LoopEnv) -> LoopEnv:
    loop_env.write_config('version: "0.12.0"\nhello: {greeting: Ahoy, times: 2}\n')
    return loop_env


def test_plugins_json_lists_hello_with_everything_it_contributes(configured: LoopEnv) -> None:
    found = plugins_json(configured)

    hello = found["hello"]
    assert hello["distribution"] == "the-loop-hello"
    assert hello["version"] == "0.1.0"
    assert hello["builtin"] is False
    assert hello["module"] == "the_loop_hello.plugin"
    assert hello["error"] is None
    assert hello["contributions"]["commands"] == ["hello"]
    assert hello["contributions"]["configSections"] == ["hello"]
    assert hello["contributions"]["eventTypes"] == ["hello.said"]
    core = found["core"]
    assert core["builtin"] is True
    assert core["distribution"] == "the-loop-core"
    assert {"gh-webhook", "poller"} <= set(core["contributions"]["services"])
    assert "config.migrated" in core["contributions"]["eventTypes"]
    assert {"github", "jira", "slack", "claude", "cursor"} <= set(found)


def test_plugins_text_flags_builtins(configured: LoopEnv) -> None:
    result = configured.run("plugins")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("core  the-loop-core") and "[built-in]" in line for line in lines)
    hello_at = next(i for i, line in enumerate(lines) if line.startswith("hello  the-loop-hello 0.1.0"))
    assert "[built-in]" not in lines[hello_at]
    assert "  commands: hello" in lines[hello_at + 1 : hello_at + 5]


def test_plugins_skips_services_when_the_config_is_broken(loop_env: LoopEnv) -> None:
    loop_env.write_config("- not a mapping\n")

    result = loop_env.run("plugins", "--format", "json")

    assert result.returncode == 0
    assert "services and ingresses not listed" in result.stderr
    found = {plugin["name"]: plugin for plugin in json.loads(result.stdout)}
    assert found["core"]["contributions"]["services"] == []
    assert found["hello"]["contributions"]["commands"] == ["hello"]


def test_hello_command_is_in_help_and_uses_its_config_section(configured: LoopEnv) -> None:
    assert "hello" in commands_in_help(configured)

    result = configured.run("hello", "x")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Ahoy, x", "Ahoy, x"]
    [said] = [event for event in configured.events() if event["event"] == "hello.said"]
    assert said["source"] == "cli"
    assert said["name_length"] == 1


def test_hello_bad_section_value_names_the_key(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nhello: {times: 99}\n')

    for command in (["hello", "x"], ["config", "validate"]):
        result = loop_env.run(*command)
        assert result.returncode == 2
        [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert "hello.times" in line
        assert "Traceback" not in result.stderr


def test_hello_event_type_is_in_the_catalog(configured: LoopEnv) -> None:
    result = configured.run("events", "--types")

    assert result.returncode == 0
    assert any(line.split()[:1] == ["hello.said"] for line in result.stdout.splitlines())


def test_disabling_hello_removes_everything_it_contributes(configured: LoopEnv) -> None:
    disabled = {"THE_LOOP_DISABLE_PLUGINS": "hello"}

    assert "hello" not in plugins_json(configured, **disabled)
    assert "hello" not in commands_in_help(configured, **disabled)
    assert "hello.said" not in configured.run("events", "--types", **disabled).stdout
    shown = configured.run("config", "show", **disabled)
    assert "warning: config: unknown key hello" in shown.stderr  # nobody claims the section now
    assert configured.run("hello", "x", **disabled).returncode == 2


def test_a_plugin_that_fails_to_import_is_reported_and_breaks_nothing(configured: LoopEnv) -> None:
    site = write_plugin_dist(configured.tmp / "site", "broken", BROKEN)
    env = {"PYTHONPATH": str(site)}

    found = plugins_json(configured, **env)
    assert "RuntimeError: this plugin is broken on purpose" in found["broken"]["error"]
    assert found["broken"]["distribution"] == "broken-plugin"
    assert found["hello"]["error"] is None

    text = configured.run("plugins", **env)
    assert "error: RuntimeError: this plugin is broken on purpose" in text.stdout

    assert "hello" in commands_in_help(configured, **env)
    hello = configured.run("hello", "y", **env)
    assert hello.returncode == 0
    assert hello.stdout.splitlines() == ["Ahoy, y", "Ahoy, y"]
    assert "plugin broken" in hello.stderr  # reported, not hidden
    assert configured.run("config", "validate", **env).returncode == 0
    assert configured.run("events", "--types", **env).returncode == 0


CLASHING = """
from the_loop import hookimpl
from the_loop.interfaces import CommandSpec


@hookimpl
def loop_register_commands():
    return [
        CommandSpec("status", "A plugin's own status.", "clashing_plugin:nope"),
        CommandSpec("validate", "A plugin's own validate.", "clashing_plugin:nope", parent="config"),
    ]


def nope():
    raise SystemExit("the plugin's command ran instead of core's")
"""


def test_a_plugin_command_clashing_with_core_loses_with_a_warning_naming_both(configured: LoopEnv) -> None:
    """F §1.4 R13: on a name collision core wins, and the warning names the plugin's distribution and core's."""
    site = write_plugin_dist(configured.tmp / "site", "clashing", CLASHING)
    env = {"PYTHONPATH": str(site)}

    helped = configured.run("--help", **env)
    assert helped.returncode == 0, helped.stderr
    [status_row] = [line for line in helped.stdout.splitlines() if line.split()[:1] == ["status"]]
    assert "A plugin's own status." not in status_row
    warnings = [line for line in helped.stderr.splitlines() if line.startswith("warning:")]
    [warning] = [w for w in warnings if "'status'" in w]  # once, however often click lists the commands
    assert "clashing-plugin" in warning and "the-loop-core" in warning

    status = configured.run("status", **env)  # core's command runs, not the plugin's
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[1].split()[0] == "config"
    validated = configured.run("config", "validate", **env)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith("config OK:")
    group_help = configured.run("config", "--help", **env)
    assert "A plugin's own validate." not in group_help.stdout
    assert any("'validate'" in line and "the-loop-core" in line for line in group_help.stderr.splitlines())


RAISING = """
import click
from the_loop import hookimpl
from the_loop.interfaces import CommandSpec


@hookimpl
def loop_register_commands():
    return [CommandSpec("boom", "Fail unexpectedly.", "raising_plugin:boom")]


@click.command()
def boom():
    raise RuntimeError("kaboom")
"""


def test_an_unexpected_exception_is_one_error_line_and_exit_2_with_a_traceback_only_under_debug(
    configured: LoopEnv,
) -> None:
    """F §1.4 R3-R4: every command, core or plugin, uses 0/1/2; a bug is exit 2, its traceback shown on request."""
    site = write_plugin_dist(configured.tmp / "site", "raising", RAISING)

    plain = configured.run("boom", PYTHONPATH=str(site))
    assert plain.returncode == 2
    assert plain.stderr.strip() == "error: unexpected RuntimeError: kaboom"

    debug = configured.run("--debug", "boom", PYTHONPATH=str(site))
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().endswith("error: unexpected RuntimeError: kaboom")


_MODULES_AT_EXIT = """
import atexit, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
runpy.run_module("the_loop", run_name="__main__", alter_sys=True)
"""


def test_help_lists_a_plugin_command_without_importing_its_module(configured: LoopEnv) -> None:
    """F §1.4 R13: `--help` shows a plugin's command and its one-line help from the hook's CommandSpec alone; the
    command's module (and whatever it imports) loads only when the command runs."""
    import subprocess
    import sys

    modules = configured.tmp / "modules.txt"
    argv = [sys.executable, "-c", _MODULES_AT_EXIT, str(modules), "-c", str(configured.config_path)]

    helped = subprocess.run([*argv, "--help"], cwd=configured.cwd, env=configured.env, capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    assert any(line.split()[:2] == ["hello", "Greet"] for line in helped.stdout.splitlines())
    loaded = set(modules.read_text().split())
    assert "the_loop_hello.plugin" in loaded  # the hook declarations
    assert "the_loop_hello.cli" not in loaded

    ran = subprocess.run([*argv, "hello", "x"], cwd=configured.cwd, env=configured.env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert "the_loop_hello.cli" in set(modules.read_text().split())


def test_plugins_lists_the_ingresses_the_config_enables(loop_env: LoopEnv) -> None:
    """Providers include ingresses: each plugin's webhook routes and poll sources, as this config enables them."""
    loop_env.write_config('version: "0.12.0"\n')
    assert plugins_json(loop_env)["github"]["contributions"]["ingresses"] == []  # nothing enabled, nothing built

    loop_env.write_config(
        'version: "0.12.0"\nrepositories: [octo/repo]\nwebhooks: {ghWebhook: {enabled: true}}\n'
        "polling: {sources: [{provider: github}]}\n"
    )
    github = plugins_json(loop_env)["github"]
    assert github["contributions"]["ingresses"] == ["github (webhook /gh-webhook)", "github (poll source)"]
    assert github["contributions"]["ticketing"] == ["github"]
    text = loop_env.run("plugins").stdout
    assert "  ingresses: github (webhook /gh-webhook), github (poll source)" in text


# ------------------------------------------------------------------------------ the plugin command cache

GREETER = """
from the_loop import hookimpl
from the_loop.interfaces import CommandSpec


@hookimpl
def loop_register_commands():
    return [CommandSpec("greet", {help!r}, "greeter_plugin:greet")]
"""


def traced_help(loop_env: LoopEnv, **env: str) -> tuple[str, set[str]]:
    """``the-loop --help``'s output and every module loaded by its end."""
    import subprocess
    import sys

    modules = loop_env.tmp / "modules.txt"
    argv = [sys.executable, "-c", _MODULES_AT_EXIT, str(modules), "--help"]
    helped = subprocess.run(argv, cwd=loop_env.cwd, env={**loop_env.env, **env}, capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    return helped.stdout, set(modules.read_text().split())


def help_row(loop_env: LoopEnv, name: str, **env: str) -> str | None:
    result = loop_env.run("--help", **env)
    assert result.returncode == 0, result.stderr
    rows = [" ".join(line.split()[1:]) for line in result.stdout.splitlines() if line.split()[:1] == [name]]
    return rows[0] if rows else None


def test_a_second_help_lists_plugin_commands_from_the_cache_without_loading_any_plugin(configured: LoopEnv) -> None:
    first, loaded = traced_help(configured)
    assert {"pluggy", "the_loop.plugins", "the_loop_hello.plugin"} <= loaded  # nothing cached yet: the host is built
    assert list((configured.tmp / "cache").glob("commands-*.json"))

    second, loaded = traced_help(configured)
    assert second == first
    assert any(line.split()[:2] == ["hello", "Greet"] for line in second.splitlines())
    for module in ("pluggy", "importlib.metadata", "the_loop.plugins", "the_loop.interfaces", "the_loop_hello"):
        assert module not in loaded, module

    ran = configured.run("hello", "x")  # a cached plugin command runs, and builds the host it needs itself
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["Ahoy, x", "Ahoy, x"]


def test_the_cache_follows_an_install_an_edit_a_switch_and_an_uninstall(loop_env: LoopEnv) -> None:
    site = write_plugin_dist(loop_env.tmp / "site", "greeter", GREETER.format(help="Say hi."))
    env = {"PYTHONPATH": str(site)}
    assert help_row(loop_env, "greet") is None  # not installed: its folder is not on the path
    assert help_row(loop_env, "greet", **env) == "Say hi."
    assert help_row(loop_env, "greet", **env) == "Say hi."  # from the cache

    write_plugin_dist(site, "greeter", GREETER.format(help="Say hello to someone."))  # an editable plugin edited
    assert help_row(loop_env, "greet", **env) == "Say hello to someone."

    assert help_row(loop_env, "greet", THE_LOOP_DISABLE_PLUGINS="greeter", **env) is None
    assert help_row(loop_env, "greet", THE_LOOP_LOAD_PLUGINS="hello", **env) is None
    assert help_row(loop_env, "greet", **env) == "Say hello to someone."

    import shutil

    shutil.rmtree(next(site.glob("*.dist-info")))  # uninstalled
    assert help_row(loop_env, "greet", **env) is None


def test_a_broken_plugin_is_never_cached_so_its_warning_shows_on_every_run(configured: LoopEnv) -> None:
    site = write_plugin_dist(configured.tmp / "site", "broken", BROKEN)
    for _ in range(2):
        helped = configured.run("--help", PYTHONPATH=str(site))
        assert helped.returncode == 0, helped.stderr
        assert "plugin broken (broken-plugin) failed to load" in helped.stderr
        assert "hello" in helped.stdout
    assert not list((configured.tmp / "cache").glob("commands-*.json"))


def test_a_corrupt_cache_is_rebuilt_and_one_that_cannot_be_written_changes_nothing(configured: LoopEnv) -> None:
    assert help_row(configured, "hello") is not None
    [cache] = (configured.tmp / "cache").glob("commands-*.json")
    for garbage in ("{not json", '{"key": 1}', '{"key": "x", "payload": [{"name": "hello"}]}', "[]"):
        cache.write_text(garbage, encoding="utf-8")
        assert help_row(configured, "hello") is not None
        assert json.loads(cache.read_text(encoding="utf-8"))["payload"]  # rewritten whole

    blocked = configured.tmp / "not-a-directory"
    blocked.write_text("", encoding="utf-8")
    assert help_row(configured, "hello", THE_LOOP_CACHE_DIR=str(blocked)) is not None
    assert help_row(configured, "hello", THE_LOOP_CACHE_DIR="relative/cache") is not None  # not a place: no cache
    assert help_row(configured, "hello", THE_LOOP_CACHE_DIR="") is not None  # turned off


def test_the_cache_key_covers_every_switch_the_plugin_host_reads() -> None:
    import re
    from pathlib import Path

    import the_loop.plugins
    from the_loop.cli.cache import ENV_SWITCHES

    source = Path(the_loop.plugins.__file__).read_text(encoding="utf-8")
    assert set(re.findall(r'"(THE_LOOP_[A-Z_]+)"', source)) == set(ENV_SWITCHES)
