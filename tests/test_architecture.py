"""The shape of the code, as issue 17 left it: what lint-imports does not check on its own.

- no source module over 600 lines;
- the plugin host is built only where the CLI builds it; everything else asks ``config.host``;
- no import cycle among core's modules, counting type-only and function-local imports.
"""

from __future__ import annotations

import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "core" / "src", *sorted(ROOT.glob("plugins/*/src"))]
MAX_LINES = 600
# Where `get_host()` may be called: its definition, the CLI's app context, and the --help cache when it misses.
HOST_BUILDERS = {"the_loop/plugins.py", "the_loop/command.py", "the_loop/cli/plugin_commands.py"}


def _modules() -> list[tuple[Path, Path]]:
    return [(source, path) for source in SOURCES for path in sorted(source.rglob("*.py"))]


def test_no_source_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for _, path in _modules()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_plugin_host_is_built_only_by_the_cli() -> None:
    calls = {
        str(path.relative_to(source))
        for source, path in _modules()
        if re.search(r"\bget_host\(", path.read_text(encoding="utf-8"))
    }
    assert calls <= HOST_BUILDERS, sorted(calls - HOST_BUILDERS)


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle() -> None:
    graph = grimp.build_graph("the_loop", exclude_type_checking_imports=False, cache_dir=None)
    assert _cycles(graph) == []
