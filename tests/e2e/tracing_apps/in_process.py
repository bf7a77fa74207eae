"""One invocation in this process, after ``configure_telemetry``, then exit without shutting
the telemetry down: ``python -m tests.e2e.tracing_apps.in_process``.

Prints the invocation id on stdout. The spans still buffered (a long
``OTEL_BSP_SCHEDULE_DELAY``) must reach the exporter anyway, at interpreter exit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.telemetry import configure_telemetry
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content

logger = logging.getLogger("tests.e2e.in_process")


def lookup(city: str) -> dict[str, Any]:
    """Look up the weather of a city."""
    # A log record inside the invocation (exported when OTEL_LOGS_EXPORTER asks).
    logger.warning("looking up %s", city)
    return {"city": city, "temp_c": 21}


async def main() -> None:
    agent = LlmAgent(
        name="weather",
        model=ScriptedModel([call("lookup", {"city": "Porto"}), "21 °C in Porto"]),
        tools=[lookup],
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="weather-app", user_id="u1")
    runner = Runner(agent=agent, app_name="weather-app", session_service=sessions)
    events = [
        event
        async for event in runner.run(
            user_id="u1", session_id=session.id, new_message=Content.from_text("user", "Porto?")
        )
    ]
    assert events[-1].text == "21 °C in Porto", events
    (invocation_id,) = {event.invocation_id for event in events}
    print(invocation_id, flush=True)


if __name__ == "__main__":
    configure_telemetry("in-process")
    asyncio.run(main())
    # No handle.shutdown(): the SDK's exit handler flushes what is still buffered.
