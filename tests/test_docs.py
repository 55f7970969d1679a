"""The documentation stays in step with the code.

Each test compares one reference page with what the code declares — hooks, CLI commands and options, extras,
config keys, the example plugin's files — and lists everything missing or stale when it fails.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import click
import pytest
from packaging.requirements import Requirement
from pydantic import BaseModel

from the_loop import hookspecs
from the_loop.cli import LazyGroup, cli
from the_loop.config.models import CoreConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FIRST_PARTY_PLUGINS = ("github", "jira", "slack", "claude", "cursor", "web")


# ------------------------------------------------------------------------------------------- markdown helpers


def without_code(text: str) -> str:
    """``text`` with fenced code blocks blanked out, so a ``#`` comment in a block is never a heading."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            kept.append("")
        else:
            kept.append("" if fenced else line)
    return "\n".join(kept)


def sections(text: str, marker: str) -> dict[str, str]:
    """Heading text → the section's text (code blocks included), for headings starting with ``marker``."""
    lines = text.splitlines()
    prose = without_code(text).splitlines()
    found: dict[str, str] = {}
    level = len(marker.split()[0])
    current: str | None = None
    body: list[str] = []
    for line, plain in zip(lines, prose, strict=True):
        heading = re.match(r"^(#+) (.*)$", plain)
        if heading and len(heading[1]) <= level:
            if current is not None:
                found[current] = "\n".join(body)
            current = heading[2].strip() if plain.startswith(marker) else None
            body = []
        elif current is not None:
            body.append(line)
    if current is not None:
        found[current] = "\n".join(body)
    return found


def code_blocks(text: str) -> Iterator[tuple[str, str]]:
    """Every fenced block as (info string, content)."""
    for match in re.finditer(r"^```([^\n]*)\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        yield match[1].strip(), match[2]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every markdown table in ``text``, split into stripped cells (``\\|`` kept in a cell)."""
    rows = []
    for line in without_code(text).splitlines():
        if not line.startswith("|") or re.match(r"^\|[\s|:-]+\|$", line):
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append(cells)
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------------ hooks


def declared_hooks() -> dict[str, inspect.Signature]:
    found = {}
    for spec_class in hookspecs.SPEC_CLASSES:
        for name, function in vars(spec_class).items():
            if hasattr(function, "the_loop_spec"):
                signature = inspect.signature(function)
                params = [p for p in signature.parameters.values() if p.name != "self"]
                found[name] = signature.replace(parameters=params)
    return found


def normalized(annotation: Any) -> str:
    """One spelling for an annotation, whether it came from source text or from ``inspect``."""
    if annotation is inspect.Parameter.empty or annotation is None:
        return ""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return ast.unparse(ast.parse(text, mode="eval"))


def documented_signature(name: str, section: str) -> list[str] | None:
    """The ``def name(...)`` of the first python block in ``section`` as comparable strings, or None."""
    for info, code in code_blocks(section):
        if not info.startswith("python"):
            continue
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                params = [f"{a.arg}: {ast.unparse(a.annotation) if a.annotation else ''}" for a in node.args.args]
                returns = ast.unparse(node.returns) if node.returns else ""
                return [*params, f"-> {returns}"]
    return None


def test_hook_reference_has_one_heading_per_hook() -> None:
    documented = {heading for heading in sections(read("plugins/hooks.md"), "### ") if heading.startswith("loop_")}
    declared = set(declared_hooks())
    assert not declared - documented, f"hooks without a ### heading in docs/plugins/hooks.md: {declared - documented}"
    assert not documented - declared, (
        f"docs/plugins/hooks.md documents hooks that do not exist: {documented - declared}"
    )


def test_hook_reference_signatures_match_the_specs() -> None:
    texts = sections(read("plugins/hooks.md"), "### ")
    wrong = []
    for name, signature in declared_hooks().items():
        if name not in texts:
            continue  # reported by the heading test
        expected = [f"{p.name}: {normalized(p.annotation)}" for p in signature.parameters.values()]
        expected.append(f"-> {normalized(signature.return_annotation)}")
        found = documented_signature(name, texts[name])
        if found != expected:
            wrong.append(f"{name}: documented {found}, declared {expected}")
    assert not wrong, "docs/plugins/hooks.md signatures differ from hookspecs.py:\n" + "\n".join(wrong)


# -------------------------------------------------------------------------------------------------------- CLI


def core_commands() -> dict[str, click.Command]:
    """Every core command and subcommand by path (``"the-loop config validate"``); plugin commands are skipped."""
    found: dict[str, click.Command] = {"the-loop": cli}

    def walk(group: click.Group, path: str, ctx: click.Context) -> None:
        # A LazyGroup's `lazy` holds core's entries only; plugin commands come from the host and are not walked.
        names = sorted(group.lazy) if isinstance(group, LazyGroup) else group.list_commands(ctx)
        for name in names:
            command = group.get_command(ctx, name)
            assert command is not None, f"{path} {name}: listed but cannot be loaded"
            found[f"{path} {name}"] = command
            if isinstance(command, click.Group):
                walk(command, f"{path} {name}", click.Context(command, parent=ctx, info_name=name))

    walk(cli, "the-loop", click.Context(cli, info_name="the-loop"))
    return found


def surface(command: click.Command) -> list[str]:
    """What a command's section must mention: each long option (both halves of ``--x/--no-x``) and each
    argument's metavar word."""
    names = []
    for param in command.params:
        if isinstance(param, click.Option):
            names += [opt for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--") and opt != "--help"]
        elif isinstance(param, click.Argument):
            names += re.findall(r"[A-Z][A-Z0-9_-]+", param.metavar or param.name.upper())
    return names


def test_cli_reference_documents_every_core_command_and_option() -> None:
    texts = sections(read("cli.md"), "## ")
    missing_commands, missing_options = [], []
    for path, command in core_commands().items():
        if path not in texts:
            missing_commands.append(path)
            continue
        for name in surface(command):
            if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", texts[path]):
                missing_options.append(f"{path}: {name}")
    assert not missing_commands, f"commands without a '## <path>' heading in docs/cli.md: {missing_commands}"
    assert not missing_options, f"options/arguments not mentioned in their docs/cli.md section: {missing_options}"


def test_cli_reference_documents_no_command_that_does_not_exist() -> None:
    headings = {heading for heading in sections(read("cli.md"), "## ") if heading.startswith("the-loop")}
    stale = headings - set(core_commands())
    assert not stale, f"docs/cli.md documents commands that are not core commands: {sorted(stale)}"


def test_cli_reference_option_tables_name_real_options() -> None:
    texts = sections(read("cli.md"), "## ")
    stale = []
    for path, command in core_commands().items():
        real = {*surface(command), "--help"}
        for row in table_rows(texts.get(path, "")):
            stale += [f"{path}: {opt}" for opt in re.findall(r"--[\w-]+", row[0]) if opt not in real]
    assert not stale, f"docs/cli.md option tables name options the command does not have: {stale}"


# ----------------------------------------------------------------------------------------------------- extras


def pyproject(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def extras() -> dict[str, set[str]]:
    """Root extra → the distributions it installs (self-references such as ``the-loop[github,jira]`` expanded)."""
    root = pyproject(ROOT / "pyproject.toml")["project"]
    declared = {name: [Requirement(r) for r in reqs] for name, reqs in root["optional-dependencies"].items()}

    def resolve(extra: str) -> set[str]:
        found: set[str] = set()
        for requirement in declared[extra]:
            if requirement.name == root["name"]:
                for inner in requirement.extras:
                    found |= resolve(inner)
            else:
                found.add(requirement.name)
        return found

    return {name: resolve(name) for name in declared}


def plugin_projects() -> dict[str, dict[str, Any]]:
    """Distribution name → its pyproject ``project`` table, for every first-party plugin."""
    found = {}
    for path in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        project = pyproject(path)["project"]
        found[project["name"]] = project
    return found


def test_extras_table_matches_the_root_pyproject() -> None:
    table = sections(read("installation.md"), "### ")["Extras"]
    rows = {ticked(row[0])[0]: row for row in table_rows(table) if row and ticked(row[0])}
    expected = {name: dists for name, dists in extras().items() if name != "dev"}
    plugins = plugin_projects()
    problems = []
    if set(rows) != set(expected):
        problems.append(f"extras documented {sorted(rows)}, declared {sorted(expected)}")
    for extra, dists in expected.items():
        if extra not in rows:
            continue
        row = rows[extra]
        if set(ticked(row[1])) != dists:
            problems.append(f"{extra}: documented distributions {ticked(row[1])}, declared {sorted(dists)}")
        if len(dists) == 1 and next(iter(dists)) in plugins:  # a plugin's extra (fleet is core's own extra)
            (dist,) = dists
            points = plugins[dist].get("entry-points", {}).get("the_loop.plugins", {})
            entry = [f'{name} = "{value}"' for name, value in points.items()]
            packages = sorted({value.split(".")[0] for value in points.values()})
            if ticked(row[2]) != packages:
                problems.append(f"{extra}: documented import package {ticked(row[2])}, declared {packages}")
            if ticked(row[3]) != entry:
                problems.append(f"{extra}: documented entry point {ticked(row[3])}, declared {entry}")
    assert not problems, "docs/installation.md extras table is out of step:\n" + "\n".join(problems)


def test_readme_extras_and_dev_tools_are_documented() -> None:
    readme_rows = {ticked(row[0])[0]: row[1] for row in table_rows((ROOT / "README.md").read_text()) if ticked(row[0])}
    problems = []
    for extra, dists in extras().items():
        if extra == "dev":
            continue
        if extra not in readme_rows:
            problems.append(f"README.md has no row for extra {extra}")
        elif len(dists) == 1 and next(iter(dists)) not in readme_rows[extra]:
            problems.append(f"README.md row {extra} does not name {dists}")
    installation = read("installation.md")
    root = pyproject(ROOT / "pyproject.toml")["project"]
    for requirement in map(Requirement, root["optional-dependencies"]["dev"]):
        if requirement.name not in installation:
            problems.append(f"docs/installation.md does not mention the dev tool {requirement.name}")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------- config keys


def config_keys(model: type[BaseModel], prefix: str) -> Iterator[str]:
    """Every documented key of ``model`` by alias, dotted. A list of models adds ``[]`` (``polling.sources[]``) and
    a map of models a ``<placeholder>``; both the container and its items' keys are yielded."""
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}" if prefix else (info.alias or name)
        annotation = info.annotation
        candidates = [annotation, *get_args(annotation)]
        for arg in get_args(annotation):
            candidates += get_args(arg)  # list[str | Model]
        sub = next((t for t in candidates if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if sub is None:
            yield path
        elif get_origin(annotation) is list:
            yield path
            yield from config_keys(sub, f"{path}[]")
        elif get_origin(annotation) is dict:
            yield path
            yield from config_keys(sub, f"{path}.<>")
        else:
            yield from config_keys(sub, path)


def section_models() -> list[tuple[str, type[BaseModel], str]]:
    """(who, model, dotted prefix): core's model and every first-party plugin's config sections."""
    found: list[tuple[str, type[BaseModel], str]] = [("core", CoreConfig, "")]
    for name in FIRST_PARTY_PLUGINS:
        plugin = importlib.import_module(f"the_loop_{name}.plugin")
        hook = getattr(plugin, "loop_config_sections", None)
        for section in hook() if hook else []:
            model = section.model
            if isinstance(model, str):
                module, _, attr = model.partition(":")
                model = getattr(importlib.import_module(module), attr)
            found.append((f"the-loop-{name}", model, section.path))
    return found


def key_pattern(key: str) -> re.Pattern[str]:
    """A documented key in backticks; ``<>`` matches any placeholder (``<KEY>``, ``<name>``)."""
    return re.compile("`" + re.escape(key).replace("<>", "<[^>`]+>") + "`")


def test_configuration_reference_lists_every_config_key() -> None:
    text = read("configuration.md")
    missing = [
        f"{who}: {key}"
        for who, model, prefix in section_models()
        for key in config_keys(model, prefix)
        if not key_pattern(key).search(text)
    ]
    assert not missing, "config keys missing from docs/configuration.md:\n" + "\n".join(missing)


def test_configuration_reference_lists_no_key_that_does_not_exist() -> None:
    text = read("configuration.md")
    reference = "\n".join(
        body for heading, body in sections(text, "## ").items() if heading in ("Core keys", "Plugin sections")
    )
    known = [key_pattern(key) for _, model, prefix in section_models() for key in config_keys(model, prefix)]
    stale = [
        key
        for row in table_rows(reference)
        for key in ticked(row[0])[:1]
        if not any(pattern.fullmatch(f"`{key}`") for pattern in known)
    ]
    assert not stale, f"docs/configuration.md documents keys no model declares: {stale}"


# ------------------------------------------------------------------------------------------- example plugin


def titled_blocks(text: str) -> dict[str, str]:
    blocks = {}
    for info, code in code_blocks(text):
        title = re.search(r'title="([^"]+)"', info)
        if title:
            blocks[title[1]] = code
    return blocks


def test_plugin_guide_quotes_the_example_plugin_exactly() -> None:
    blocks = titled_blocks(read("plugins/writing-a-plugin.md"))
    quoted = {path: code for path, code in blocks.items() if path.startswith("examples/")}
    example_files = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "examples/the-loop-hello").rglob("*")
        if path.suffix in (".py", ".toml") and path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    assert set(quoted) == example_files, f"quoted {sorted(quoted)}, example has {sorted(example_files)}"
    stale = [path for path, code in quoted.items() if (ROOT / path).read_text(encoding="utf-8") != code]
    assert not stale, f"docs/plugins/writing-a-plugin.md quotes an outdated copy of: {stale}"


def test_plugin_guide_tests_pass(tmp_path: Path) -> None:
    """The guide's test module is real: it runs green against the installed example plugin."""
    code = titled_blocks(read("plugins/writing-a-plugin.md"))["tests/test_hello.py"]
    (tmp_path / "test_hello.py").write_text(code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "the_loop.testing", "-p", "no:cacheprovider", "-q", "test_hello.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b[1-9]\d* passed", result.stdout)


# ----------------------------------------------------------------------------------------------------- links


@pytest.mark.parametrize("page", sorted(str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *DOCS.rglob("*.md")]))
def test_relative_links_resolve(page: str) -> None:
    source = ROOT / page
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code(source.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (source.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page}: links to missing files: {broken}"


def test_the_toolkit_table_lists_every_name_and_each_name_resolves() -> None:
    """docs/plugins/index.md's toolkit table is the plugin API's list: every exported name is in it, nothing else,
    and each one still names something in core (a moved module fails here, not in a plugin)."""
    import the_loop.toolkit as toolkit

    text = (DOCS / "plugins" / "index.md").read_text(encoding="utf-8")
    section = text.split("### The toolkit", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([A-Za-z_]+)`", row.split("|")[1])}
    assert documented == set(toolkit.EXPORTS)
    for name in toolkit.EXPORTS:
        assert getattr(toolkit, name) is not None, name
    with pytest.raises(AttributeError, match="a plugin may use"):
        toolkit.dispatcher  # noqa: B018 — not part of the toolkit


def test_every_scenario_id_family_in_a_test_name_is_in_the_tests_readme() -> None:
    """A test named `test_c10_…` points to tests/README.md: its folder and family letter have a row there."""
    table = (ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    rows: set[tuple[str, str]] = set()
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows |= {(cells[0].strip("`"), letter) for letter in re.findall(r"`([a-z])`", cells[1])}
    used: set[tuple[str, str]] = set()
    for path in [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("plugins/*/tests/test_*.py")]:
        folder = path.parent.relative_to(ROOT).as_posix()
        for letter in re.findall(r"^def test_([a-z])\d+[a-z]?_", path.read_text(encoding="utf-8"), re.M):
            used.add((folder, letter))
    assert used <= rows, sorted(used - rows)
