"""``the-loop migrate-config``: rewrite retired config keys in place.

The file is edited through ruamel.yaml's round-trip loader, so the operator's comments and key order survive.
It never loads the config the normal way — a config with retired keys is exactly what that refuses. A real run
keeps the old text in ``<file>.bak`` and replaces the file atomically; running it again changes nothing.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import click

from the_loop.command import config_path_option, target_config_path


@click.command()
@config_path_option("The config file to migrate")
@click.option("--dry-run", is_flag=True, help="Print the changes and the migrated YAML; write nothing.")
@click.pass_context
def migrate_config(ctx: click.Context, target: Path | None, dry_run: bool) -> None:
    """Rewrite retired config keys in place."""
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    from the_loop.config.migrations import CURRENT_CONFIG_VERSION, apply_rules

    path = target_config_path(ctx, target)
    old_text = _read(path)
    yaml = _round_trip()
    doc = _parse(yaml, old_text, path)
    old_version = doc.get("version")

    changes = apply_rules(doc)
    if not changes:
        click.echo("config is already current; nothing to migrate")
        return
    if old_version is None:
        del doc["version"]
        doc.insert(0, "version", None)  # a version the file never had goes first, not last
    doc["version"] = DoubleQuotedScalarString(CURRENT_CONFIG_VERSION)

    was = f" {old_version}" if old_version not in (None, "", CURRENT_CONFIG_VERSION) else ""
    report = [f"{c.key} → {c.replacement}" for c in changes if not c.key.startswith("version ")]
    report.append(f"version{was} → {CURRENT_CONFIG_VERSION}")
    click.echo(f"{path}: {'would make' if dry_run else 'making'} {len(report)} change(s)")
    for line in report:
        click.echo(f"  {line}")

    buffer = io.StringIO()
    yaml.dump(doc, buffer)
    new_text = buffer.getvalue()
    if dry_run:
        click.echo(f"\n# {path} after migration (not written):")
        click.echo(new_text, nl=False)
        return

    _write(path, old_text, new_text)
    click.echo(f"wrote {path} (the old text is in {path.name}.bak)")
    _log_migration(path, doc, [change.key for change in changes])


def _round_trip() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments, key order and quoting are kept
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a long line the operator wrote
    return yaml


def _read(path: Path) -> str:
    from the_loop.config import ConfigError

    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; nothing to migrate") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _parse(yaml: Any, text: str, path: Path) -> Any:
    from collections.abc import MutableMapping

    from ruamel.yaml.error import YAMLError

    from the_loop.config import ConfigError

    try:
        doc = yaml.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}:{where} {problem}") from None
    if doc is None:
        from ruamel.yaml.comments import CommentedMap

        return CommentedMap()
    if not isinstance(doc, MutableMapping):
        raise ConfigError(f"{path}: the document must be a mapping of keys, not {type(doc).__name__}")
    return doc


def _write(path: Path, old_text: str, new_text: str) -> None:
    import stat

    from the_loop.state import atomic_write_bytes

    mode = stat.S_IMODE(os.stat(path).st_mode)
    atomic_write_bytes(path.with_name(path.name + ".bak"), old_text.encode("utf-8"), mode=mode)
    atomic_write_bytes(path, new_text.encode("utf-8"), mode=mode)


def _log_migration(path: Path, doc: Any, keys: list[str]) -> None:
    """Append ``config.migrated`` to the log the migrated config points at (read from the doc itself)."""
    from the_loop import events
    from the_loop.config import state_root_for
    from the_loop.state import StateLayout

    state = doc.get("state")
    root = state.get("root") if isinstance(state, dict) else None
    log = doc.get("eventLog")
    log = log if isinstance(log, dict) else {}
    layout = StateLayout(
        root=state_root_for(path, root if isinstance(root, str) else ".the-loop"),
        event_log=log.get("path") if isinstance(log.get("path"), str) else "",
    )
    events.configure(layout.events_path, "cli", enabled=log.get("enabled") is not False)
    events.emit("config.migrated", path=str(path), keys=keys, version=doc.get("version"))
