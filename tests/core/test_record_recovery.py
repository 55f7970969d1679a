"""Issue 16 (10): a corrupt session record for a live work item loses none of its events (real tmux, real files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.testing.conformance import REF, FakeHarnessKit, Rig, rig_for


@pytest.fixture
def rig(tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any) -> Iterator[Rig]:
    yield from rig_for(FakeHarnessKit(tmp_path), tmp_path, plugin_host, monkeypatch, request)


def test_a_corrupt_record_is_moved_aside_and_the_live_session_found_by_its_name_gets_every_event(rig: Rig) -> None:
    assert rig.dispatch("Start here.", spawn=True).status == "spawned"
    rig.wait_received("Start here.")
    target = rig.own().tmux_target
    path = rig.dispatcher.registry.path(REF)
    path.write_text("{not json")

    first = rig.dispatch("An authorized comment, the item still armed.", spawn=True)
    second = rig.dispatch("Another authorized comment.")

    assert (first.status, second.status) == ("delivered", "delivered"), (first, second)
    wanted = ["An authorized comment, the item still armed.", "Another authorized comment."]
    # "delivered" means pasted and submitted; the model's request follows a moment later.
    rig.wait_for(lambda requests: [texts[-1] for texts in requests if texts][-2:] == wanted)
    assert len(rig.kit.requests()) == 3 and rig.runner.list_sessions() == [target]  # the same agent, no second
    [moved] = path.parent.glob(f"{path.name}.corrupt-*")
    assert moved.read_text() == "{not json"  # reported and kept, never overwritten
    [recovered] = rig.events("session.record_recovered")
    assert recovered["tmux_target"] == target and recovered["moved_to"] == str(moved)
    assert rig.own().tmux_target == target and rig.own().status == "active"
