"""The declarations behind the state layout: every generated path and record key is declared, classified, ignored
or tracked as declared, and documented in docs/state.md exactly as declared."""

from __future__ import annotations

import inspect
import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from the_loop.config import load_config
from the_loop.interfaces import Attribute, GeneratedPath
from the_loop.plugins import PluginHost
from the_loop.refs import WorkItemRef
from the_loop.state import ATTRIBUTE_KINDS, StateLayout, gitignore_block
from the_loop.state.store import WorkItemStore
from the_loop.testing import LoopEnv, gitignore_ignores

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "state.md"
SHIPPED_PLUGINS = "claude,cursor,github,jira,slack"  # what the-loop ships; a third-party plugin is not documented here

# Sample values for placeholders; each template is instantiated with every combination.
SAMPLES: dict[str, list[str]] = {
    "slug": ["github-octo-repo-15", "github-ghe.corp.example-octo-repo-15", "jira-acme.atlassian.net-PROJ-12"],
    "name": ["github-octo-repo-15.json", "index.json", "poll-status.json", "github-octo-repo-15", ".the-loop-state"],
    "random": ["k3j9x_a1"],
    "timestamp": ["20260731T091158Z", "20260731T091158Z-2"],
    "service": ["gh-webhook", "poll", "poller", "slack-listener"],
    "channel": ["slack"],
}
PLACEHOLDER = re.compile(r"<([^>]+)>")


@pytest.fixture
def shipped(monkeypatch: pytest.MonkeyPatch) -> PluginHost:
    """Core plus the plugins the-loop ships, as the CLI would load them."""
    monkeypatch.setenv("THE_LOOP_LOAD_PLUGINS", SHIPPED_PLUGINS)
    return PluginHost.create()


def instances(template: str) -> list[str]:
    """Concrete relative paths for a declared template; a directory template yields a file inside it."""
    names = PLACEHOLDER.findall(template)
    found = []
    for values in itertools.product(*(SAMPLES.get(name, ["sample"]) for name in names)):
        path = template
        for value in values:
            path = PLACEHOLDER.sub(lambda _m, value=value: value, path, count=1)
        found.append(path + "item.json" if path.endswith("/") else path)
    return found


def declared_regex(template: str) -> re.Pattern[str]:
    """A template as a regex over relative paths: a placeholder is one path segment's worth of characters."""
    body = "".join(
        "[^/]+" if part.startswith("<") else re.escape(part) for part in re.split(r"(<[^>]+>)", template) if part
    )
    return re.compile(body + (".*" if template.endswith("/") else "") + r"\Z")


def is_declared(relative: str, declared: list[GeneratedPath], *, directory: bool) -> bool:
    if any(declared_regex(p.path).match(relative) for p in declared):
        return True
    return directory and any(p.path.startswith(relative + "/") for p in declared)


# ---------------------------------------------------------------------------------------------- S1 / S2


def layout_paths(layout: StateLayout) -> list[tuple[str, Path, bool]]:
    """Every path a StateLayout resolves: its path properties, and its one-argument path methods over samples."""
    found: list[tuple[str, Path, bool]] = []
    arguments = [*SAMPLES["slug"], *SAMPLES["service"], "index"]
    for name, member in inspect.getmembers(StateLayout):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            value = getattr(layout, name)
            if isinstance(value, Path):
                found.append((name, value, name.endswith("_dir")))
        elif inspect.isfunction(member) and len(inspect.signature(member).parameters) == 2:
            found += [(f"{name}({arg!r})", getattr(layout, name)(arg), False) for arg in arguments]
    return found


def test_s1_every_layout_path_is_declared(shipped: PluginHost, tmp_path: Path) -> None:
    declared = shipped.state_paths()
    layout = StateLayout(tmp_path / ".the-loop")
    resolved = layout_paths(layout)
    assert {name for name, _, _ in resolved} >= {
        "portable_dir",
        "index_path",
        "index_cache_path",
        "marker_path",
        "events_path",
        "poll_status_path",
        "portable_record('github-octo-repo-15')",
        "local_record('github-octo-repo-15')",
        "lock_for('index')",
        "pidfile('gh-webhook')",
        "logfile('poller')",
    }
    undeclared = [
        f"{name} -> {path.relative_to(layout.root).as_posix()}"
        for name, path, directory in resolved
        if not is_declared(path.relative_to(layout.root).as_posix(), declared, directory=directory)
    ]
    assert undeclared == []


def test_s2_portable_set_is_exact_and_every_path_says_why(shipped: PluginHost) -> None:
    declared = shipped.state_paths()
    assert {p.path for p in declared if p.portable} == {
        "portable/<slug>.json",
        "portable/index.json",
        ".the-loop-state",
    }
    assert [p.path for p in declared if not p.why.strip() or not p.holds.strip()] == []
    paths = [p.path for p in declared]
    assert len(paths) == len(set(paths))


def test_matcher_for_templates_is_strict() -> None:
    regex = declared_regex("local/locks/<name>.lock")
    assert regex.match("local/locks/github-octo-repo-15.lock")
    assert not regex.match("local/locks/a/b.lock")
    assert not regex.match("local/locks/x.lock.tmp")
    assert declared_regex("local/attachments/<slug>/").match("local/attachments/github-octo-repo-15/shot.png")


# --------------------------------------------------------------------------------------------------- S5


@pytest.mark.parametrize(
    ("block", "path", "is_dir", "expected"),
    [
        ("*.log\n!keep.log\n", "a/keep.log", False, False),  # last match wins
        ("!keep.log\n*.log\n", "a/keep.log", False, True),
        ("out/\n!out/keep.txt\n", "out/keep.txt", False, True),  # an excluded parent stays excluded
        ("out/\n", "out", False, False),  # a dir/ pattern never matches a file
        ("out/\n", "a/out/x", False, True),  # unanchored: any depth
        ("r/*.pid\n", "r/a/b.pid", False, False),  # * never crosses /
        ("r/*.pid\n", "r/.b.pid", False, True),  # * matches a leading dot
        ("r/.*.tmp\n", "r/portable/.x.tmp", False, False),  # a slash anchors the pattern
        ("# r/\n\nr/x\n", "r/x", False, True),
    ],
)
def test_mini_gitignore_matcher_follows_git(
    block: str, path: str, is_dir: bool, expected: bool, tmp_path: Path
) -> None:
    assert gitignore_ignores(block, path, is_dir=is_dir) is expected
    git = shutil.which("git")
    if git is None:
        assert os.environ.get("CI") != "true", "git is required when CI=true"
        return
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(block)
    target = tmp_path / path
    if is_dir:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
    answer = subprocess.run([git, "-C", str(tmp_path), "check-ignore", "-q", path], check=False)
    assert answer.returncode == (0 if expected else 1)


def classified_samples(declared: list[GeneratedPath]) -> tuple[list[str], list[str]]:
    local = [f".the-loop/{p}" for item in declared if not item.portable for p in instances(item.path)]
    tracked = [f".the-loop/{p}" for item in declared if item.portable for p in instances(item.path)]
    tracked += [".the-loop/cli-config.yaml", "README.md", "src/portable/x.json"]  # not generated: never ignored
    return local, tracked


def test_s5_gitignore_block_ignores_exactly_the_local_paths(shipped: PluginHost) -> None:
    declared = shipped.state_paths()
    block = gitignore_block(declared)
    local, tracked = classified_samples(declared)
    assert ".the-loop/portable/.github-octo-repo-15.json.k3j9x_a1.tmp" in local
    assert ".the-loop/portable/github-octo-repo-15.json.corrupt-20260731T091158Z" in local
    assert ".the-loop/.the-loop-state.corrupt-20260731T091158Z" in local
    assert ".the-loop/local/locks/github-octo-repo-15.lock" in local
    assert {".the-loop/portable/github-octo-repo-15.json", ".the-loop/portable/index.json"} <= set(tracked)
    assert [path for path in local if not gitignore_ignores(block, path)] == []
    assert [path for path in tracked if gitignore_ignores(block, path)] == []


def test_s5_real_git_agrees_with_the_block(shipped: PluginHost, tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        assert os.environ.get("CI") != "true", "git is required when CI=true"
        pytest.skip("git is not installed")
    declared = shipped.state_paths()
    local, tracked = classified_samples(declared)
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(gitignore_block(declared))
    for path in local + tracked:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    answer = subprocess.run(
        [git, "-C", str(tmp_path), "check-ignore", "--stdin"], input="\n".join(local + tracked), text=True,
        capture_output=True, check=False,
    )  # fmt: skip
    assert sorted(answer.stdout.split()) == sorted(local)


# ---------------------------------------------------------------------------------------------- attributes


def test_a_machine_handle_is_never_declared_for_the_portable_file(shipped: PluginHost) -> None:
    attributes = shipped.record_attributes()
    assert [a.key for a in attributes if a.file == "portable" and a.kind == "machine-handle"] == []
    misplaced = [(a.file, a.key, a.kind) for a in attributes if a.kind not in ATTRIBUTE_KINDS[a.file]]
    assert misplaced == []
    assert [a.key for a in attributes if not a.holds.strip()] == []
    keys = [(a.file, a.key) for a in attributes]
    assert len(keys) == len(set(keys))


def test_a_record_written_through_the_store_has_only_declared_keys(shipped: PluginHost, tmp_path: Path) -> None:
    attributes = shipped.record_attributes()
    layout = StateLayout(tmp_path / ".the-loop")

    def url(ref: WorkItemRef) -> str:
        return f"https://github.com/{ref.owner}/{ref.repo}/issues/{ref.number}"

    store = WorkItemStore(layout, url_for=url)
    portable = {a.key for a in attributes if a.file == "portable"}
    assert set(store.sections) == {a.key for a in attributes if a.file == "portable" and a.kind != "derived"}
    for section in store.sections:
        store.update_section("github:octo/repo#15", section, {"written": section})
    record = json.loads(layout.portable_record("github-octo-repo-15").read_text())
    assert set(record) - portable == set()
    assert set(record) == {"ref", "url", *store.sections}
    with pytest.raises(ValueError, match="sessions"):
        store.update_section("github:octo/repo#15", "sessions", {"github:octo/repo#15": {"cwd": "/home/me"}})
    assert "sessions" not in json.loads(layout.portable_record("github-octo-repo-15").read_text())


def test_a_plugin_cannot_make_a_machine_handle_a_portable_section(plugin_host: Any, tmp_path: Path) -> None:
    from the_loop import hookimpl

    class Sneaky:
        @hookimpl
        def loop_record_attributes(self) -> list[Attribute]:
            return [
                Attribute("portable", "tmuxSocket", "machine-handle", "a socket path", owner="sneaky"),
                Attribute("portable", "digest", "operator-ledger", "what the digest plugin sent", owner="digest"),
            ]

    plugin_host.register(Sneaky(), "sneaky")
    path = tmp_path / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text('version: "0.12.0"\n', encoding="utf-8")
    config = load_config(path, plugin_host, load_env=False)
    sections = WorkItemStore(config.state, config=config).sections
    assert "digest" in sections
    assert "tmuxSocket" not in sections


# ---------------------------------------------------------------------------------------------------- docs


def markdown_table(text: str, header: str) -> list[tuple[str, ...]]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(tuple(cell.strip() for cell in line.strip()[1:-1].split("|")))
    return rows


def test_s3_docs_tables_equal_the_declarations(shipped: PluginHost) -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = [(f"`{p.path}`", "portable" if p.portable else "local", p.holds, p.why) for p in shipped.state_paths()]
    assert markdown_table(text, "| Path | Travels | Holds | Why |") == paths
    files = {
        "repository": "`docs/specs/<id>/work-item-state.json`",
        "portable": "`portable/<slug>.json`",
        "local": "`local/<slug>.json`",
    }
    attributes = [(files[a.file], f"`{a.key}`", a.kind, a.holds) for a in shipped.record_attributes()]
    assert markdown_table(text, "| File | Key | Kind | Holds |") == attributes
    fields = [(f"`{a.key}`", ", ".join(f"`{f}`" for f in a.fields)) for a in shipped.record_attributes() if a.fields]
    assert markdown_table(text, "| Key | Fields of an entry |") == fields


def test_docs_gitignore_block_equals_the_command_output(loop_env: LoopEnv) -> None:
    result = loop_env.run("state", "gitignore", config=False, THE_LOOP_LOAD_PLUGINS=SHIPPED_PLUGINS)
    assert result.returncode == 0, result.stderr
    text = DOC.read_text(encoding="utf-8")
    block = text.split("```gitignore\n", 1)[1].split("```", 1)[0]
    assert block == result.stdout
    assert result.stdout.startswith("# the-loop:")
    assert ".the-loop/local/\n" in result.stdout


# ----------------------------------------------------------------------------------------------------- CLI


def test_state_gitignore_needs_no_config(loop_env: LoopEnv) -> None:
    loop_env.write_config("version: [not, valid\n")  # not even YAML
    result = loop_env.run("state", "gitignore")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    other = loop_env.run("state", "gitignore", "--root-dir", "ops/state/")
    assert other.returncode == 0
    assert "ops/state/local/\n" in other.stdout
    assert ".the-loop/" not in other.stdout
    bad = loop_env.run("state", "gitignore", "--root-dir", "/")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("error: --root-dir")
    assert "Traceback" not in bad.stderr
    assert list(loop_env.home.iterdir()) == []


def test_state_paths_json_and_text(loop_env: LoopEnv, shipped: PluginHost) -> None:
    result = loop_env.run("state", "paths", "--format", "json", config=False, THE_LOOP_LOAD_PLUGINS=SHIPPED_PLUGINS)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows == [
        {"path": p.path, "portable": p.portable, "owner": p.owner, "holds": p.holds, "why": p.why}
        for p in shipped.state_paths()
    ]
    text = loop_env.run("state", "paths", config=False)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["PATH", "TRAVELS", "OWNER"]
    by_path = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert by_path["portable/<slug>.json"] == "portable"
    assert by_path["local/<slug>.json"] == "local"
    assert by_path["logs/events.jsonl"] == "local"
    assert not (loop_env.config_path.parent / "portable").exists()
