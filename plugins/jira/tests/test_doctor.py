"""``the-loop doctor jira`` (J31; E11): offline, names variables, never values."""

from __future__ import annotations

import pytest
from fake_jira import FakeJira
from jira_world import EMAIL, TOKEN, base_config

from the_loop.testing import LoopEnv


def test_j31_usable_configuration(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    jira_env.write_config(base_config(fake_jira))
    result = jira_env.run("doctor", "jira")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"[ok] jira.test (cloud) → {fake_jira.url}, REST v3"
    assert "[ok] JIRA_EMAIL is set" in lines and "[ok] JIRA_API_TOKEN is set" in lines
    assert "[ok] PROJ → octo/repo" in lines and "[ok] OPS → mirror-only" in lines
    assert TOKEN not in result.stdout + result.stderr and EMAIL not in result.stdout + result.stderr
    assert fake_jira.requests == []  # offline


def test_e11_missing_token_is_named_and_exits_1(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    jira_env.write_config(base_config(fake_jira))
    env = {k: v for k, v in jira_env.env.items() if k != "JIRA_API_TOKEN"}
    jira_env.env = env
    result = jira_env.run("doctor", "jira")
    assert result.returncode == 1
    assert "[!] JIRA_API_TOKEN is not set (integrations.jira.api.tokenEnv)" in result.stdout


def test_unconfigured_is_a_question_mark_exit_0(jira_env: LoopEnv) -> None:
    jira_env.write_config({"version": "0.12.0"})
    result = jira_env.run("doctor", "jira")
    assert result.returncode == 0 and result.stdout.strip() == "[?] integrations.jira is not configured"


def test_bad_server_url_is_one_error_line(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    config["integrations"]["jira"]["serverUrl"] = "http://jira.example.com"
    jira_env.write_config(config)
    result = jira_env.run("doctor", "jira")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "loopback" in result.stderr


def test_a3_incomplete_section_is_refused_at_load(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    del config["integrations"]["jira"]["api"]["emailEnv"]
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "emailEnv" in result.stderr


def test_a3_a_value_where_a_name_belongs_is_refused(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    config["integrations"]["jira"]["api"]["tokenEnv"] = [TOKEN]
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 2 and TOKEN not in result.stdout + result.stderr
    assert "NAME" in result.stderr


def test_a7_issue_442_retired_transport_is_refused_with_a_hint(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    config["integrations"]["jira"]["transport"] = "cli"
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 2 and "migrate-config" in result.stderr


@pytest.mark.parametrize(
    ("where", "key"),
    [("routing", "routing.autoExecuteLabels[1]"), ("source", "polling.sources[0].labels[0]")],
)
def test_j27_an_arming_label_without_a_jira_safe_form_is_a_config_error(
    jira_env: LoopEnv, fake_jira: FakeJira, where: str, key: str
) -> None:
    config = base_config(fake_jira)
    if where == "routing":
        config["routing"]["autoExecuteLabels"] = ["the-loop: auto-execute", "   "]
    else:
        config["polling"]["sources"][0]["labels"] = ["x" * 256]
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and key in line and "no Jira-safe form" in line


def test_j27_a_label_that_only_needs_normalizing_loads(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    config["routing"]["autoExecuteLabels"] = ["the-loop: auto-execute", "team  a"]
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 0, result.stderr


def test_a3_deployment_is_required_once_a_site_is_set(jira_env: LoopEnv, fake_jira: FakeJira) -> None:
    config = base_config(fake_jira)
    del config["integrations"]["jira"]["deployment"]
    jira_env.write_config(config)
    result = jira_env.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and "integrations.jira.deployment is required" in line
