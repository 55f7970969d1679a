"""``local/control-deliveries.json`` when it misbehaves (J20; the ordinary cases are in
``tests/core/test_control_claims.py``): the claim leans towards executing — a repeated command beats a lost one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from the_loop import events
from the_loop.control import claims as control_claims
from the_loop.state import StateLayout
from the_loop.testing import LoopEnv

KEY = "jira-comment-jira.test-10012"


def layout(env: LoopEnv) -> StateLayout:
    events.configure(env.root / "logs" / "events.jsonl", "poller", enabled=True)
    return StateLayout(root=env.root)


def test_j20_a_failed_write_is_logged_and_the_claim_granted(loop_env: LoopEnv, mocker: Any) -> None:
    state = layout(loop_env)
    mocker.patch.object(control_claims, "atomic_write_json", side_effect=OSError(28, "No space left on device"))
    assert control_claims.claim(state, KEY) is True
    failed = [e for e in loop_env.events() if e["event"] == "control.claim_failed"]
    assert failed and "No space left" in failed[0]["error"]


def test_j20_no_lock_to_be_had_still_grants_the_claim(loop_env: LoopEnv) -> None:
    state = layout(loop_env)
    Path(f"{state.local_dir / 'control-deliveries.json'}.lock").mkdir(parents=True)  # cannot be opened
    assert control_claims.claim(state, KEY) is True
    control_claims.release(state, KEY)
    assert [e["event"] for e in loop_env.events()].count("control.claim_failed") == 2
