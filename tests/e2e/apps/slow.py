"""A service whose answer waits for the test: ``wait <token>`` writes ``<token>.started``,
then answers ``released`` once the test creates ``<token>.release``."""

from __future__ import annotations

import asyncio

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from tests.e2e.apps._common import first_user_text, marker


async def _answer(request: LlmRequest) -> str:
    token = first_user_text(request).removeprefix("wait ")
    marker(f"{token}.started").write_text("started")
    release = marker(f"{token}.release")
    # The test, another process, creates the file: there is no in-process event to await.
    while not release.exists():  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return "released"


root_agent = LlmAgent(
    name="waiter", description="Answers when released.", model=FunctionModel(_answer)
)
