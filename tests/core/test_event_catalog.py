"""Every event type the code emits is in the merged catalog (core + every installed plugin's ``loop_event_types``).

The scan reads the source with ``ast`` (not a regex), so hyphenated names count, and it refuses a type computed at
run time unless it is a module-level string constant, which the catalog check then covers too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from the_loop.events import CORE_EVENT_TYPES
from the_loop.plugins import PluginHost

REPO = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = [REPO / "core" / "src", *sorted(REPO.glob("plugins/*/src")), *sorted(REPO.glob("examples/*/src"))]
NAME = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+$")


def merged_catalog() -> list[str]:
    """Every declared name, duplicates kept: core's (through its built-in plugin) and every installed plugin's."""
    names = [event_type.name for event_type in PluginHost.create().event_types()]
    assert {event_type.name for event_type in CORE_EVENT_TYPES} <= set(names)
    return names


def _is_emit(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "emit"
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "emit"
        and isinstance(func.value, ast.Name)
        and (func.value.id in ("events", "log"))
    )


def _module_constants(tree: ast.Module) -> dict[str, str]:
    constants: dict[str, str] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        constants.update((t.id, value.value) for t in targets if isinstance(t, ast.Name))
    return constants


def emitted_types(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line, type) for every emit call in ``path``, and (line, source) for each whose type cannot be known."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    constants = _module_constants(tree)
    found: list[tuple[int, str]] = []
    unknown: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_emit(node)):
            continue
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "event"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node.lineno, arg.value))
        elif isinstance(arg, ast.Name) and arg.id in constants:
            found.append((node.lineno, constants[arg.id]))
        else:
            unknown.append((node.lineno, ast.unparse(arg) if arg is not None else "(no type)"))
    return found, unknown


def source_files() -> list[Path]:
    return [path for root in SOURCE_ROOTS for path in sorted(root.rglob("*.py"))]


def test_the_scan_covers_core_plugins_and_examples() -> None:
    files = {path.relative_to(REPO).parts[0] for path in source_files()}
    assert files == {"core", "plugins", "examples"}
    assert any(path.name == "cli.py" and "the_loop_hello" in path.parts for path in source_files())


def test_every_emitted_event_type_is_in_the_catalog() -> None:
    catalog = set(merged_catalog())
    missing: list[str] = []
    computed: list[str] = []
    emitted: set[str] = set()
    for path in source_files():
        found, unknown = emitted_types(path)
        where = path.relative_to(REPO)
        missing.extend(f"{where}:{line}: {name}" for line, name in found if name not in catalog)
        computed.extend(f"{where}:{line}: emit({source}, …)" for line, source in unknown)
        emitted.update(name for _, name in found)
    assert not missing, "emitted but not in any catalog (add an EventType):\n" + "\n".join(missing)
    assert not computed, "event type not a literal or module-level constant:\n" + "\n".join(computed)
    assert {"state.quarantined", "config.migrated", "hello.said"} <= emitted  # the scan really sees emits


def test_catalog_names_are_unique_and_well_formed() -> None:
    names = merged_catalog()
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"declared more than once: {duplicates}"
    assert [name for name in names if not NAME.match(name)] == []


@pytest.mark.parametrize(
    ("source", "expected", "rejected"),
    [
        ('events.emit("config.reload-failed")\n', ["config.reload-failed"], []),
        ('emit(event="a.b", level="info")\n', ["a.b"], []),
        ('KIND = "x.y"\n\ndef f():\n    events.emit(KIND)\n', ["x.y"], []),
        ("def f(kind):\n    events.emit(kind)\n", [], ["kind"]),
        ('def f(n):\n    emit(f"x.{n}")\n', [], ["f'x.{n}'"]),
        ("logging.Handler().emit(record)\n", [], []),
    ],
    ids=["hyphen", "keyword", "constant", "variable", "computed", "other-emit"],
)
def test_the_scanner_itself(tmp_path: Path, source: str, expected: list[str], rejected: list[str]) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)

    found, unknown = emitted_types(module)

    assert [name for _, name in found] == expected
    assert [text for _, text in unknown] == rejected
