"""The gateway tells a refused client when to try again: ``Retry-After`` on a 429 or 503 whose
error carries a retry delay (a busy agent service, the artifact budget, a provider's rate
limit), whole seconds rounded up, and the same delay in the problem's metadata."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ArtifactsBusyError,
    LlmCallLimitError,
    ModelRateLimitError,
    ServerBusyError,
    ToolError,
)
from adk_mesh.mesh import AgentServer
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from gateway import GatewaySettings
from gateway._problems import problem_response
from tests.gateway.conftest import serve_gateway


class Waiter:
    """A model whose turns wait until released; ``started`` is set by the first."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.turns = 0

    async def __call__(self, request: LlmRequest) -> str:
        self.turns += 1
        self.started.set()
        await self.release.wait()
        return "done"


def body(session: str) -> dict[str, object]:
    return {
        "appName": "app",
        "userId": "ada",
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": "hi"}]},
    }


async def test_a_busy_agent_service_is_a_429_with_retry_after() -> None:
    model = Waiter()
    server = AgentServer(LlmAgent(name="helper", model=FunctionModel(model)), app_name="app")
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    settings = GatewaySettings(apps={"app": f"127.0.0.1:{port}"}, sse_ping_seconds=0)
    try:
        async with (
            serve_gateway(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            held = asyncio.ensure_future(client.post("/run", json=body("s1")))
            await asyncio.wait_for(model.started.wait(), 10)
            refused = await client.post("/run", json=body("s2"))
            model.release.set()
            answered = await held
    finally:
        model.release.set()
        await server.stop(None)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    problem = refused.json()
    assert refused.headers["content-type"] == "application/problem+json"
    assert (problem["reason"], problem["status"]) == ("SERVER_BUSY", 429)
    assert problem["metadata"] == {"retry_delay_seconds": "1"}
    assert problem["detail"].startswith("busy: this server runs 1 calls at once")
    # The refused run never ran; the held one went on to its end.
    assert model.turns == 1
    assert answered.status_code == 200
    assert "retry-after" not in answered.headers


@pytest.mark.parametrize(
    ("error", "status", "retry_after"),
    [
        (ServerBusyError("busy"), 429, "1"),
        (ArtifactsBusyError("no room"), 429, "3"),
        (ModelRateLimitError("slow down", status_code=429), 429, None),  # provider said nothing
        (LlmCallLimitError("used up"), 429, None),
        (AdkIOError("unavailable"), 503, None),
    ],
)
def test_retry_after_comes_from_the_errors_own_delay(
    error: AdkError, status: int, retry_after: str | None
) -> None:
    response = problem_response(error)
    assert response.status_code == status
    assert response.headers.get("retry-after") == retry_after


@pytest.mark.parametrize(
    ("delay", "header"), [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2"), (7.5, "8")]
)
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(
    delay: float, header: str
) -> None:
    for error in (ModelRateLimitError("slow down", status_code=429), AdkIOError("busy peer")):
        error.retry_delay = delay
        response = problem_response(error)
        assert response.status_code in (429, 503)
        assert response.headers["retry-after"] == header
        problem = json.loads(bytes(response.body))
        assert float(problem["metadata"]["retry_delay_seconds"]) == delay


def test_no_retry_after_on_other_statuses_or_without_a_delay() -> None:
    failed = ToolError("a tool failed")
    failed.retry_delay = 2.0  # a 500 is not "try again later"
    assert "retry-after" not in problem_response(failed).headers
    kept = ModelRateLimitError("quota", status_code=429, metadata={"provider": "openai"})
    problem = json.loads(bytes(problem_response(kept).body))
    assert problem["metadata"] == {"provider": "openai", "status_code": "429"}
