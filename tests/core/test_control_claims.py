"""``local/control-deliveries.json``: a control command two ingresses deliver executes once (J20, seed 004)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

from the_loop.control import claims as control_claims
from the_loop.state import StateLayout


def layout(tmp_path: Path) -> StateLayout:
    return StateLayout(root=tmp_path)


def test_claim_once_then_already_claimed(tmp_path: Path) -> None:
    state = layout(tmp_path)
    assert control_claims.claim(state, "jira-comment-jira.test-10012")
    assert not control_claims.claim(state, "jira-comment-jira.test-10012")
    path = tmp_path / "local" / "control-deliveries.json"
    assert json.loads(path.read_text()) == {"deliveries": ["jira-comment-jira.test-10012"]}
    assert os.stat(f"{path}.lock").st_mode & 0o777 == 0o600


def test_keeps_the_newest_256(tmp_path: Path) -> None:
    state = layout(tmp_path)
    for n in range(300):
        control_claims.claim(state, f"k-{n}")
    kept = control_claims.claimed(state)
    assert len(kept) == 256 and kept[0] == "k-44" and kept[-1] == "k-299"


def test_a7_r2_2_release_lets_a_failed_command_retry(tmp_path: Path) -> None:
    state = layout(tmp_path)
    assert control_claims.claim(state, "k")
    control_claims.release(state, "k")
    assert control_claims.claimed(state) == []
    assert control_claims.claim(state, "k")


def test_unreadable_file_reads_as_empty(tmp_path: Path) -> None:
    state = layout(tmp_path)
    path = tmp_path / "local" / "control-deliveries.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert control_claims.claim(state, "k")
    assert control_claims.claimed(state) == ["k"]


def _race(root: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(control_claims.claim(StateLayout(root=Path(root)), "shared"))


def test_two_processes_claim_one_key_once(tmp_path: Path) -> None:
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    workers = [multiprocessing.Process(target=_race, args=(str(tmp_path), queue)) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert sorted(queue.get(timeout=5) for _ in workers) == [False] * 5 + [True]


def test_the_entry_that_claimed_may_claim_again_after_a_crash_but_another_delivery_may_not(tmp_path: Path) -> None:
    """A process killed mid-command leaves the claim behind; the same inbox entry's retry after the restart must
    still run the command (a repeat beats a lost one), while the other ingress's delivery of the key stays a repeat."""
    layout = StateLayout(tmp_path)
    key = "jira-comment-jira.test-10012"
    assert control_claims.claim(layout, key, "0001-poll-entry.json")
    assert control_claims.claim(layout, key, "0001-poll-entry.json")  # the retry of the interrupted entry
    assert not control_claims.claim(layout, key, "0002-webhook-entry.json")
    assert not control_claims.claim(layout, key)  # no holder named: never the same delivery
    data = json.loads((tmp_path / "local" / "control-deliveries.json").read_text())
    assert data == {"deliveries": [key], "holders": {key: "0001-poll-entry.json"}}
