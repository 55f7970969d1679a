"""``the-loop init --jira SITE/PROJECT`` through the real CLI against the fake Jira: the part it writes polls the
project with the credentials' account authorized, and every way it can fail is a finding with its remedy."""

from __future__ import annotations

from typing import Any

import yaml
from fake_jira import BOT
from jira_world import JiraWorld


def init(world: JiraWorld, *args: str, project: str = "jira.test/PROJ", **env: str) -> Any:
    world.env.env["THE_LOOP_EXTRA_PLUGINS"] = "the_loop.testing.fake_plugin"
    argv = ["init", "--jira", project, "--jira-server-url", world.fake.url, "--harness", "fake", *args]
    return world.env.run(*argv, **env)


def test_init_jira_writes_a_polling_config_for_the_project(world: JiraWorld) -> None:
    world.fake.projects.add("PROJ")
    result = init(world, "--jira-deployment", "cloud", "--jira-repository", "octo/repo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"[ok] the credentials are {BOT}'s ({BOT})" in result.stdout
    assert "[ok] project PROJ is visible" in result.stdout
    config = yaml.safe_load(world.env.config_path.read_text())
    assert config["integrations"]["jira"] == {
        "site": "jira.test",
        "deployment": "cloud",
        "api": {"tokenEnv": ["JIRA_API_TOKEN"], "emailEnv": ["JIRA_EMAIL"]},
        "projects": {"PROJ": {"repository": "octo/repo"}},
        "serverUrl": world.fake.url,
    }
    assert config["polling"]["sources"] == [{"provider": "jira", "projects": ["PROJ"]}]
    assert config["routing"]["authorizedUsers"] == [{"jira": BOT}]
    assert world.env.run("config", "validate").returncode == 0
    assert "jira-secret-token" not in world.env.config_path.read_text()


def test_missing_credentials_write_nothing(world: JiraWorld) -> None:
    world.env.env.pop("JIRA_API_TOKEN")
    result = init(world, "--jira-deployment", "cloud")
    assert result.returncode == 1 and not world.env.config_path.exists()
    assert "[!] no Jira credentials: JIRA_API_TOKEN is not set" in result.stdout


def test_refused_credentials_and_an_unknown_project_write_nothing(world: JiraWorld) -> None:
    world.fake.fail("GET", r".*/myself", 401)
    refused = init(world, "--jira-deployment", "cloud")
    assert refused.returncode == 1 and not world.env.config_path.exists()
    assert "did not accept the credentials in JIRA_EMAIL and JIRA_API_TOKEN" in refused.stdout
    unknown = init(world, "--jira-deployment", "cloud", project="jira.test/NOPE")
    assert unknown.returncode == 1 and not world.env.config_path.exists()
    assert f"[!] project NOPE is not visible to {BOT}" in unknown.stdout


def test_a_value_that_is_not_site_and_project_is_refused(world: JiraWorld) -> None:
    result = world.env.run("init", "--jira", "not a site", "--harness", "fake")
    assert result.returncode == 1 and "name it as SITE/PROJECT" in result.stdout
