"""A service whose model writes a log line on every call (console log correlation)."""

from __future__ import annotations

import logging

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from tests.e2e.apps._common import first_user_text

logger = logging.getLogger(__name__)


async def _answer(request: LlmRequest) -> str:
    logger.warning("the model was asked %r", first_user_text(request))
    return "noted"


root_agent = LlmAgent(
    name="chatty", description="Logs, then answers.", model=FunctionModel(_answer)
)
