"""The catalog behind the web control plane's lists (``sessions.standing.Catalog``): it sees every work item with a
portable or a session record, follows every atomic write at once, an edit in place within its rescan interval, and
a removal; rows carry the state ``check`` would name and the open question."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from the_loop.config import load_config
from the_loop.sessions.standing import RESCAN_SECONDS, Catalog
from the_loop.testing import LoopEnv


def write(path: Any, data: dict[str, Any]) -> None:
    """Atomically, as the-loop writes a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def control(command: str) -> dict[str, str]:
    return {"command": command, "source": "github", "actor": "octocat", "requestedAt": "2026-12-01T10:00:00Z"}


def session(ref: str, status: str = "active", **extra: Any) -> dict[str, Any]:
    endpoint = {"harness": "fake", "status": status, "tmuxTarget": "loop-x", "lastEventAt": "2026-12-01T10:00:00Z"}
    return {"version": 2, "workItem": ref, "sessions": {ref: endpoint}, **extra}


def test_rows_follow_writes_edits_in_place_and_removals(loop_env: LoopEnv, plugin_host: Any) -> None:
    loop_env.write_config({"version": "0.12.0"})
    config = load_config(loop_env.config_path, plugin_host)
    portable, local = loop_env.root / "portable", loop_env.root / "local"
    write(portable / "github-octo-repo-1.json", {"ref": "github:octo/repo#1", "control": control("start")})
    write(local / "github-octo-repo-2.json", session("github:octo/repo#2"))
    catalog = Catalog(config)
    states = {row["workItem"]: row["state"] for row in catalog.rows()}
    assert states == {"github:octo/repo#1": "armed", "github:octo/repo#2": "running"}

    time.sleep(0.1)  # past the settle window: the next unchanged listing is answered from memory
    write(portable / "github-octo-repo-1.json", {"ref": "github:octo/repo#1", "control": control("pause")})
    question = {"id": "q1", "text": "which?", "askedAt": "2026-12-01T10:05:00Z", "commentId": "7"}
    write(local / "github-octo-repo-2.json", session("github:octo/repo#2", question=question))
    rows = {row["workItem"]: row for row in catalog.rows()}
    assert rows["github:octo/repo#1"]["state"] == "paused"
    assert rows["github:octo/repo#2"]["question"] == question

    # An editor writing in place does not touch the directory: it is seen within the rescan interval.
    time.sleep(0.1)
    path = portable / "github-octo-repo-1.json"
    with path.open("r+") as handle:
        handle.write(json.dumps({"ref": "github:octo/repo#1", "control": control("stop")}))
        handle.truncate()
    time.sleep(RESCAN_SECONDS + 0.1)
    assert {row["workItem"]: row["state"] for row in catalog.rows()}["github:octo/repo#1"] == "disarmed"

    path.unlink()
    assert [row["workItem"] for row in catalog.rows()] == ["github:octo/repo#2"]


def test_files_that_are_no_records_are_left_out(loop_env: LoopEnv, plugin_host: Any) -> None:
    loop_env.write_config({"version": "0.12.0"})
    config = load_config(loop_env.config_path, plugin_host)
    portable = loop_env.root / "portable"
    write(portable / "github-octo-repo-1.json", {"ref": "github:octo/repo#1", "control": control("start")})
    (portable / "github-octo-repo-3.json").write_text("{broken")
    write(portable / "index.json", {"workItems": []})
    write(portable / "github-octo-repo-4.json", {"no": "ref"})
    assert [row["workItem"] for row in Catalog(config).rows()] == ["github:octo/repo#1"]
