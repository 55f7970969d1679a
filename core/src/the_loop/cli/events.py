"""``the-loop events``: query the decision log.

Reads ``<state.root>/logs/events.jsonl`` (or ``eventLog.path``, or ``--file``) in this process, whatever the cwd.
Lines that are not JSON objects are skipped. ``--format json`` and ``jsonl`` print the stored records unchanged;
the table is for people and is not a contract.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from the_loop import events as log
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.plugins import PluginHost

# Fields the table shows in their own columns; everything else goes into Detail as k=v.
_ENVELOPE = ("ts", "source", "level", "event", "pid", "work_item")
_COLUMNS = (("Time", 24), ("Source", 12), ("Level", 7), ("Event", 28), ("Work item", 30))


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return log.parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--since: ")) from None


@click.command()
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path), help="Read this log instead.")
@click.option("--type", "types", multiple=True, metavar="PATTERN", help="Event type glob (repeatable; any matches).")
@click.option("--work-item", metavar="REF", help="Only events about this work item.")
@click.option("--delivery-id", metavar="ID", help="Only events of this delivery.")
@click.option("--source", metavar="NAME", help="Only events written by this source (see --types).")
@click.option("--level", type=click.Choice(log.LEVELS), help="Minimum level.")
@click.option("--since", callback=_since, metavar="WHEN", help="Relative (30s, 15m, 2h, 1d) or an ISO-8601 time.")
@click.option("--limit", type=click.IntRange(min=0), default=50, show_default=True, help="Newest N (0 = all).")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "jsonl"]),
    default="table",
    show_default=True,
    help="json: one array; jsonl: the stored lines as they are.",
)
@click.option("--follow", is_flag=True, help="Keep printing matching events as they are appended (Ctrl-C stops).")
@click.option("--types", "list_types", is_flag=True, help="List every event type and the known sources.")
@click.pass_context
def events(
    ctx: click.Context,
    file: Path | None,
    types: tuple[str, ...],
    work_item: str | None,
    delivery_id: str | None,
    source: str | None,
    level: str | None,
    since: float | None,
    limit: int,
    output_format: str,
    follow: bool,
    list_types: bool,
) -> None:
    """Query the decision log (events.jsonl)."""
    if list_types:
        _print_catalog(app(ctx).host, output_format)
        return
    if follow and output_format == "json":
        raise click.UsageError("--follow streams records; use --format table or jsonl")
    path = file if file is not None else app(ctx).layout().events_path
    flt = log.EventFilter(
        types=types, work_item=work_item, delivery_id=delivery_id, source=source, level=level, since=since
    )
    if follow:
        _follow(path, flt, output_format)
        return

    found = log.read_events(path, flt, limit)
    out = sys.stdout.buffer
    if output_format == "jsonl":
        out.writelines(raw + b"\n" for raw, _ in found)
    elif output_format == "json":
        # The stored lines are JSON objects already: joining them keeps each record exactly as written.
        out.write(b"[\n" + b",\n".join(raw for raw, _ in found) + b"\n]\n" if found else b"[]\n")
    else:
        out.write(_header().encode())
        out.writelines(_row(record).encode() for _, record in found)
    out.flush()
    if not found:
        print("(no matching events)", file=sys.stderr)


def _follow(path: Path, flt: log.EventFilter, output_format: str) -> None:
    import signal

    # Ctrl-C is how --follow ends, even when this process was started with SIGINT ignored (a parent's setting).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stream = log.follow(path, flt)  # the starting point is taken here, before anything is printed
    out = sys.stdout.buffer
    if output_format == "table":
        out.write(_header().encode())
        out.flush()
    try:
        for raw, record in stream:
            out.write(raw + b"\n" if output_format == "jsonl" else _row(record).encode())
            out.flush()
    except KeyboardInterrupt:
        return  # Ctrl-C is how --follow ends: exit 0


def _header() -> str:
    return "  ".join(name.ljust(width) for name, width in _COLUMNS) + "  Detail\n"


def _row(record: dict[str, Any]) -> str:
    cells = [record.get(key, "") for key in ("ts", "source", "level", "event", "work_item")]
    if not cells[4] and isinstance(record.get("work_items"), list):
        cells[4] = ",".join(map(str, record["work_items"]))
    detail = " ".join(
        f"{key}={_value(value)}" for key, value in record.items() if key not in _ENVELOPE and key != "work_items"
    )
    columns = "  ".join(str(cell).ljust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))
    return f"{columns}  {detail}".rstrip() + "\n"


def _value(value: Any) -> str:
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value).replace("\n", "\\n")  # one record, one row


def _print_catalog(host: PluginHost, output_format: str) -> None:
    catalog: dict[str, str] = {}
    for event_type in host.event_types():  # core's types come through its built-in plugin, first
        catalog.setdefault(event_type.name, event_type.description)
    if output_format == "table":
        width = max(map(len, catalog), default=0)
        for name in sorted(catalog):
            click.echo(f"{name.ljust(width)}  {catalog[name]}")
        click.echo(f"\nSources (--source accepts any string): {', '.join(log.SOURCES)}")
    else:
        document = {
            "eventTypes": [{"name": name, "description": catalog[name]} for name in sorted(catalog)],
            "sources": list(log.SOURCES),
        }
        if output_format == "json":
            click.echo(json.dumps(document, indent=2))
        else:
            for entry in document["eventTypes"]:
                click.echo(json.dumps(entry))
    sys.stdout.flush()
