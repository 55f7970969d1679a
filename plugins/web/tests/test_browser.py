"""The dashboard in a real browser: Debian's headless Chromium through Playwright (no browser download), against the
real control plane, the real receiver and the fake harness on a private tmux server.

A viewer logs in and sees the armed work item; a comment from the fake GitHub shows up in its timeline without a
reload; its terminal shows the fake harness's screen and ignores their keystrokes. An operator's keystrokes reach
the harness, and `say`, `answer` and `pause` on the page go through the dispatcher and the CLI's operations.
Screenshots of the list and the work-item page are saved (``/tmp/the-loop-web-screenshots/``, and the test's tmp dir).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gh_world import REF
from web_world import WebWorld

from the_loop.testing import wait_for

SCREENSHOTS = Path("/tmp/the-loop-web-screenshots")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ITEM_PAGE = "/work-items/github%3Aocto%2Frepo%2315"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system's Chromium under Playwright; skipped without one, failed under CI (a missing tool never passes)."""
    executable = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if executable is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI=true: a missing tool fails the run)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        yield browser
        browser.close()


def logged_in(chromium: Any, world: WebWorld, token: str) -> Any:
    page = chromium.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    page.goto(f"{world.url}/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{world.url}/")
    return page


def screen(page: Any) -> str:
    return page.locator(".xterm-rows").inner_text()


def save(page: Any, name: str, tmp_path: Path) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(tmp_path / name), full_page=True)
    shutil.copy(tmp_path / name, SCREENSHOTS / name)


def test_a_viewer_watches_the_list_the_live_timeline_and_a_read_only_terminal(
    chromium: Any, web_world: Any, tmp_path: Path
) -> None:
    world = web_world()
    harness = world.gh.start_work()
    page = logged_in(chromium, world, world.viewer)
    row = page.locator("#items tbody tr", has_text=REF)
    assert row.count() == 1 and "running" in row.inner_text() and "fake" in row.inner_text()
    assert page.locator("meta[name=role]").get_attribute("content") == "viewer"
    save(page, "list.png", tmp_path)

    page.click(f"a[href='{ITEM_PAGE}']")
    page.wait_for_url(f"{world.url}{ITEM_PAGE}")
    assert page.locator("#actions").count() == 0  # a viewer gets no action controls
    wait_for(lambda: "fake-harness>" in screen(page), timeout=15)
    # xterm.js's own theme reached the page despite the CSP (its style sheets are mirrored): light on black.
    colour = page.evaluate("getComputedStyle(document.querySelector('.xterm-rows')).color")
    assert colour not in ("rgb(29, 35, 48)", "rgb(0, 0, 0)"), colour

    world.gh.comment("please also add docs")
    page.locator("#timeline li", has_text="dispatch.succeeded").last.wait_for(timeout=15_000)
    wait_for(lambda: any("please also add docs" in text for text in harness.submitted()), timeout=15)
    wait_for(lambda: "[submitted" in screen(page), timeout=15)  # the terminal follows the pane

    submitted = len(harness.submitted())
    page.click("#terminal")
    page.keyboard.type("viewer typing")
    page.keyboard.press("Enter")
    page.wait_for_timeout(1000)
    assert len(harness.submitted()) == submitted
    assert not any("viewer typing" in record.get("text", "") for record in harness.records())
    opened = world.gh.events("web.terminal_opened")
    assert opened and opened[-1]["read_only"] is True and opened[-1]["principal"] == "viewer"


def test_an_operator_types_says_answers_and_pauses_from_the_page(chromium: Any, web_world: Any, tmp_path: Path) -> None:
    world = web_world()
    harness = world.gh.start_work()
    assert world.env.run("ask", "--work-item", REF, "--question", "Which colour, <b>red</b> or blue?").returncode == 0
    page = logged_in(chromium, world, world.operator)
    row = page.locator("#items tbody tr", has_text=REF)
    assert "waiting for input" in row.inner_text()
    page.goto(f"{world.url}{ITEM_PAGE}")
    # The question is shown as text: the markup in it is not markup on the page.
    assert page.locator("#question blockquote").inner_text() == "Which colour, <b>red</b> or blue?"
    assert page.locator("#question b").count() == 0
    wait_for(lambda: "fake-harness>" in screen(page), timeout=15)

    page.click("#terminal")
    page.keyboard.type("hello from the browser")
    page.keyboard.press("Enter")
    wait_for(lambda: "hello from the browser" in harness.submitted(), timeout=15)
    save(page, "work-item.png", tmp_path)

    # The answer first: any person's words reaching the session (a `say` too) answer the question.
    page.fill("#answer textarea", "blue, please")
    page.click("#answer button")
    wait_for(lambda: any("blue, please" in text for text in harness.submitted()), timeout=15)
    assert world.api("GET", "/api/v1/questions").json()["questions"] == []

    page.fill("#say textarea", "use the blue widget")
    page.click("#say button")
    wait_for(lambda: any("use the blue widget" in text for text in harness.submitted()), timeout=15)
    page.locator("#action-result", has_text="delivered").wait_for(timeout=10_000)

    page.click("button.action[data-action=pause]")
    wait_for(lambda: world.gh.own()["status"] == "paused", timeout=15)
    page.locator("#action-result", has_text="paused").wait_for(timeout=10_000)
    logged = [e for e in world.gh.events("control.command") if e["source"] == "web"]
    assert [(e["command"], e["actor"]) for e in logged] == [("pause", "web:operator")]
    actions = [e["action"] for e in world.gh.events("web.action")]
    assert actions == ["answer", "say", "pause"]


def test_a_one_time_link_logs_in_once(chromium: Any, web_world: Any) -> None:
    world = web_world()
    link = world.env.run("web", "open").stdout.strip()
    page = chromium.new_context().new_page()
    page.goto(link.replace(f"http://127.0.0.1:{world.port}", world.url))
    page.wait_for_url(f"{world.url}/")
    assert "#link=" not in page.url and page.locator("meta[name=role]").get_attribute("content") == "operator"
    again = chromium.new_context().new_page()
    again.goto(link)
    again.locator("#login-error", has_text="used or has expired").wait_for(timeout=10_000)
