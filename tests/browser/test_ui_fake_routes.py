"""The UI in a real headless chromium against a small fake of the gateway's routes
(tests/browser/fake_gateway.py): one scripted turn with everything the UI draws — partials,
tool progress, a transfer, an AgentTool delegation, state and artifact deltas — and its
trace read by the real trace route from OTLP files; and an answer's grounding (sources,
searches, code runs) drawn safely from what a model or a web page chose."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import browser_errors, serve_asgi
from tests.browser.fake_gateway import (
    APP,
    GROUNDED,
    NOTE,
    PASTEIS_TITLE,
    SCRIPT_URI,
    FakeGateway,
)

pytestmark = pytest.mark.timeout(120)

MESSAGE = "Plan a 3-day trip to Lisbon for food and history."


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeGateway:
    return FakeGateway(tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def base_url(fake: FakeGateway) -> Iterator[str]:
    with serve_asgi(fake.app()) as url:
        yield url


def wait(browser: Any, condition: Any, timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def test_a_turn_through_the_ui(
    browser: Any, base_url: str, fake: FakeGateway, output_dir: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{base_url}/ui/")
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    assert browser.find_element(By.ID, "app").get_attribute("value") == APP

    message = browser.find_element(By.ID, "message")
    message.send_keys(MESSAGE)
    message.send_keys(Keys.ENTER)
    wait(browser, lambda b: b.find_element(By.ID, "status").text.startswith("Done"))

    # google-adk's request body, streaming asked for.
    [body] = fake.run_bodies
    assert body["appName"] == APP and body["userId"] == "user" and body["streaming"] is True
    assert body["newMessage"] == {"role": "user", "parts": [{"text": MESSAGE}]}
    session_id = body["sessionId"]
    assert browser.find_element(By.ID, "session").get_attribute("value") == session_id

    [turn] = css(browser, "article.turn")
    invocation_id = turn.get_attribute("data-invocation")
    assert invocation_id.startswith("e-")
    assert MESSAGE in turn.find_element(By.CSS_SELECTOR, ".user-message").text
    final_cards = css(browser, "article.turn li.event:not(.partial)")
    assert [card.get_attribute("data-author") for card in final_cards] == [
        "concierge",
        "concierge",
        "trip_planner",
        "trip_planner",
        "trip_planner",
    ]
    assert "transfer to trip_planner" in final_cards[0].text.lower()
    assert "control goes to trip_planner" in final_cards[1].text
    assert "concierge.trip_planner" in final_cards[2].text  # the branch
    assert f"{NOTE} saved as version 0" in final_cards[3].text
    assert "Here is your plan for Lisbon." in final_cards[4].text
    assert "turn complete" in final_cards[4].text
    # Partials are events too: hidden until asked for, then shown, the progress one included.
    partials = css(browser, "li.event.partial")
    assert len(partials) >= 5 and not any(card.is_displayed() for card in partials)
    browser.find_element(By.ID, "show-partials").click()
    assert all(card.is_displayed() for card in partials)
    progress = css(browser, "li.event.partial.tool-progress")[0]
    assert "drafting, round 1 of 3" in progress.text and "33%" in progress.text
    browser.find_element(By.ID, "show-partials").click()

    # The trace: every service, nested, and the AgentTool call marked from it.
    wait(browser, lambda b: b.find_element(By.ID, "trace").get_attribute("data-complete") == "true")
    rows = css(browser, "#trace tr.span-row")
    depth = {
        (
            row.get_attribute("data-service"),
            row.find_element(By.CSS_SELECTOR, ".span-name").text,
        ): int(row.get_attribute("data-depth"))
        for row in rows
    }
    assert depth[("concierge", "invoke_agent concierge")] == 0
    assert depth[("planner", "invoke_agent trip_planner")] == 2
    assert depth[("writer", "invoke_agent itinerary_writer")] == 4
    assert depth[("tools", "execute_tool save_note")] == 3
    assert [li.text for li in css(browser, "#trace .legend li")] == [
        "concierge",
        "planner",
        "writer",
        "tools",
    ]
    assert browser.find_element(By.ID, "trace-invocation").text == invocation_id
    wait(browser, lambda b: css(b, ".line.call.delegation"))
    [delegation] = css(browser, ".line.call.delegation")
    assert "AgentTool delegation to itinerary_writer" in delegation.text

    # A span's attributes open from the keyboard.
    toggle = rows[0].find_element(By.CSS_SELECTOR, "button.span-toggle")
    detail = browser.find_element(By.ID, toggle.get_attribute("aria-controls"))
    assert not detail.is_displayed()
    toggle.send_keys(Keys.ENTER)
    assert toggle.get_attribute("aria-expanded") == "true" and detail.is_displayed()
    assert invocation_id in detail.text

    # State (what this invocation changed, marked) and the artifact.
    changed = {row.get_attribute("data-key") for row in css(browser, "#state tr.changed")}
    assert changed == {"itinerary", "user:pace"}
    browser.find_element(By.CSS_SELECTOR, f'#artifacts li[data-artifact="{NOTE}"] button').click()
    wait(browser, lambda b: "Day 1" in b.find_element(By.ID, "artifact-view").text)
    assert f"{NOTE} · version 0" in browser.find_element(By.ID, "artifact-view").text

    browser.save_screenshot(str(output_dir / "ui-fake-routes.png"))
    assert browser_errors(browser) == []

    # Reloaded, the page resumes the session from the URL and draws it from its history.
    browser.get(f"{base_url}/ui/#app={APP}&user=user&session={session_id}")
    browser.refresh()
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    wait(browser, lambda b: b.find_element(By.ID, "trace").get_attribute("data-complete") == "true")
    [turn] = css(browser, "article.turn")
    assert turn.get_attribute("data-invocation") == invocation_id
    assert MESSAGE in turn.text
    assert len(css(browser, "article.turn li.event")) == 5
    assert browser_errors(browser) == []


def test_stop_closes_the_stream(browser: Any, base_url: str, fake: FakeGateway) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{base_url}/ui/")
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    message = browser.find_element(By.ID, "message")
    message.send_keys("Plan it slowly, please.")
    message.send_keys(Keys.ENTER)
    # The first event is in: the run is under way.
    wait(browser, lambda b: css(b, 'article.turn[data-state="running"] li.event'))
    stop = browser.find_element(By.ID, "stop")
    assert stop.is_displayed()
    stop.send_keys(Keys.ENTER)

    wait(browser, lambda b: css(b, 'article.turn[data-state="stopped"]'))
    assert fake.disconnected.wait(10), "the page did not close the stream"
    [turn] = css(browser, "article.turn")
    assert "the run was cancelled" in turn.text
    assert not stop.is_displayed()
    assert browser.find_element(By.ID, "send").is_enabled()
    assert browser_errors(browser) == []


def test_an_answer_shows_its_grounding_safely(
    browser: Any, base_url: str, output_dir: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{base_url}/ui/")
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    message = browser.find_element(By.ID, "message")
    message.send_keys(f"Plan Lisbon, with your {GROUNDED}.")
    message.send_keys(Keys.ENTER)
    wait(browser, lambda b: b.find_element(By.ID, "status").text.startswith("Done"))

    def check_grounding() -> None:
        # Only the answer carries grounding; the partials streamed before it do not.
        [answer] = css(browser, "li.event.grounded")
        assert "partial" not in (answer.get_attribute("class") or "")
        assert "Here is your plan for Lisbon." in answer.find_element(By.CSS_SELECTOR, ".text").text
        grounding = answer.find_element(By.CSS_SELECTOR, "section.grounding")
        assert [q.text for q in grounding.find_elements(By.CSS_SELECTOR, "q.query")] == [
            "lisbon fado evening",
            "pastéis de belém <history>",
        ]

        # Links only for http(s) URIs, opened apart from this page.
        links = grounding.find_elements(By.CSS_SELECTOR, ".source-list a")
        assert [link.get_attribute("href") for link in links] == [
            "https://fado.example/mouraria",
            "https://pasteis.example/belem?from=ui",
            "https://castelo.example/",
        ]
        for link in links:
            assert link.get_attribute("rel") == "noopener noreferrer"
            assert link.get_attribute("target") == "_blank"
        sources = grounding.find_elements(By.CSS_SELECTOR, ".source-list li")
        titles = [s.find_element(By.CSS_SELECTOR, ".source-title").text for s in sources]
        hosts = [s.find_element(By.CSS_SELECTOR, ".host").text for s in sources]
        # The HTML in a title is its text; a source without a title shows its host.
        assert titles == [
            "Fado in Mouraria",
            PASTEIS_TITLE,
            "Click for a free tram pass",
            "castelo.example",
        ]
        assert hosts == ["fado.example", "pasteis.example", SCRIPT_URI, "castelo.example"]
        # The script URI is text, never a link; the title's HTML made no element.
        unlinked = grounding.find_elements(By.CSS_SELECTOR, ".source-list li.unlinked")
        assert len(unlinked) == 1 and unlinked[0].find_elements(By.TAG_NAME, "a") == []
        assert css(browser, "a[href^='javascript']") == []
        assert grounding.find_elements(By.CSS_SELECTOR, "img, b") == []

        # The code the provider ran, collapsed until opened.
        runs = grounding.find_elements(By.CSS_SELECTOR, "details.code-run")
        assert [run.find_element(By.TAG_NAME, "summary").text for run in runs] == [
            "Code run 1 · python · ok",
            "Code run 2 · python · failed",
        ]
        code = runs[0].find_element(By.CSS_SELECTOR, "pre.code")
        assert not code.is_displayed()
        runs[0].find_element(By.TAG_NAME, "summary").click()
        assert code.is_displayed()
        assert code.text == "print(3 * 24, '<b>hours</b>')"
        assert runs[0].find_element(By.CSS_SELECTOR, "pre.output").text == "72 <b>hours</b>"
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None

    check_grounding()
    browser.save_screenshot(str(output_dir / "ui-grounding.png"))
    assert browser_errors(browser) == []

    # Clicking the script source does nothing: it is not a link.
    css(browser, ".source-list li.unlinked .source-title")[0].click()
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None

    # Drawn again from the session's history after a reload.
    session_id = browser.find_element(By.ID, "session").get_attribute("value")
    browser.get(f"{base_url}/ui/#app={APP}&user=user&session={session_id}")
    browser.refresh()
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    wait(browser, lambda b: css(b, "li.event.grounded"))
    check_grounding()
    assert browser_errors(browser) == []
