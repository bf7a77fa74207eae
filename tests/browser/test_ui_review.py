"""The web UI in a real headless chromium against the fake gateway (tests/browser/
fake_gateway.py), on what a review found: a run that keeps writing into another session once
the user switched away, an artifact of one session left open under another, artifacts whose
active content (HTML, SVG) could run in the UI's own origin, the text of a stopped answer
thrown away, a long answer that takes the scroll from the reader, and a link to another
session pasted into the tab."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import browser_errors, serve_asgi
from tests.browser.fake_gateway import APP, FakeGateway

pytestmark = pytest.mark.timeout(120)

#: Active content a tool could save as an artifact: run in the UI's origin, it would reach
#: the tab's storage (where the UI keeps the credentials).
HTML_PAGE = "<html><body><script>localStorage.setItem('pwned', 'html')</script>hi</body></html>"
SVG_IMAGE = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    "<script>localStorage.setItem('pwned', 'svg')</script>"
    '<rect width="10" height="10" fill="red"/></svg>'
)


#: A message with this word gets a turn the gateway ends with an error frame.
FAILING = "fail"
ERROR = "ToolError: the fares service is down"


class ReviewGateway(FakeGateway):
    """The fake gateway; asked to fail, its turn ends after two events with the gateway's
    error frame (`{"error": ..., "error_details": ...}`, as gateway/_runs.py writes it)."""

    def _turn(
        self, session: dict[str, Any], invocation_id: str, message: str
    ) -> list[dict[str, Any]]:
        events = super()._turn(session, invocation_id, message)
        if FAILING not in message:
            return events
        details = {"error_type": "ToolError", "error_message": "the fares service is down",
                   "timestamp": time.time(), "reason": "TOOL_ERROR"}  # fmt: skip
        return [*events[:2], {"error": ERROR, "error_details": details}]

    def _append(self, session: dict[str, Any], event: dict[str, Any]) -> None:
        if "error" not in event:
            super()._append(session, event)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeGateway:
    return ReviewGateway(tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def base_url(fake: FakeGateway) -> Iterator[str]:
    with serve_asgi(fake.app()) as url:
        yield url


def wait(browser: Any, condition: Any, timeout: float = 30) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def add_session(
    fake: FakeGateway,
    user: str,
    state: dict[str, Any] | None = None,
    turns: int = 0,
) -> str:
    """A session stored in the fake, with `turns` short finished turns in its history."""
    session_id = str(uuid.uuid4())
    events: list[dict[str, Any]] = []
    for index in range(turns):
        invocation = f"e-old-{index}"
        for author, text in (("user", f"question {index}"), ("helper", f"answer {index}")):
            events.append(
                {
                    "id": str(uuid.uuid4()),
                    "invocationId": invocation,
                    "author": author,
                    "timestamp": time.time(),
                    "content": {"role": "user" if author == "user" else "model",
                                "parts": [{"text": text}]},
                    "actions": {"stateDelta": {}, "artifactDelta": {}},
                }
            )  # fmt: skip
    fake.sessions[session_id] = {
        "id": session_id,
        "appName": APP,
        "userId": user,
        "state": dict(state or {}),
        "events": events,
        "lastUpdateTime": time.time(),
    }
    return session_id


def open_ui(browser: Any, base_url: str, user: str, session_id: str = "") -> None:
    from selenium.webdriver.common.by import By

    hash_ = f"app={APP}&user={user}" + (f"&session={session_id}" if session_id else "")
    browser.get(f"{base_url}/ui/#{hash_}")
    browser.refresh()  # a new hash alone would not load the page again
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    if session_id:
        wait(browser, lambda b: b.find_element(By.ID, "status").text.startswith("Session "))


def select_session(browser: Any, session_id: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "session")).select_by_value(session_id)


def type_message(browser: Any, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    message = browser.find_element(By.ID, "message")
    message.send_keys(text)
    message.send_keys(Keys.ENTER)


def turn_complete(fake: FakeGateway, session_id: str) -> bool:
    return any(event.get("turnComplete") for event in fake.sessions[session_id]["events"])


def test_switching_session_mid_stream_stops_the_run_and_leaves_the_other_session_alone(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "switcher"
    other = add_session(fake, user, state={"other_key": "kept"})
    running = add_session(fake, user)
    fake.disconnected.clear()
    open_ui(browser, base_url, user, running)
    type_message(browser, "Plan it slowly, please.")
    wait(browser, lambda b: css(b, 'article.turn[data-state="running"] li.event'))
    invocation = css(browser, "article.turn")[-1].get_attribute("data-invocation")

    select_session(browser, other)
    # The run of the session left is closed (the gateway cancels it), not left writing into
    # the page of the session now shown.
    wait(browser, lambda b: fake.disconnected.is_set() or turn_complete(fake, running))
    assert fake.disconnected.is_set(), "the stream of the session left was not closed"
    wait(browser, lambda b: b.find_element(By.ID, "send").is_enabled())
    assert not browser.find_element(By.ID, "stop").is_displayed()
    keys = {row.get_attribute("data-key") for row in css(browser, "#state tbody tr")}
    assert keys == {"other_key"}
    assert css(browser, "article.turn") == []  # the other session has no turn
    assert browser.find_element(By.ID, "trace-invocation").text != invocation
    assert browser.find_element(By.ID, "session").get_attribute("value") == other
    assert browser_errors(browser) == []


def test_an_artifact_of_one_session_is_not_left_open_under_another(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "reader"
    first = add_session(fake, user)
    second = add_session(fake, user)
    fake.artifacts[(first, "secret.txt")] = [{"text": "the first session's secret"}]
    open_ui(browser, base_url, user, first)
    wait(browser, lambda b: css(b, '#artifacts li[data-artifact="secret.txt"] button'))
    css(browser, '#artifacts li[data-artifact="secret.txt"] button')[0].click()
    view = browser.find_element(By.ID, "artifact-view")
    wait(browser, lambda b: "the first session's secret" in view.text)

    select_session(browser, second)
    wait(browser, lambda b: "No artifacts yet." in b.find_element(By.ID, "artifacts").text)
    assert "the first session's secret" not in view.text
    assert not view.is_displayed()

    # Nor under a new session.
    select_session(browser, first)
    wait(browser, lambda b: css(b, '#artifacts li[data-artifact="secret.txt"] button'))
    css(browser, '#artifacts li[data-artifact="secret.txt"] button')[0].click()
    wait(browser, lambda b: "the first session's secret" in view.text)
    browser.find_element(By.ID, "new-session").click()
    wait(browser, lambda b: b.find_element(By.ID, "status").text.startswith("New session"))
    assert "the first session's secret" not in view.text
    assert browser_errors(browser) == []


def test_active_artifacts_never_run_in_the_ui_origin(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "artist"
    session_id = add_session(fake, user)

    def inline(mime: str, text: str) -> dict[str, Any]:
        data = base64.b64encode(text.encode()).decode()
        return {"inlineData": {"mimeType": mime, "data": data}}

    fake.artifacts[(session_id, "page.html")] = [inline("text/html", HTML_PAGE)]
    fake.artifacts[(session_id, "logo.svg")] = [inline("image/svg+xml", SVG_IMAGE)]
    open_ui(browser, base_url, user, session_id)
    browser.execute_script("localStorage.removeItem('pwned')")
    view = browser.find_element(By.ID, "artifact-view")

    def open_artifact(name: str) -> None:
        wait(browser, lambda b: css(b, f'#artifacts li[data-artifact="{name}"] button'))
        css(browser, f'#artifacts li[data-artifact="{name}"] button')[0].click()
        wait(browser, lambda b: f"{name} · version 0" in view.text)

    # The SVG is previewed as an image; opened on its own ("Open image in new tab") its script
    # does not run in the UI's origin.
    open_artifact("logo.svg")
    image = view.find_element(By.TAG_NAME, "img")
    wait(browser, lambda b: b.execute_script("return arguments[0].complete", image))
    assert browser.execute_script("return arguments[0].naturalWidth", image) == 10
    source = image.get_attribute("src")
    page = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(source)
    browser.close()
    browser.switch_to.window(page)
    assert browser.execute_script("return localStorage.getItem('pwned')") is None
    # Its script ran in an opaque origin, where there is no storage to reach.
    assert all("Storage is disabled" in error for error in browser_errors(browser))

    # The HTML page is shown as its text, and its download is bytes, not a page of this origin
    # a person could open in a tab ("Open link in new tab"). (The blob's type is read where
    # the UI makes its URL: the page's policy lets no script fetch a blob: URL.)
    browser.execute_script(
        "const make = URL.createObjectURL; window.blobTypes = [];"
        "URL.createObjectURL = (blob) => { window.blobTypes.push(blob.type); return make(blob); };"
    )
    open_artifact("page.html")
    assert "<script>" in view.find_element(By.CSS_SELECTOR, "pre.artifact-text").text
    link = view.find_element(By.CSS_SELECTOR, "a[download]")
    assert link.get_attribute("download") == "page.html"
    assert "text/html" in link.text  # the artifact's own type is still said
    assert (link.get_attribute("href") or "").startswith("blob:")
    assert browser.execute_script("return window.blobTypes") == ["application/octet-stream"]


def test_stop_keeps_the_text_streamed_so_far(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "stopper"
    session_id = add_session(fake, user)
    fake.disconnected.clear()
    open_ui(browser, base_url, user, session_id)
    type_message(browser, "Plan it slowly, please.")
    wait(browser, lambda b: "Here is your" in "".join(e.text for e in css(b, ".live .bubble")))
    browser.find_element(By.ID, "stop").click()
    wait(browser, lambda b: css(b, 'article.turn[data-state="stopped"]'))
    assert fake.disconnected.wait(10)
    [turn] = css(browser, "article.turn")
    # What the person read before stopping is still there, marked as stopped.
    assert "Here is your" in turn.text
    assert "the run was cancelled" in turn.text
    assert "streaming" not in turn.text
    assert browser_errors(browser) == []


def test_a_streaming_answer_leaves_the_scroll_to_the_reader(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "scroller"
    session_id = add_session(fake, user, turns=30)
    fake.disconnected.clear()
    open_ui(browser, base_url, user, session_id)
    transcript = browser.find_element(By.ID, "transcript")
    scroll = "return arguments[0].scrollTop"
    assert browser.execute_script(scroll, transcript) > 0  # opened at the bottom

    type_message(browser, "Plan it slowly, please.")
    wait(browser, lambda b: css(b, 'article.turn[data-state="running"] li.event'))
    # At the bottom, the page follows the answer as it grows.
    wait(browser, lambda b: len(css(b, 'article.turn[data-state="running"] li.event')) >= 2)
    at_bottom = "const t = arguments[0]; return t.scrollHeight - t.clientHeight - t.scrollTop < 4;"
    assert browser.execute_script(at_bottom, transcript)

    # Scrolled up to read an older answer, the reader stays there while events come in.
    browser.execute_script("arguments[0].scrollTop = 0", transcript)
    seen = len(css(browser, 'article.turn[data-state="running"] li.event'))
    wait(browser, lambda b: len(css(b, 'article.turn[data-state="running"] li.event')) >= seen + 2)
    assert browser.execute_script(scroll, transcript) == 0
    browser.find_element(By.ID, "stop").click()
    wait(browser, lambda b: css(b, 'article.turn[data-state="stopped"]'))
    assert fake.disconnected.wait(10)


def test_a_link_to_another_session_pasted_into_the_tab_opens_it(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "linker"
    first = add_session(fake, user, turns=1)
    second = add_session(fake, user, state={"second_key": 2})
    open_ui(browser, base_url, user, first)
    assert "answer 0" in browser.find_element(By.ID, "transcript").text

    # Only the fragment changes: the browser does not load the page again.
    browser.execute_script(
        "window.location.hash = arguments[0]", f"app={APP}&user={user}&session={second}"
    )
    wait(browser, lambda b: b.find_element(By.ID, "session").get_attribute("value") == second)
    wait(
        browser,
        lambda b: (
            {r.get_attribute("data-key") for r in css(b, "#state tbody tr")} == {"second_key"}
        ),
    )
    assert "answer 0" not in browser.find_element(By.ID, "transcript").text
    assert browser_errors(browser) == []


def test_a_run_the_gateway_ends_with_an_error_frame_is_reported_as_failed(
    browser: Any, base_url: str, fake: FakeGateway
) -> None:
    from selenium.webdriver.common.by import By

    user = "unlucky"
    session_id = add_session(fake, user)
    open_ui(browser, base_url, user, session_id)
    type_message(browser, f"Check fares, or {FAILING}.")
    wait(browser, lambda b: b.find_element(By.ID, "status").text != "Running…")
    status = browser.find_element(By.ID, "status")
    # The status line (read out by screen readers) says the run failed, and why; not "Done".
    assert ERROR in status.text and not status.text.startswith("Done")
    assert status.get_attribute("data-kind") == "error"
    [turn] = css(browser, "article.turn")
    assert turn.get_attribute("data-state") == "failed"
    [alert] = turn.find_elements(By.CSS_SELECTOR, "li.event.error[role=alert]")
    assert ERROR in alert.text
    assert len(turn.find_elements(By.CSS_SELECTOR, "li.event:not(.error)")) == 2
