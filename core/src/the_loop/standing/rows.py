"""The rows ``standing list`` prints: the definition, the record and tmux's answer (not the file's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop.standing import REF_PREFIX, all_names, load_record, resolve, tmux_name

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.sessions.tmux import TmuxRunner


def rows(config: LoadedConfig, runner: TmuxRunner) -> list[dict[str, Any]]:
    found = []
    live = runner.probe_all() or {}
    for name in all_names(config):
        definition = resolve(config, name)
        record = load_record(config, name) or {}
        target = tmux_name(name)
        found.append(
            {
                "name": name,
                "declared": bool(definition and definition.declared),
                "description": definition.description if definition else "",
                "autoStart": definition.auto_start if definition else True,
                "harness": definition.harness if definition else record.get("harness", ""),
                "cwd": record.get("cwd") or (definition.cwd if definition else ""),
                "tmuxTarget": target,
                "ref": f"{REF_PREFIX}{name}",
                "status": record.get("status") or "absent",
                "running": live.get(target) == "live",
                "harnessSessionId": record.get("harnessSessionId"),
                "slackChannel": record.get("slackChannel"),
                "slackThread": record.get("slackThread"),
                "startedAt": record.get("startedAt"),
                "lastMessageAt": record.get("lastMessageAt"),
            }
        )
    return found


def counts(config: LoadedConfig, runner: TmuxRunner) -> tuple[int, int]:
    """(running, declared) for ``the-loop status``."""
    from the_loop.standing import declared

    names = [definition.name for definition in declared(config)]
    live = runner.probe_all() or {}
    return sum(1 for name in names if live.get(tmux_name(name)) == "live"), len(names)
