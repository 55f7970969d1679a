"""Packaging: versions and entry points agree, extras install exactly their plugins, and ``--help`` stays light.

The ``slow`` tests build real wheels of every distribution and install them into two fresh virtualenvs, taking
dependencies from the package index (pip's cache keeps repeat runs quick). They run in the default suite;
``-m 'not slow'`` leaves them out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import the_loop

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIRS = sorted(path.parent for path in ROOT.glob("plugins/*/pyproject.toml"))
ALL_PLUGINS = {"github", "jira", "slack", "claude", "cursor", "web"}
# Modules `the-loop --help` must never import: config and HTTP machinery, and every plugin's client library.
HEAVY_MODULES = ("pydantic", "yaml", "github", "slack_sdk", "jira", "requests", "uvicorn", "starlette", "httpx")


def project(directory: Path) -> dict[str, Any]:
    return tomllib.loads((directory / "pyproject.toml").read_text(encoding="utf-8"))["project"]


# ----------------------------------------------------------------------------------------------------- fast


def test_version_constant_matches_core_pyproject() -> None:
    assert the_loop.__version__ == project(ROOT / "core")["version"]


def test_every_distribution_shares_core_version_and_pins_it() -> None:
    version = project(ROOT / "core")["version"]
    mismatched = {
        project(d)["name"]: project(d)["version"] for d in [ROOT, *PLUGIN_DIRS] if project(d)["version"] != version
    }
    assert not mismatched, f"versions differ from the-loop-core {version}: {mismatched}"
    pins = [
        *project(ROOT)["dependencies"],
        *(req for reqs in project(ROOT)["optional-dependencies"].values() for req in reqs),
    ]
    loose = [req for req in pins if req.startswith("the-loop-") and not req.endswith(f"=={version}")]
    assert not loose, f"the meta package must pin its siblings to =={version}: {loose}"


@pytest.mark.parametrize("directory", PLUGIN_DIRS, ids=lambda d: d.name)
def test_plugin_has_exactly_one_entry_point_named_after_it(directory: Path) -> None:
    meta = project(directory)
    name = meta["name"].removeprefix("the-loop-")
    points = meta.get("entry-points", {}).get("the_loop.plugins", {})
    assert points == {name: f"the_loop_{name}.plugin"}, f"{meta['name']}: {points}"
    other_groups = set(meta.get("entry-points", {})) - {"the_loop.plugins"}
    assert not other_groups, f"{meta['name']} registers other entry-point groups: {other_groups}"


def test_plugins_never_add_console_scripts() -> None:
    """Only the meta package owns `the-loop`; a second owner of one script file breaks installs."""
    owners = [project(d)["name"] for d in [ROOT / "core", *PLUGIN_DIRS] if project(d).get("scripts")]
    assert not owners
    assert project(ROOT)["scripts"] == {"the-loop": "the_loop.cli:main"}


def imported_modules(stderr: str) -> set[str]:
    """Top-level module names from ``python -X importtime`` output."""
    found = set()
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if match:
            found.add(match[1].split(".")[0])
    return found


def test_help_imports_no_heavy_module(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("THE_LOOP_")}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "the_loop", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Commands:" in result.stdout
    modules = imported_modules(result.stderr)
    assert "click" in modules, "importtime output was not parsed"
    heavy = sorted(set(HEAVY_MODULES) & modules)
    assert not heavy, f"`the-loop --help` imports {heavy}"
    assert not list(tmp_path.iterdir()), "`--help` wrote into HOME or the cwd"


# What `status` and `events` may load (the config, the plugins' hook modules) but never a client library.
CLIENT_MODULES = ("github", "slack_sdk", "jira", "requests", "urllib3", "websockets", "uvicorn", "starlette", "httpx")
EVERY_PLUGIN_CONFIG = """version: "0.12.0"
repositories: [octo/repo]
webhooks: {ghWebhook: {enabled: true, port: 18999}}
polling: {enabled: true, sources: [{provider: github}, {provider: jira, projects: [PROJ]}]}
integrations:
  jira:
    site: jira.test
    deployment: cloud
    api: {emailEnv: [JIRA_EMAIL], tokenEnv: [JIRA_API_TOKEN]}
    projects: {PROJ: {repository: octo/repo}}
    webhook: {secretEnv: JIRA_WEBHOOK_SECRET}
channels:
  slack: {enabled: true, channel: C0AB, read: {mode: socket}}
"""


@pytest.mark.parametrize("command", [("status",), ("events", "--limit", "5")], ids=lambda c: c[0])
def test_status_and_events_import_no_client_library(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Every plugin configured (GitHub webhook and poller, Jira, Slack Socket Mode): `status` asks each service for
    its problems and `events` reads the log, and neither loads a provider's client library."""
    config = tmp_path / "cli-config.yaml"
    config.write_text(EVERY_PLUGIN_CONFIG)
    env = {key: value for key, value in os.environ.items() if not key.startswith("THE_LOOP_")}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "the_loop", "-c", str(config), *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode in (0, 1), result.stderr  # status: 1 while the services are not running
    modules = imported_modules(result.stderr)
    assert "the_loop" in modules, "importtime output was not parsed"
    loaded = sorted(set(CLIENT_MODULES) & modules)
    assert not loaded, f"`the-loop {' '.join(command)}` imports {loaded}"


# ----------------------------------------------------------------------------------------------------- slow


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of core, the five plugins and the meta package, built from this checkout."""
    out = tmp_path_factory.mktemp("wheels")
    sources = [ROOT / "core", *PLUGIN_DIRS, ROOT]
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out)]
        + [str(s) for s in sources],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    built = sorted(p.name.split("-")[0] for p in out.glob("*.whl"))
    assert built == sorted(["the_loop", "the_loop_core", *(f"the_loop_{d.name}" for d in PLUGIN_DIRS)]), built
    return out


def fresh_venv(path: Path, wheels: Path, requirement: str, *, with_pip: bool = False) -> Path:
    """A new virtualenv at ``path`` with ``requirement`` installed from the local wheels plus the index."""
    subprocess.run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)], check=True)
    python = path / "bin" / "python"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--find-links",
            str(wheels),
            requirement,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return path


def run_in(venv: Path, *argv: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("THE_LOOP_", "GH_", "GITHUB_"))}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", **extra)
    env.pop("PYTHONPATH", None)
    return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=120)


def listed_plugins(venv: Path, home: Path) -> dict[str, dict[str, Any]]:
    result = run_in(venv, str(venv / "bin" / "the-loop"), "plugins", "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    return {plugin["name"]: plugin for plugin in json.loads(result.stdout)}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_claude_extra_installs_only_the_claude_plugin(wheels: Path, tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path / "venv", wheels, f"the-loop[claude]=={the_loop.__version__}")
    home = tmp_path / "home"
    home.mkdir()
    plugins = listed_plugins(venv, home)
    assert "claude" in plugins and not plugins["claude"]["error"]
    assert plugins["claude"]["distribution"] == "the-loop-claude"
    assert not (set(plugins) & (ALL_PLUGINS - {"claude"})), f"unexpected plugins: {sorted(plugins)}"
    python = str(venv / "bin" / "python")
    for module in ("github", "the_loop_github", "slack_sdk", "jira"):
        result = run_in(venv, python, "-c", f"import {module}", home=home)
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, f"{module} is importable"
    version = run_in(venv, str(venv / "bin" / "the-loop"), "--version", home=home)
    assert version.stdout.strip() == f"the-loop {the_loop.__version__}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_all_extra_installs_every_plugin_and_install_sh_reuses_it(wheels: Path, tmp_path: Path) -> None:
    """`[all]` from wheels lists the five plugins; then `install.sh`, run over that same virtualenv (its default
    place under a temporary HOME), reinstalls from the checkout, links the command, writes a starter config and
    starts — twice, to show it is idempotent."""
    home = tmp_path / "home"
    home.mkdir()
    venv = fresh_venv(home / ".the-loop" / "venv", wheels, f"the-loop[all]=={the_loop.__version__}", with_pip=True)
    plugins = listed_plugins(venv, home)
    assert set(plugins) >= ALL_PLUGINS, f"missing: {sorted(ALL_PLUGINS - set(plugins))}"
    assert not [name for name in ALL_PLUGINS if plugins[name]["error"]]
    python = str(venv / "bin" / "python")
    imported = run_in(venv, python, "-c", "import github, slack_sdk, jira", home=home)
    assert imported.returncode == 0, imported.stderr

    if shutil.which("tmux") is None and os.environ.get("CI") != "true":
        pytest.skip("install.sh needs tmux")
    for attempt in (1, 2):
        result = run_in(venv, "bash", str(ROOT / "install.sh"), home=home)
        assert result.returncode == 0, f"run {attempt}:\n{result.stdout}\n{result.stderr}"
        link = home / ".local" / "bin" / "the-loop"
        assert link.resolve() == (venv / "bin" / "the-loop").resolve()
        assert f"linked {link}" in result.stdout
        config = home / ".the-loop" / "cli-config.yaml"
        assert config.is_file()
        if attempt == 1:
            assert f"wrote {config}" in result.stdout
        else:
            assert f"keeping the existing config {config}" in result.stdout
        assert "the-loop " + the_loop.__version__ in result.stdout  # `start` prints the version first
        assert str(config) in result.stdout  # `status` prints the config it read
    assert set(listed_plugins(venv, home)) >= ALL_PLUGINS

    # Issue 18: with THE_LOOP_GITHUB_REPO the first command ends with a poller watching that repository.
    import yaml
    from fake_github import FakeGitHub  # plugins/github/tests is on pytest's pythonpath

    from the_loop.testing import wait_for

    config.unlink()
    loop = str(venv / "bin" / "the-loop")
    with FakeGitHub(tokens={"tok": "octocat"}, scopes={"octocat": "repo"}) as fake:
        fake.add_repo("octo/demo", labels=("the-loop: auto-execute",))
        github = {"THE_LOOP_GITHUB_REPO": "octo/demo", "THE_LOOP_GITHUB_API_URL": fake.url, "GH_TOKEN": "tok"}
        try:
            result = run_in(venv, "bash", str(ROOT / "install.sh"), home=home, **github)
            assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
            assert "[ok] the token from GH_TOKEN is octocat's (scopes: repo)" in result.stdout
            assert f"wrote {config}" in result.stdout
            assert yaml.safe_load(config.read_text())["repositories"] == ["octo/demo"]
            assert re.search(r"^poller +running \(pid \d+\) \[enabled\]$", result.stdout, re.M), result.stdout
            wait_for(lambda: any(r.path == "/repos/octo/demo/issues" for r in fake.requests), timeout=30)
        finally:
            run_in(venv, loop, "stop", home=home)
        config.unlink()
        refused = run_in(venv, "bash", str(ROOT / "install.sh"), home=home, **{**github, "GH_TOKEN": "wrong"})
        assert refused.returncode == 1 and "the-loop init wrote no config" in refused.stderr
        assert not config.exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_jira_and_claude_extras_alone_poll_spawn_and_deliver(wheels: Path, tmp_path: Path, claude_binary: Path) -> None:
    """Issue 9's promise, installed for real: `the-loop[jira,claude]` (no GitHub plugin, no PyGithub) runs a
    Jira-only configuration against the fake Jira — the poller spawns an armed ticket's session in
    `routing.spawnWorkdir` through the Claude adapter (the real Claude Code, offline against the fake Anthropic
    API, from a fresh HOME), and a later Jira comment reaches the model as its own turn."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    from fake_jira import FakeJira  # plugins/jira/tests is on pytest's pythonpath

    from the_loop.testing.conformance import hermetic_path
    from the_loop.testing.fake_anthropic import FakeAnthropic

    venv = fresh_venv(tmp_path / "venv", wheels, f"the-loop[jira,claude]=={the_loop.__version__}")
    home, work = tmp_path / "home", tmp_path / "work"
    for directory in (home, work):
        directory.mkdir()
    python = venv / "bin" / "python"
    assert run_in(venv, str(python), "-c", "import github", home=home).returncode != 0  # no GitHub plugin here
    socket = f"the-loop-pkg-{os.getpid()}"
    with FakeJira() as fake, FakeAnthropic(tmp_path / "anthropic-api.jsonl") as api:
        fake.add_issue("PROJ-12", summary="Add a widget", labels=["the-loop:auto-execute"])
        config = {
            "version": "0.12.0",
            "polling": {"enabled": True, "sources": [{"provider": "jira", "projects": ["PROJ"]}]},
            "routing": {
                "enabled": True,
                "defaultHarness": "claude",
                "spawnOnUnmatched": "labeled",
                "authorizedUsers": [{"jira": "acc-ok"}],
                "spawnWorkdir": str(work),
                "tmux": {"socketName": socket},
            },
            "integrations": {
                "claude": {"binary": str(claude_binary)},
                "jira": {
                    "site": "jira.test",
                    "deployment": "cloud",
                    "serverUrl": fake.url,
                    "api": {"emailEnv": ["JIRA_EMAIL"], "tokenEnv": ["JIRA_API_TOKEN"]},
                    "projects": {"PROJ": {"repository": "octo/repo"}},
                },
            },
        }
        (home / "cli-config.yaml").write_text(json.dumps(config))
        env = {key: value for key, value in os.environ.items() if not key.startswith(("THE_LOOP_", "ANTHROPIC_"))}
        env.pop("PYTHONPATH", None)
        env.pop("CLAUDE_CONFIG_DIR", None)
        env.update(
            HOME=str(home),
            PATH=hermetic_path(tmp_path / "sysbin", venv / "bin"),
            JIRA_EMAIL="bot@example.test",
            JIRA_API_TOKEN="jira-token",
            ANTHROPIC_BASE_URL=api.url,
            ANTHROPIC_API_KEY="sk-ant-api03-packaging-test-0123456789abcdefghij",
        )

        def the_loop_cli(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [str(venv / "bin" / "the-loop"), "-c", str(home / "cli-config.yaml"), *args]
            return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=120)

        try:
            assert the_loop_cli("config", "validate").returncode == 0
            assert the_loop_cli("daemon", "run", "poller", "--once").returncode == 0  # first sight: baseline
            fake.add_comment("PROJ-12", "the-loop start", "acc-ok")
            polled = the_loop_cli("daemon", "run", "poller", "--once")
            assert polled.returncode == 0, polled.stderr
            target = "loop-jira-jira_test-PROJ-12"
            has = subprocess.run(["tmux", "-L", socket, "has-session", "-t", f"={target}"], timeout=10)
            assert has.returncode == 0, polled.stderr
            assert "PROJ-12" in api.wait_for_turn("PROJ-12")[0]
            [project] = (home / ".claude" / "projects").iterdir()  # the conversation is kept for the work dir
            assert project.name == "".join(c if c.isalnum() else "-" for c in str(work))
            fake.add_comment("PROJ-12", "please add a test for the widget", "acc-ok")
            assert the_loop_cli("daemon", "run", "poller", "--once").returncode == 0
            turn = api.wait_for_turn("please add a test for the widget")
            assert len(turn) == 2 and "PROJ-12" in turn[0]
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)


# ------------------------------------------------------------------------------------------------------ CI


@pytest.mark.parametrize("ci", ["true", ""], ids=["ci", "local"])
def test_ci_run_installs_tmux_and_without_it_fails_under_ci(tmp_path: Path, ci: str) -> None:
    """`.ci/run` installs tmux (and Node.js with npm, and Chromium for the browser tests) with apt-get when missing;
    if tmux is still missing, CI=true
    fails the run (tests never skip for tmux) while a local run warns and goes on to the README's test command. A
    copy of the script runs against stubs (an apt-get that installs nothing, a stub ``test.sh``): nothing real
    changes."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    tools = tmp_path / "bin"  # what the script needs, minus tmux
    tools.mkdir()
    for tool in ("bash", "rm", "dirname"):
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    apt_log = tmp_path / "apt-get.log"
    stubs = {
        "id": "#!/bin/bash\necho 0\n",  # as root, so the script may call apt-get
        "apt-get": f'#!/bin/bash\necho "$*" >> {apt_log}\n',
        checkout / "test.sh": "#!/bin/bash\necho 'the suite ran'\n",
    }
    for where, text in stubs.items():
        path = where if isinstance(where, Path) else tools / where
        path.write_text(text)
        path.chmod(0o755)
    (checkout / ".venv").mkdir()
    env = {"PATH": str(tools), "HOME": str(tmp_path), **({"CI": ci} if ci else {})}

    result = subprocess.run(
        [str(tools / "bash"), str(checkout / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60
    )

    assert apt_log.read_text().splitlines() == ["update", "install -y tmux nodejs npm chromium"]
    if ci:
        assert result.returncode == 1
        assert "CI=true and tmux is still missing" in result.stderr
        assert "the suite ran" not in result.stdout
        assert (checkout / ".venv").exists()  # nothing was torn down before failing
    else:
        assert result.returncode == 0, result.stderr
        assert "tmux is still missing" in result.stderr
        assert "the suite ran" in result.stdout
        assert not (checkout / ".venv").exists()  # the environment is rebuilt from scratch
