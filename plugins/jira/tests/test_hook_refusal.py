"""L7/L16(c) on a Jira ticket: a ``work_item_start`` hook that refuses disarms the ticket, posts one marked
explanation on it through the Jira ticketing provider, spawns nothing and settles the event ``hook-refused`` — with
the real poller daemon, the real ``jira`` library against the fake Jira, and an operator-declared ``path`` hook."""

from __future__ import annotations

import json

import yaml
from fake_jira import BOT, FakeJira
from test_end_to_end import World, world  # noqa: F401  (world: the Jira-only machine fixture)

ROSTER = """
from the_loop.lifecycle import LifecycleHooks, WorkItemStart


class Roster(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> object:
        return {"proceed": False, "reason": "not on the release roster"}
"""


def test_l16c_a_refused_start_on_a_jira_ticket_gets_one_marked_explanation_and_disarms(
    world: World,  # noqa: F811  (the fixture imported above)
    fake_jira: FakeJira,
) -> None:
    from the_loop_jira.markup import AGENT_MARKER

    hooks = world.env.config_path.parent / "hooks"
    hooks.mkdir()
    (hooks / "roster.py").write_text(ROSTER)
    config = yaml.safe_load(world.env.config_path.read_text())
    config["hooks"] = [{"name": "roster", "path": "hooks/roster.py", "on": ["work_item_start"]}]
    world.env.write_config(config)

    world.poll()  # first sight baselines the thread
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok")
    world.poll()

    assert world.local() is None and world.tmux("has-session", "-t", "loop-jira-jira_test-PROJ-12").returncode != 0
    refused = [e for e in world.events("hooks.refused") if e.get("point") == "work_item_start"]
    assert len(refused) == 1 and refused[0]["reason"] == "not on the release roster"
    settled = [e for e in world.events("dispatch.dropped") + world.events("control.rejected")]
    assert any(e.get("reason") == "hook-refused" for e in settled)
    portable = world.portable()
    assert (portable.get("control") or {}).get("command") != "start"  # disarmed: a later comment spawns nothing
    assert "lifecycle" not in portable

    posted = [c for c in fake_jira.issues["PROJ-12"].comments if c["author"]["accountId"] == BOT]
    assert len(posted) == 1
    text = json.dumps(posted[0]["body"])
    assert "not on the release roster" in text and AGENT_MARKER in text

    fake_jira.add_comment("PROJ-12", "please get going", "acc-ok")
    world.poll()
    assert world.local() is None and len(world.events("hooks.refused")) == 1  # not asked again without an arming
