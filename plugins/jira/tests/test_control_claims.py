"""``local/control-deliveries.json`` when it misbehaves (J20; the ordinary cases are in
``tests/core/test_control_claims.py``): the claim leans towards executing — a repeated command beats a lost one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jira_world import JiraWorld

from the_loop.control import claims as control_claims

KEY = "jira-comment-jira.test-10012"


def test_j20_a_failed_write_is_logged_and_the_claim_granted(world: JiraWorld, mocker: Any) -> None:
    state = world.load().state
    mocker.patch.object(control_claims, "atomic_write_json", side_effect=OSError(28, "No space left on device"))
    assert control_claims.claim(state, KEY) is True
    failed = world.events("control.claim_failed")
    assert failed and "No space left" in failed[0]["error"]


def test_j20_no_lock_to_be_had_still_grants_the_claim(world: JiraWorld) -> None:
    state = world.load().state
    Path(f"{state.local_dir / 'control-deliveries.json'}.lock").mkdir(parents=True)  # cannot be opened
    assert control_claims.claim(state, KEY) is True
    control_claims.release(state, KEY)
    assert len(world.events("control.claim_failed")) == 2
