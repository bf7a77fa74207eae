"""The demo conversation typed into the web UI, in a real headless chromium, against the
reference mesh (mesh.toml's services as separate processes, mutual TLS between them) and its
HTTP gateway: the events, the session state, the artifacts and each invocation's trace
waterfall across the services appear; a screenshot is saved after every turn."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.up import GatewaySpec, Mesh, load_config
from tests.browser.conftest import REPO_ROOT, browser_errors

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# scripts/demo.py's conversation: (session, message); a new label starts a new session.
TURNS: tuple[tuple[str, str], ...] = (
    ("first", "Hi! Remember that I prefer a relaxed pace and imperial units."),
    ("first", "Plan a 3-day trip to Lisbon for food and history."),
    ("first", "Check fares from London to Lisbon."),
    ("first", 'Save the itinerary as a note titled "Lisbon in three days".'),
    ("first", "Read back my note lisbon-in-three-days.md"),
    ("first", 'Convert the time in "Europe/Lisbon" at "09:00" to "Asia/Tokyo".'),
    ("first", "Convert 26 km for my morning run."),
    ("first", "Calculate (120 + 80) * 3 for the hotel budget."),
    ("second", "Convert 20 kg of luggage."),
)
NOTE = "lisbon-in-three-days.md"


def wait(browser: Any, condition: Callable[[Any], Any], timeout: float = 60) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


@dataclasses.dataclass
class TurnSeen:
    """What the page showed of one turn."""

    message: str
    invocation_id: str
    authors: list[str]
    text: str
    progress: list[str]
    delegations: list[str]
    services: list[str]
    span_rows: list[tuple[str, str, int]]


def type_turn(browser: Any, message: str, shots: Path, index: int) -> TurnSeen:
    """Send ``message`` from the message box, wait for the turn and its trace, screenshot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    before = len(css(browser, "article.turn"))
    box = browser.find_element(By.ID, "message")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)
    wait(browser, lambda b: len(css(b, "article.turn")) == before + 1)
    turn = css(browser, "article.turn")[-1]
    wait(browser, lambda _: turn.get_attribute("data-state") != "running")
    assert turn.get_attribute("data-state") == "done", turn.text
    invocation_id = turn.get_attribute("data-invocation")
    assert invocation_id
    trace = browser.find_element(By.ID, "trace")
    wait(
        browser,
        lambda _: (
            trace.get_attribute("data-invocation") == invocation_id
            and trace.get_attribute("data-complete") is not None
        ),
    )
    assert trace.get_attribute("data-complete") == "true", trace.text
    browser.save_screenshot(str(shots / f"{index:02d}-{slug(message)}.png"))
    cards = turn.find_elements(By.CSS_SELECTOR, "li.event:not(.partial)")
    return TurnSeen(
        message=message,
        invocation_id=invocation_id,
        authors=[card.get_attribute("data-author") for card in cards],
        text=turn.text,
        progress=[
            card.get_attribute("textContent")
            for card in turn.find_elements(By.CSS_SELECTOR, "li.event.tool-progress")
        ],
        delegations=[
            line.get_attribute("textContent")
            for line in turn.find_elements(By.CSS_SELECTOR, ".line.call.delegation")
        ],
        services=[li.text for li in css(browser, "#trace .legend li")],
        span_rows=[
            (
                row.get_attribute("data-service"),
                row.find_element(By.CSS_SELECTOR, ".span-name").get_attribute("textContent"),
                int(row.get_attribute("data-depth")),
            )
            for row in css(browser, "#trace tr.span-row")
        ],
    )


def converse(browser: Any, base_url: str, shots: Path) -> tuple[list[TurnSeen], dict[str, Any]]:
    """The whole demo conversation through the page; what it showed, and the final panels."""
    from selenium.webdriver.common.by import By

    browser.get(f"{base_url}/ui/#user=ada")
    wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", (
        browser.find_element(By.ID, "status").text
    )
    assert browser.find_element(By.ID, "app").get_attribute("value") == "travel_desk"
    seen: list[TurnSeen] = []
    label = TURNS[0][0]
    panels: dict[str, Any] = {}
    for index, (session, message) in enumerate(TURNS, start=1):
        if session != label:
            # Before the new session: the first one's state and artifacts.
            panels["state"] = {
                row.get_attribute("data-key"): row.text for row in css(browser, "#state tbody tr")
            }
            panels["artifacts"] = [
                li.get_attribute("data-artifact") for li in css(browser, "#artifacts li")
            ]
            panels["first_session"] = browser.find_element(By.ID, "session").get_attribute("value")
            browser.find_element(By.ID, "new-session").click()
            wait(
                browser,
                lambda b: (
                    b.find_element(By.ID, "session").get_attribute("value")
                    not in ("", panels["first_session"])
                ),
            )
            label = session
        seen.append(type_turn(browser, message, shots, index))
    panels["second_state"] = {
        row.get_attribute("data-key"): row.text for row in css(browser, "#state tbody tr")
    }
    panels["errors"] = browser_errors(browser)

    # Back to the first session: its history is drawn from the gateway, turn by turn.
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "session")).select_by_value(panels["first_session"])
    wait(browser, lambda b: len(css(b, "article.turn")) == len(TURNS) - 1)
    panels["resumed"] = [
        turn.get_attribute("data-invocation") for turn in css(browser, "article.turn")
    ]
    css(browser, f'#artifacts li[data-artifact="{NOTE}"] button')[0].click()
    wait(browser, lambda b: "Day 1" in b.find_element(By.ID, "artifact-view").text)
    panels["artifact_view"] = browser.find_element(By.ID, "artifact-view").text
    browser.save_screenshot(str(shots / f"{len(TURNS) + 1:02d}-first-session-resumed.png"))
    return seen, panels


async def test_the_demo_conversation_through_the_ui(
    browser: Any, output_dir: Path, tmp_path: Path
) -> None:
    config = load_config(REPO_ROOT / "mesh.toml")
    config = dataclasses.replace(
        config,
        state_dir=tmp_path,
        sessions="",
        artifacts="",
        model="offline",
        services=tuple(dataclasses.replace(s, port=0) for s in config.services),
        gateway=GatewaySpec(port=0, apps={"travel_desk": "concierge"}),
    )
    shots = output_dir / "demo"
    shots.mkdir(exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    logs: list[str] = []
    async with Mesh(
        config,
        log=lambda service, line: logs.append(f"{service}: {line}"),
        env={"ADK_MESH_TRACE_DIR": str(tmp_path / "traces")},
    ) as mesh:
        assert mesh.gateway_url
        # The browser waits block: off the loop that reads the services' output.
        seen, panels = await asyncio.to_thread(converse, browser, mesh.gateway_url, shots)

    prefs, plan, fares, save, read, clock, run, budget, luggage = seen
    assert all("[offline model]" in turn.text for turn in seen), [t.text for t in seen]
    assert len({turn.invocation_id for turn in seen}) == len(TURNS)
    assert "user:pace = relaxed" in prefs.text  # the state delta, on its event

    # The transfer to the planner's service, and its AgentTool delegation to the writer's,
    # marked in the events from the trace, and both hops in the waterfall.
    assert "concierge" in plan.authors and "trip_planner" in plan.authors
    assert "control goes to trip_planner" in plan.text
    assert plan.delegations and "AgentTool delegation to itinerary_writer" in plan.delegations[0]
    # Each service reports as adk-mesh-<name>; the gateway's own spans are the root.
    assert plan.services[0] == "adk-mesh-gateway"
    assert {"adk-mesh-concierge", "adk-mesh-planner", "adk-mesh-writer"} <= set(plan.services)
    assert plan.span_rows[0] == ("adk-mesh-gateway", "POST /run_sse", 0)
    first_depth: dict[str, int] = {}
    for service, _, level in plan.span_rows:
        first_depth.setdefault(service, level)
    assert (
        first_depth["adk-mesh-gateway"]
        < first_depth["adk-mesh-concierge"]
        < first_depth["adk-mesh-planner"]
        < first_depth["adk-mesh-writer"]
    ), plan.span_rows

    # Tool progress from the tool service, two hops away, as progress events.
    assert any("checking SkyLark" in text for text in fares.progress), fares.progress
    assert "adk-mesh-tools" in fares.services

    assert f"{NOTE} saved as version 1" in save.text
    assert "Day 1:" in read.text
    assert "control goes to logistics" in clock.text and "time_difference: +" in clock.text
    assert "miles" in run.text and "= 600" in budget.text
    assert "lb" in luggage.text  # user:units, remembered across sessions

    assert panels["state"]["user:pace"].endswith("relaxed")
    assert "itinerary" in panels["state"]
    assert NOTE in panels["artifacts"]
    assert "user:units" in panels["second_state"]
    assert "itinerary" not in panels["second_state"]
    assert panels["resumed"] == [turn.invocation_id for turn in seen[:-1]]
    assert "Day 1:" in panels["artifact_view"]
    assert panels["errors"] == []
    assert len(list(shots.glob("*.png"))) == len(TURNS) + 1
