"""``the-loop doctor jira`` (J31; E11): offline, names variables, never values."""

from __future__ import annotations

import pytest
from jira_world import EMAIL, TOKEN, JiraWorld


def test_j31_usable_configuration(world: JiraWorld) -> None:
    world.write()
    result = world.run("doctor", "jira")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"[ok] jira.test (cloud) → {world.fake.url}, REST v3"
    assert "[ok] JIRA_EMAIL is set" in lines and "[ok] JIRA_API_TOKEN is set" in lines
    assert "[ok] PROJ → octo/repo" in lines and "[ok] OPS → mirror-only" in lines
    assert TOKEN not in result.stdout + result.stderr and EMAIL not in result.stdout + result.stderr
    assert world.fake.requests == []  # offline


def test_e11_missing_token_is_named_and_exits_1(world: JiraWorld) -> None:
    world.write()
    del world.env.env["JIRA_API_TOKEN"]
    result = world.run("doctor", "jira")
    assert result.returncode == 1
    assert "[!] JIRA_API_TOKEN is not set (integrations.jira.api.tokenEnv)" in result.stdout


def test_unconfigured_is_a_question_mark_exit_0(world: JiraWorld) -> None:
    world.write({"version": "0.12.0"})
    result = world.run("doctor", "jira")
    assert result.returncode == 0 and result.stdout.strip() == "[?] integrations.jira is not configured"


def test_bad_server_url_is_one_error_line(world: JiraWorld) -> None:
    config = world.document()
    config["integrations"]["jira"]["serverUrl"] = "http://jira.example.com"
    world.write(config)
    result = world.run("doctor", "jira")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "loopback" in result.stderr


def test_a3_incomplete_section_is_refused_at_load(world: JiraWorld) -> None:
    config = world.document()
    del config["integrations"]["jira"]["api"]["emailEnv"]
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "emailEnv" in result.stderr


def test_a3_a_value_where_a_name_belongs_is_refused(world: JiraWorld) -> None:
    config = world.document()
    config["integrations"]["jira"]["api"]["tokenEnv"] = [TOKEN]
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 2 and TOKEN not in result.stdout + result.stderr
    assert "NAME" in result.stderr


def test_a7_issue_442_retired_transport_is_refused_with_a_hint(world: JiraWorld) -> None:
    config = world.document()
    config["integrations"]["jira"]["transport"] = "cli"
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 2 and "migrate-config" in result.stderr


@pytest.mark.parametrize(
    ("where", "key"),
    [("routing", "routing.autoExecuteLabels[1]"), ("source", "polling.sources[0].labels[0]")],
)
def test_j27_an_arming_label_without_a_jira_safe_form_is_a_config_error(world: JiraWorld, where: str, key: str) -> None:
    config = world.document()
    if where == "routing":
        config["routing"]["autoExecuteLabels"] = ["the-loop: auto-execute", "   "]
    else:
        config["polling"]["sources"][0]["labels"] = ["x" * 256]
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and key in line and "no Jira-safe form" in line


def test_j27_a_label_that_only_needs_normalizing_loads(world: JiraWorld) -> None:
    config = world.document()
    config["routing"]["autoExecuteLabels"] = ["the-loop: auto-execute", "team  a"]
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 0, result.stderr


def test_a3_deployment_is_required_once_a_site_is_set(world: JiraWorld) -> None:
    config = world.document()
    del config["integrations"]["jira"]["deployment"]
    world.write(config)
    result = world.run("config", "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and "integrations.jira.deployment is required" in line
