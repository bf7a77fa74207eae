"""The UI in a real headless chromium draws a built-in tool the provider ran itself (genai's
``toolCall`` / ``toolResponse`` parts, as the gateway writes adk-mesh's server tool parts) as
it draws function calls: a labelled line each, the search's queries as text, live and again
from the session's history; the turn's other cards are unchanged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import browser_errors, serve_asgi
from tests.browser.fake_gateway import APP, FakeGateway

pytestmark = pytest.mark.timeout(120)

QUERY = 'pastéis <b>de</b> "belém"'


class SearchingGateway(FakeGateway):
    """The fake gateway whose turn starts with a model event holding a Google Search the
    provider ran (its call and its response) and an unknown built-in tool's call."""

    def _turn(
        self, session: dict[str, Any], invocation_id: str, message: str
    ) -> list[dict[str, Any]]:
        events = super()._turn(session, invocation_id, message)
        searched = dict(events[0])
        searched["id"] = str(uuid.uuid4())
        searched["content"] = {
            "role": "model",
            "parts": [
                {
                    "toolCall": {
                        "id": "srv-1",
                        "toolType": "GOOGLE_SEARCH_WEB",
                        "args": {"queries": ["lisbon fado", QUERY]},
                    },
                    "thoughtSignature": "c2lnbmVk",
                },
                {
                    "toolResponse": {
                        "id": "srv-1",
                        "toolType": "GOOGLE_SEARCH_WEB",
                        "response": {"results": [{"uri": "https://fado.example/"}]},
                    }
                },
                {"toolCall": {"toolType": "MAPS_LOOKUP", "args": {"place": "Belém"}}},
            ],
        }
        return [searched, *events]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_asgi(SearchingGateway(tmp_path_factory.mktemp("traces")).app()) as url:
        yield url


def wait(browser: Any, condition: Any, timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def test_built_in_tool_calls_and_results_are_drawn_like_function_calls(
    browser: Any, base_url: str, output_dir: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{base_url}/ui/")
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    message = browser.find_element(By.ID, "message")
    message.send_keys("Plan Lisbon.")
    message.send_keys(Keys.ENTER)
    wait(browser, lambda b: b.find_element(By.ID, "status").text.startswith("Done"))

    def check() -> None:
        calls = css(browser, "li.event div.line.server-call")
        assert [call.get_attribute("data-tool-type") for call in calls] == [
            "GOOGLE_SEARCH_WEB",
            "MAPS_LOOKUP",
        ]
        search, maps = calls
        assert search.get_attribute("data-call-id") == "srv-1"
        assert search.find_element(By.CSS_SELECTOR, ".mark").text == "→ BUILT-IN"
        assert search.find_element(By.CSS_SELECTOR, "code.tool").text == "google search"
        queries = search.find_elements(By.CSS_SELECTOR, "q.query")
        assert [query.text for query in queries] == ["lisbon fado", QUERY]
        assert search.find_elements(By.TAG_NAME, "b") == []  # the query's HTML is its text
        assert maps.find_element(By.CSS_SELECTOR, "code.tool").text == "maps lookup"
        assert maps.find_element(By.CSS_SELECTOR, ".args").text == '({"place":"Belém"})'
        [result] = css(browser, "li.event div.line.server-response")
        assert result.get_attribute("data-call-id") == "srv-1"
        assert result.find_element(By.CSS_SELECTOR, ".mark").text == "← BUILT-IN"
        assert result.find_element(By.CSS_SELECTOR, "code.tool").text == "google search"
        assert "https://fado.example/" in result.find_element(By.CSS_SELECTOR, ".args").text
        # The rest of the turn is drawn as before: its function calls, results and answer.
        assert len(css(browser, "li.event div.line.call[data-tool='itinerary_writer']")) == 1
        assert len(css(browser, "li.event div.line.response")) == 2
        answers = css(browser, "li.event:not(.partial) .text")
        assert "Here is your plan for Lisbon." in answers[-1].text

    check()
    browser.save_screenshot(str(output_dir / "ui-server-tools.png"))
    assert browser_errors(browser) == []

    # Drawn again from the session's history after a reload.
    session_id = browser.find_element(By.ID, "session").get_attribute("value")
    browser.get(f"{base_url}/ui/#app={APP}&user=user&session={session_id}")
    browser.refresh()
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    wait(browser, lambda b: css(b, "li.event div.line.server-call"))
    check()
    assert browser_errors(browser) == []
