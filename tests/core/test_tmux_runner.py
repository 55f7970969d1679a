"""The tmux runner on a real, private tmux server with the fake harness TUI (spec C §2.1-§2.5, R1-R21, R27).

Scenario ids are the runner's share of C1-C22; the registry/dispatcher halves of those scenarios are tested with
the dispatcher.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from the_loop.sessions.tmux import DeliveryError, SpawnError, TargetError, TmuxRunner, tmux_target
from the_loop.testing import wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.shim import TmuxShim, split_commands, violations

TOKEN = "ghp_not-a-real-token-0123456789"


def tmux(runner: TmuxRunner, *args: str) -> subprocess.CompletedProcess[str]:
    """The real tmux on the runner's server, for setting a scene and looking at it (never through the runner)."""
    return subprocess.run(
        ["tmux", "-L", str(runner.socket), *args], capture_output=True, text=True, timeout=10, check=False
    )


def start(
    runner: TmuxRunner, fake: FakeHarness, target: str, cwd: Path, env: dict[str, str] | None = None, **argv: str
) -> str:
    """Spawn the fake in ``target`` and wait until tmux shows its prompt (bracketed paste is on by then)."""
    result = runner.spawn(target, cwd, fake.argv(**argv), env=env)
    assert result.spawned, result
    fake.wait_ready(len(fake.records("ready")) + 1, screen=lambda: runner.capture(result.target))
    return result.target


def occupy(runner: TmuxRunner, target: str, argv: list[str], cwd: Path) -> None:
    """Start a session the way a human would, with plain tmux (remain-on-exit on, as the-loop leaves it)."""
    made = tmux(
        runner, "new-session", "-d", "-s", target, "-c", str(cwd), "--", *argv,
        ";", "set-option", "-t", f"={target}:", "-w", "remain-on-exit", "on",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie tmux has yet to reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return not state.stdout.strip().startswith("Z")


# ------------------------------------------------------------------------------------------------ names


def test_r2_tmux_target_is_spelled_as_tmux_spells_it() -> None:
    assert tmux_target("loop-github-ghe.corp.example-octo-repo-15") == "loop-github-ghe_corp_example-octo-repo-15"
    assert tmux_target("loop-github-octo-repo-15") == "loop-github-octo-repo-15"
    assert tmux_target("loop-standing-triage") == "loop-standing-triage"


@pytest.mark.parametrize("bad", ["work", "loop-", "loop-a;kill-server", "loop-a b", "-t", "loop-a/b", "xloop-a"])
def test_r5_non_loop_targets_are_refused_before_any_tmux_call(tmux_shim: TmuxShim, tmp_path: Path, bad: str) -> None:
    runner = tmux_shim.runner()
    for call in (
        lambda: runner.probe(bad),
        lambda: runner.spawn(bad, tmp_path, ["sleep", "1"]),
        lambda: runner.deliver(bad, "hi"),
        lambda: runner.kill(bad),
        lambda: runner.terminate_harness(bad, 0),
        lambda: runner.capture(bad),
    ):
        with pytest.raises(TargetError):
            call()
    assert tmux_shim.calls() == []


# ------------------------------------------------------------------------------------------------ spawn


def test_c1_spawn_runs_the_harness_argv_exactly_in_cwd_without_a_shell(
    tmux_shim: TmuxShim, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    runner = tmux_shim.runner()
    cwd = tmp_path / "checkout #1; {x}"
    cwd.mkdir()
    # Words tmux or a shell would otherwise rewrite: a trailing ';' ends a tmux command, '#{…}' is a format.
    nasty = ["x;", "kill-server", "{", "}", "$HOME", "#{pane_id}", "a\\;", ";", "", "two\nlines", "*"]
    prompt = "work on github:octo/repo#15; then stop;"
    result = runner.spawn(
        "loop-github-octo-repo-15", cwd, fake_harness.argv(session_id="u-1", prompt=prompt, extra=nasty)
    )
    assert result.spawned and result.target == "loop-github-octo-repo-15"
    (start_record,) = fake_harness.wait_for("start")
    assert start_record["argv"][-len(nasty) - 1 :] == [*nasty, prompt]
    assert start_record["cwd"] == str(cwd)
    assert fake_harness.wait_for_submitted(1) == [prompt]
    # No shell between tmux and the harness: the pane's own pid is the harness (env execs it).
    panes = tmux(runner, "list-panes", "-s", "-t", "=loop-github-octo-repo-15", "-F", "#{pane_pid}").stdout.split()
    assert panes == [str(start_record["pid"])]
    # One tmux invocation: new-session with remain-on-exit chained, after one probe.
    assert tmux_shim.subcommands()[-1] == ["new-session", "set-option"]
    (new_session,) = [c for c in tmux_shim.calls() if "new-session" in c]
    command = split_commands(new_session)[0]
    assert command[command.index("--") + 1] == "env"
    assert violations(tmux_shim.calls()) == []
    assert "loop-github-octo-repo-15" in runner.list_sessions()


def test_r9_remain_on_exit_is_set_in_the_same_invocation_so_an_instant_exit_leaves_a_dead_pane(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    result = tmux_runner.spawn("loop-x-1", tmp_path, fake_harness.argv(extra=["--exit-at-start", "3"]))
    assert result.spawned
    assert fake_harness.wait_for("exit")[0]["status"] == 3
    assert wait_for(lambda: tmux_runner.probe("loop-x-1") == "dead")
    assert tmux(tmux_runner, "show-options", "-w", "-t", "=loop-x-1:", "remain-on-exit").stdout.strip() == (
        "remain-on-exit on"
    )


def test_spawn_refuses_a_missing_working_directory(tmux_shim: TmuxShim, tmp_path: Path) -> None:
    # tmux itself would silently start the harness somewhere else.
    with pytest.raises(SpawnError, match="working directory does not exist"):
        tmux_shim.runner().spawn("loop-x-1", tmp_path / "missing", ["sleep", "5"])
    assert tmux_shim.count("new-session") == 0


def test_spawn_without_tmux_raises(tmp_path: Path) -> None:
    runner = TmuxRunner(socket="the-loop-test-none", binary=str(tmp_path / "no-tmux"))
    with pytest.raises(SpawnError, match="did not answer"):
        runner.spawn("loop-x-1", tmp_path, ["sleep", "5"])


# ------------------------------------------------------------------------------------------------ probe


def test_r13_probe_tells_live_dead_and_absent(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    assert tmux_runner.probe("loop-x-15") == "absent"  # no server at all
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    assert tmux_runner.probe(target) == "live"
    # Exact names only: -t loop-x-1 would match loop-x-15 by prefix.
    assert tmux_runner.probe("loop-x-1") == "absent"
    assert tmux_runner.probe("loop-x") == "absent"
    tmux_runner.deliver(target, "/exit 0")
    assert wait_for(lambda: tmux_runner.probe(target) == "dead")


def test_r13_probe_unknown_when_the_binary_is_missing(tmp_path: Path) -> None:
    assert TmuxRunner(socket="the-loop-test-none", binary=str(tmp_path / "nope")).probe("loop-x-1") == "unknown"


def test_c13_probe_unknown_on_timeout_and_unknown_never_kills(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    (occupant,) = fake_harness.records("start")
    runner = tmux_shim.runner(timeout=0.3)
    tmux_shim.set_faults(delay={"has-session": [2, -1]})
    assert runner.probe(target) == "unknown"
    tmux_shim.clear_log()
    # A spawn on an unanswered probe lets new-session decide; it says duplicate, the re-probe is unanswered
    # again, and the name is left alone.
    result = runner.spawn(target, tmp_path, fake_harness.argv(session_id="new"))
    assert not result.spawned and result.occupant == "unknown"
    assert "kill-session" in result.remedy and "attach -r" in result.remedy
    assert tmux_shim.count("kill-session") == 0
    assert tmux_shim.count("new-session") == 1
    assert tmux_shim.count("has-session") == 2
    # A delivery while the probe hangs still reaches the pane (R14: unknown is treated as live).
    runner.deliver(target, "still here")
    assert fake_harness.wait_for_submitted(1) == ["still here"]
    assert alive(occupant["pid"])
    assert len(fake_harness.records("start")) == 1


def test_killed_server_probes_absent(tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    assert tmux(tmux_runner, "kill-server").returncode == 0
    assert tmux_runner.probe(target) == "absent"
    with pytest.raises(DeliveryError) as caught:
        tmux_runner.deliver(target, "hello")
    assert caught.value.reason == "session_missing" and not caught.value.transient


# ------------------------------------------------------------------------------------------------ deliver


def test_c4_multiline_prompt_is_one_bracketed_paste_after_the_humans_draft_and_one_submission_in_one_tmux_call(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    # A human left unsent text on the input line.
    assert tmux(tmux_runner, "send-keys", "-t", f"={target}:", "-l", "junk").returncode == 0
    wait_for(lambda: "junk" in tmux_runner.capture(target))
    runner = tmux_shim.runner()
    prompt = "New comment on github:octo/repo#15:\n\n  please fix the test\n\x1b[201~\rsneaky\nend"
    runner.deliver(target, prompt)
    expected = "New comment on github:octo/repo#15:\n\n  please fix the test\n\nsneaky\nend"
    # The draft is kept whole, on its own line ahead of the event, and both are submitted as one turn.
    assert fake_harness.wait_for_submitted(1) == ["junk\n" + expected]
    assert [r["text"] for r in fake_harness.records("paste")] == ["\n" + expected]
    assert fake_harness.records("control") == []  # no control byte is ever pasted
    # The minimum: one tmux invocation per delivery, and nothing in it that resolves a client or runs a shell.
    assert tmux_shim.subcommands() == [["load-buffer", "set-buffer", "if-shell"]]
    assert violations(tmux_shim.calls()) == []
    assert tmux(tmux_runner, "list-buffers").stdout == ""


def test_c5_a_read_only_observer_does_not_block_delivery(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    attach = f"tmux -L {tmux_runner.socket} attach-session -r -t ={target}"
    observer = subprocess.Popen(["script", "-q", "-c", attach, "/dev/null"], stdin=subprocess.PIPE)
    try:
        wait_for(lambda: tmux(tmux_runner, "list-clients", "-F", "#{client_readonly}").stdout.strip() == "1")
        tmux_runner.deliver(target, "observed delivery")
        assert fake_harness.wait_for_submitted(1) == ["observed delivery"]
    finally:
        observer.kill()
        observer.wait(timeout=10)


def test_c6_back_to_back_deliveries_arrive_in_order_none_merged(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    texts = [f"event {i}\nline two of {i}" for i in range(20)]
    for text in texts:
        tmux_runner.deliver(target, text)
    assert fake_harness.wait_for_submitted(20) == texts
    assert len(fake_harness.records("submit")) == 20


def test_issue_277_a_session_of_no_work_item_is_hosted_by_target_alone(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    """The runner knows targets, not work items: a standing session's name spawns, takes deliveries, has its
    harness ended with the pane kept, and is killed, exactly like ``loop-<slug>``."""
    target = start(tmux_runner, fake_harness, "loop-standing-triage", tmp_path, session_id="s-1")
    tmux_runner.deliver(target, "triage the new issues")
    assert fake_harness.wait_for_submitted(1) == ["triage the new issues"]
    ended = tmux_runner.terminate_harness(target, 1.0)
    assert ended.ok and ended.terminated == (fake_harness.records("start")[0]["pid"],)
    assert tmux_runner.probe(target) == "dead"
    assert tmux_runner.kill(target) and tmux_runner.probe(target) == "absent"


def test_c7_concurrent_deliveries_to_two_panes_never_cross(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    fakes = {"loop-a-1": fake_harness, "loop-b-2": fake_harness.another()}
    for target, fake in fakes.items():
        start(tmux_runner, fake, target, tmp_path)
    errors: list[BaseException] = []

    def send(target: str) -> None:
        try:
            for i in range(50):
                tmux_runner.deliver(target, f"{target} #{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(target,)) for target in fakes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    for target, fake in fakes.items():
        assert fake.wait_for_submitted(50) == [f"{target} #{i}" for i in range(50)]
    assert tmux(tmux_runner, "list-buffers").stdout == ""


def test_c2_dotted_slug_gets_the_name_tmux_gives_it_and_works_end_to_end(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    dotted = "loop-github-ghe.corp.example-octo-repo-15"
    target = start(tmux_runner, fake_harness, dotted, tmp_path)
    assert target == "loop-github-ghe_corp_example-octo-repo-15"
    assert tmux_runner.list_sessions() == [target]
    assert tmux(tmux_runner, "has-session", "-t", target).returncode == 0  # `tmux attach -t <target>` resolves
    assert tmux_runner.probe(dotted) == "live"
    tmux_runner.deliver(dotted, "hello dots")
    assert fake_harness.wait_for_submitted(1) == ["hello dots"]
    assert tmux_runner.terminate_harness(dotted, grace_seconds=2).ok
    assert tmux_runner.probe(target) == "dead"


def test_r15c_delivery_into_a_dead_pane_is_refused_and_the_server_survives(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    # tmux 3.3a crashes its whole server on a paste into a dead pane; the runner checks at paste time.
    bystander = start(tmux_runner, fake_harness, "loop-b-2", tmp_path)
    occupy(tmux_runner, "loop-d-1", ["true"], tmp_path)
    assert wait_for(lambda: tmux_runner.probe("loop-d-1") == "dead")
    runner = tmux_shim.runner()
    with pytest.raises(DeliveryError) as caught:
        runner.deliver("loop-d-1", "into the void")
    assert caught.value.reason == "session_missing" and not caught.value.transient
    with pytest.raises(DeliveryError) as caught:
        runner.deliver("loop-gone-3", "nowhere")
    assert caught.value.reason == "session_missing"
    assert tmux_runner.probe(bystander) == "live"
    assert tmux(tmux_runner, "list-buffers").stdout == ""
    assert violations(tmux_shim.calls()) == []


def test_delivery_of_a_large_paste_is_exact(tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    text = "\n".join(f"{i:05d} ünïcode line with words; and #{{formats}} $VARS" for i in range(1200))  # ~64 KiB
    tmux_runner.deliver(target, text)
    assert fake_harness.wait_for_submitted(1, timeout=30) == [text]


# ---------------------------------------------------------------------------------------------- occupancy


def test_c15_live_occupant_is_never_killed(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupant = fake_harness.another()
    target = start(tmux_runner, occupant, "loop-x-15", tmp_path)
    result = tmux_shim.runner().spawn(target, tmp_path, fake_harness.argv(session_id="new", prompt="boot"))
    assert not result.spawned and result.occupant == "live"
    assert f"kill-session -t {target}" in result.remedy and "the-loop sessions reset" in result.remedy
    assert tmux_shim.count("kill-session") == 0 and tmux_shim.count("new-session") == 0
    assert fake_harness.records() == []  # no second harness started
    assert alive(occupant.records("start")[0]["pid"]) and occupant.submitted() == []


def test_c10_dead_occupant_is_cleared_and_respawned(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupy(tmux_runner, "loop-x-15", ["true"], tmp_path)
    wait_for(lambda: tmux_runner.probe("loop-x-15") == "dead")
    result = tmux_shim.runner().spawn("loop-x-15", tmp_path, fake_harness.argv(resume="u-1", prompt="pending event"))
    assert result.spawned
    assert fake_harness.wait_for_submitted(1) == ["pending event"]
    assert tmux_shim.subcommands() == [
        ["has-session", "list-panes"],
        ["kill-session"],
        ["new-session", "set-option"],
    ]


def test_c10_clearing_the_servers_last_session_and_spawning_again_always_spawns(
    tmux_runner: TmuxRunner, tmp_path: Path
) -> None:
    # Killing a dead pane's session when it is the server's only one shuts the server down; a new-session that
    # reaches it as it goes is answered "server exited unexpectedly" (about 1 in 20 here). CI lost a resumed
    # conversation to it: the resume "failed" and a fresh one was started.
    for attempt in range(80):
        result = tmux_runner.spawn("loop-x-15", tmp_path, ["true"])
        assert result.spawned, (attempt, result)
        wait_for(lambda: tmux_runner.probe("loop-x-15") == "dead")


def test_c16_dead_occupant_that_cannot_be_cleared_is_left_and_reported(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupy(tmux_runner, "loop-x-15", ["true"], tmp_path)
    wait_for(lambda: tmux_runner.probe("loop-x-15") == "dead")
    tmux_shim.set_faults(fail={"kill-session": -1})
    result = tmux_shim.runner().spawn("loop-x-15", tmp_path, fake_harness.argv(session_id="u-2"))
    assert not result.spawned and result.occupant == "dead"
    assert "kill-session -t loop-x-15" in result.remedy
    assert tmux_shim.count("new-session") == 0
    assert tmux_runner.probe("loop-x-15") == "dead"


def test_c16_a_kill_that_reports_failure_but_removed_the_session_counts_as_cleared(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupy(tmux_runner, "loop-x-15", ["true"], tmp_path)
    occupy(tmux_runner, "loop-keep-1", ["sleep", "60"], tmp_path)  # keeps the server up after the kill
    wait_for(lambda: tmux_runner.probe("loop-x-15") == "dead")
    tmux_shim.set_faults(fail_after={"kill-session": 1})
    result = tmux_shim.runner().spawn("loop-x-15", tmp_path, fake_harness.argv(session_id="u-2"))
    assert result.spawned
    fake_harness.wait_ready()
    assert tmux_shim.count("kill-session") == 1 and tmux_shim.count("new-session") == 1


def test_c17_duplicate_session_race_re_probes_once_and_never_kills_a_live_occupant(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupant = fake_harness.another()
    target = start(tmux_runner, occupant, "loop-x-15", tmp_path)
    tmux_shim.set_faults(fail={"has-session": 1})  # the pre-flight probe wrongly reads absent
    result = tmux_shim.runner().spawn(target, tmp_path, fake_harness.argv(session_id="new"))
    assert not result.spawned and result.occupant == "live"
    assert tmux_shim.count("new-session") == 1
    assert tmux_shim.count("has-session") == 2  # exactly one re-probe
    assert tmux_shim.count("kill-session") == 0
    assert occupant.records("start") and fake_harness.records() == []


def test_c17_duplicate_session_race_with_a_dead_occupant_spawns_on_the_second_try(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupy(tmux_runner, "loop-x-15", ["true"], tmp_path)
    wait_for(lambda: tmux_runner.probe("loop-x-15") == "dead")
    tmux_shim.set_faults(fail={"has-session": 1})
    result = tmux_shim.runner().spawn("loop-x-15", tmp_path, fake_harness.argv(session_id="new"))
    assert result.spawned
    fake_harness.wait_ready()
    assert tmux_shim.count("new-session") == 2 and tmux_shim.count("kill-session") == 1


def test_c17_duplicate_session_is_retried_at_most_once(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    occupant = fake_harness.another()
    target = start(tmux_runner, occupant, "loop-x-15", tmp_path)
    tmux_shim.set_faults(fail={"has-session": -1})  # every probe reads absent while the name is taken
    result = tmux_shim.runner().spawn(target, tmp_path, fake_harness.argv(session_id="new"))
    assert not result.spawned and result.occupant == "unknown"
    assert tmux_shim.count("new-session") == 2 and tmux_shim.count("kill-session") == 0
    assert alive(occupant.records("start")[0]["pid"])


# ----------------------------------------------------------------------------------------- environment


def test_c32_credentials_are_stripped_and_env_pairs_reach_the_harness(
    tmux_shim: TmuxShim,
    tmux_runner: TmuxRunner,
    fake_harness: FakeHarness,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server itself was started by someone holding a token, and the runner's own environment has one too.
    server = subprocess.run(
        ["tmux", "-L", str(tmux_runner.socket), "new-session", "-d", "-s", "operator", "sleep", "60"],
        env={**os.environ, "GH_TOKEN": TOKEN, "GITHUB_TOKEN": TOKEN},
        check=True,
    )
    assert server.returncode == 0
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    monkeypatch.setenv("THE_LOOP_SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("MY_API_KEY", TOKEN)
    runner = tmux_shim.runner(strip_env=[*tmux_shim.runner().strip_env, "MY_API_KEY"])
    env = {"THE_LOOP_INSTANCE": "laptop", "THE_LOOP_WORK_ITEM": "github:octo/repo#15"}
    result = runner.spawn("loop-x-15", tmp_path, fake_harness.argv(session_id="u-1"), env=env)
    assert result.spawned and result.warnings == ()
    (record,) = fake_harness.wait_for("start")
    assert record["credentials_present"] == []
    assert record["env"]["THE_LOOP_WORK_ITEM"] == "github:octo/repo#15"
    assert record["env"]["THE_LOOP_INSTANCE"] == "laptop"
    assert not any(TOKEN in word for call in tmux_shim.calls() for word in call)
    (new_session,) = [c for c in tmux_shim.calls() if "new-session" in c]
    at = new_session.index("GH_TOKEN")
    assert new_session[at - 1 : at + 1] == ["-u", "GH_TOKEN"]
    assert "MY_API_KEY" in new_session
    with pytest.raises(ValueError, match="credential"):
        runner.spawn("loop-x-16", tmp_path, ["sleep", "1"], env={"GH_TOKEN": "x"})


def test_r8_env_pairs_are_omitted_with_a_warning_before_tmux_3_2(
    tmux_shim: TmuxShim, fake_harness: FakeHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmux_shim.set_faults(version=["tmux 3.1c", -1])
    runner = tmux_shim.runner()
    result = runner.spawn("loop-x-15", tmp_path, fake_harness.argv(), env={"THE_LOOP_WORK_ITEM": "github:o/r#1"})
    assert result.spawned and "needs 3.2" in result.warnings[0]
    assert "needs 3.2" in capsys.readouterr().err
    assert "THE_LOOP_WORK_ITEM" not in fake_harness.wait_for("start")[0]["env"]
    assert not any("-e" in call for call in tmux_shim.calls())
    assert sum(call[-1] == "-V" for call in tmux_shim.calls()) == 1
    runner.spawn("loop-x-16", tmp_path, fake_harness.argv(), env={"THE_LOOP_WORK_ITEM": "github:o/r#1"})
    assert sum(call[-1] == "-V" for call in tmux_shim.calls()) == 1  # probed once per runner


# ------------------------------------------------------------------------------------------- terminate


def test_c20_terminate_harness_ends_it_and_keeps_the_pane_and_scrollback(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    tmux_runner.deliver(target, "remember this line")
    fake_harness.wait_for_submitted(1)
    tmux(tmux_runner, "set-option", "-t", f"={target}:", "-w", "remain-on-exit", "off")
    result = tmux_runner.terminate_harness(target, grace_seconds=5)
    assert result.ok and result.error is None and result.killed == ()
    assert result.terminated == (fake_harness.records("start")[0]["pid"],)
    assert fake_harness.records("signal")[0]["ignored"] is False
    assert tmux_runner.probe(target) == "dead"  # remain-on-exit was re-set first
    assert "remember this line" in tmux_runner.capture(target, history=True)


@pytest.mark.parametrize("grace", [0.5, 0])
def test_c21_a_harness_ignoring_sigterm_is_killed_after_the_grace_period(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path, grace: float
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    tmux_runner.deliver(target, "/ignore-term")
    fake_harness.wait_for_submitted(1)
    pid = fake_harness.records("start")[0]["pid"]
    began = time.monotonic()
    result = tmux_runner.terminate_harness(target, grace_seconds=grace)
    elapsed = time.monotonic() - began
    assert result.ok and result.terminated == (pid,) and result.killed == (pid,)
    assert grace <= elapsed < grace + 2
    if grace:
        assert fake_harness.records("signal")[0]["ignored"] is True  # SIGTERM came first and was ignored
    assert tmux_runner.probe(target) == "dead" and not alive(pid)


def test_c22_terminate_on_an_absent_session_is_done_and_a_dead_pane_is_not_signalled(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, tmp_path: Path
) -> None:
    runner = tmux_shim.runner()
    assert runner.terminate_harness("loop-gone-1", 0) == runner.terminate_harness("loop-gone-1", 0)
    result = runner.terminate_harness("loop-gone-1", 0)
    assert result.ok and result.error == "session_missing" and result.terminated == ()
    occupy(tmux_runner, "loop-d-1", ["true"], tmp_path)
    wait_for(lambda: tmux_runner.probe("loop-d-1") == "dead")
    result = runner.terminate_harness("loop-d-1", 0)
    assert result.ok and result.terminated == () and result.killed == ()


def test_kill_removes_the_session_and_reports_an_absent_one_as_gone(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    occupy(tmux_runner, "loop-keep-1", ["sleep", "60"], tmp_path)
    assert tmux_runner.kill(target) is True
    assert tmux_runner.probe(target) == "absent"
    assert tmux_runner.kill(target) is True
    assert tmux_runner.list_sessions() == ["loop-keep-1"]


# ------------------------------------------------------------------------------------------ test doubles


def test_fake_harness_refuses_a_resume_on_request_and_knows_its_conversations(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    state = tmp_path / "conversations"
    knobs = {"FAKE_HARNESS_STATE": str(state)}
    refused = tmux_runner.spawn("loop-r-1", tmp_path, fake_harness.argv(resume="u-1"), env=knobs)
    assert refused.spawned
    assert fake_harness.wait_for("exit")[0]["status"] == 1  # no conversation u-1 to resume
    assert wait_for(lambda: tmux_runner.probe("loop-r-1") == "dead")
    start(tmux_runner, fake_harness, "loop-r-2", tmp_path, env=knobs, session_id="u-1", prompt="first")
    assert (state / "u-1").exists()
    other = fake_harness.another()
    start(tmux_runner, other, "loop-r-3", tmp_path, env=knobs, resume="u-1")
    assert other.records("start")[0]["mode"] == "resume"
    refuse = fake_harness.another()
    env = {**knobs, "FAKE_HARNESS_REFUSE_RESUME": "1"}
    assert tmux_runner.spawn("loop-r-4", tmp_path, refuse.argv(resume="u-1"), env=env).spawned
    assert refuse.wait_for("exit")[0]["status"] == 1


def test_shim_fault_reads_panes_dead_once(
    tmux_shim: TmuxShim, tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    tmux_shim.set_faults(panes_dead=1)
    runner = tmux_shim.runner()
    assert [runner.probe(target), runner.probe(target)] == ["dead", "live"]


def test_split_commands_reads_argv_the_way_tmux_does() -> None:
    argv = ["-L", "s", "new-session", "-s", "loop-a", "--", "env", "x\\;", "y;", "kill-server", ";", "list-panes"]
    assert split_commands(argv) == [
        ["new-session", "-s", "loop-a", "--", "env", "x;", "y"],
        ["kill-server"],
        ["list-panes"],
    ]
    assert violations([["send-keys", "-t", "x", "Enter"]]) and violations([["if-shell", "true", "a"]])
    assert violations([["display-message", "-p", "hi"]]) and not violations(
        [["display-message", "-p", "-t", "x", "hi"]]
    )


def test_pane_text_for_the_event_log_has_every_credential_masked_whole_or_by_its_shown_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from the_loop.sessions.launch import redact

    key = "sk-ant-api03-" + "x" * 30 + "0123456789abcdefghij"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("GH_TOKEN", "ghp_0123456789abcdefABCDEF")
    dialog = (
        "ANTHROPIC_API_KEY: sk-ant-...0123456789abcdefghij\nGitHub: ghp_0123456789abcdefABCDEF and sk-ant-other-key"
    )
    masked = redact(dialog)
    assert "0123456789abcdefghij" not in masked and "ghp_0123456789abcdefABCDEF" not in masked
    assert "sk-ant-other-key" not in masked and "GitHub: [redacted] and [redacted]" in masked
    assert redact("nothing secret here") == "nothing secret here"


@pytest.mark.parametrize(
    "hostile",
    ["\x1b[20\x1b[201~1~", "\x1b[2\x1b[20\x1b[201~1~01~", "\x1b[20\x1b[200~0~", "a\x1b[201~\x1b[201~b"],
)
def test_a_paste_marker_rebuilt_from_its_pieces_never_ends_the_paste(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path, hostile: str
) -> None:
    """Issue 16 (12): the marker filter runs to a fixed point, so no marker is left once another is removed."""
    target = start(tmux_runner, fake_harness, "loop-x-15", tmp_path)
    tmux_runner.deliver(target, f"before {hostile} after")
    [submitted] = fake_harness.wait_for_submitted(1)
    assert submitted.startswith("before ") and submitted.endswith(" after")
    assert "\x1b[201~" not in submitted and "\x1b[200~" not in submitted
    assert len(fake_harness.records("paste")) == 1  # one paste: nothing broke out of it to be typed


def test_probe_all_answers_what_probe_answers_for_every_session_in_one_call(
    tmux_runner: TmuxRunner, fake_harness: FakeHarness, tmp_path: Path
) -> None:
    assert tmux_runner.probe_all() == {}  # no server yet: nothing runs
    live = start(tmux_runner, fake_harness, "loop-x-1", tmp_path)
    dead = tmux_runner.spawn("loop-x-2", tmp_path, fake_harness.another().argv(extra=["--exit-at-start", "3"])).target
    wait_for(lambda: tmux_runner.probe(dead) == "dead")
    states = tmux_runner.probe_all()
    assert states is not None
    for target in (live, dead, "loop-x-3"):
        assert states.get(target, "absent") == tmux_runner.probe(target), target
