"""``the-loop init --slack CHANNEL`` through the real CLI against the fake Slack Web API (real slack-sdk client): the
part it writes publishes into that channel and reads replies by polling, and each way it can fail is a finding."""

from __future__ import annotations

from typing import Any

import yaml
from fake_slack import Server
from slack_world import BOT_TOKEN

from the_loop.testing import LoopEnv

CHANNEL = "C0DEMO01"


def init(env: LoopEnv, server: Server, *args: str, **extra: str) -> Any:
    env.env.update(THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin", THE_LOOP_SLACK_BOT_TOKEN=BOT_TOKEN)
    argv = ["init", "--slack", CHANNEL, "--slack-api-url", server.base_url, "--harness", "fake", *args]
    return env.run(*argv, **extra)


def test_init_slack_writes_the_channel_and_asks_slack_first(loop_env: LoopEnv, fake_slack: Server) -> None:
    result = init(loop_env, fake_slack)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok] the bot token from THE_LOOP_SLACK_BOT_TOKEN is" in result.stdout
    assert f"[ok] the bot can read {CHANNEL}" in result.stdout
    config = yaml.safe_load(loop_env.config_path.read_text())
    assert config["channels"]["slack"] == {"enabled": True, "channel": CHANNEL, "apiBaseUrl": fake_slack.base_url}
    assert BOT_TOKEN not in loop_env.config_path.read_text()
    assert loop_env.run("config", "validate").returncode == 0


def test_no_token_or_a_refused_one_writes_nothing(loop_env: LoopEnv, fake_slack: Server) -> None:
    missing = init(loop_env, fake_slack, THE_LOOP_SLACK_BOT_TOKEN="")
    assert missing.returncode == 1 and "[!] no Slack bot token: THE_LOOP_SLACK_BOT_TOKEN is not set" in missing.stdout
    refused = init(loop_env, fake_slack, THE_LOOP_SLACK_BOT_TOKEN="not-a-slack-token")
    assert refused.returncode == 1 and "Slack refused the bot token from THE_LOOP_SLACK_BOT_TOKEN" in refused.stdout
    assert "not-a-slack-token" not in refused.stdout + refused.stderr
    assert not loop_env.config_path.exists()


def test_a_channel_the_bot_cannot_read_is_a_finding(loop_env: LoopEnv, fake_slack: Server) -> None:
    fake_slack.fake.fail("conversations.info", 200, error="channel_not_found")
    result = init(loop_env, fake_slack)
    assert result.returncode == 1
    assert f"[!] the bot cannot read {CHANNEL} (channel_not_found)" in result.stdout
    assert f"fix: invite it: /invite @<your app> in {CHANNEL}" in result.stdout


def test_a_channel_name_instead_of_its_id_is_refused(loop_env: LoopEnv, fake_slack: Server) -> None:
    result = loop_env.run("init", "--slack", "#general", "--harness", "fake")
    assert result.returncode == 1 and "name the channel by its id" in result.stdout
