"""The agent behind the gateway's route tests; the conversation's first message names what it
does:

* ``note <title>`` — calls ``save_note``, which saves the artifact ``<title>.md`` and sets
  ``state["last_note"]``, then answers ``saved <title>``;
* ``burst <n>`` — answers with ``n`` text parts (``n`` partial events when streamed);
* ``wait <token>`` — blocks until cancelled, writing ``<token>.started`` and
  ``<token>.cancelled`` (tests.e2e.apps._common);
* ``fail`` — the model fails (the run ends with an error);
* ``metadata`` — calls ``read_metadata`` and answers with the request metadata the run saw;
* anything else — answers ``echo: <message>``.
"""

from __future__ import annotations

import json
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import ModelRequestError
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import Content, LlmResponse, Part
from tests.e2e.apps._common import block_until_cancelled, first_user_text, responses


async def save_note(title: str, tool_context: ToolContext) -> dict[str, Any]:
    """Save a note as an artifact."""
    version = await tool_context.save_artifact(f"{title}.md", Part(text=f"# {title}\n"))
    tool_context.state["last_note"] = title
    return {"saved": f"{title}.md", "version": version}


async def read_metadata(tool_context: ToolContext) -> dict[str, Any]:
    """The request metadata this run sees."""
    return {"metadata": dict(tool_context.request_metadata)}


async def _answer(request: LlmRequest) -> LlmResponse | str:
    message = first_user_text(request)
    if message.startswith("wait "):
        await block_until_cancelled(message.removeprefix("wait "))
    if message == "fail":
        raise ModelRequestError("the model refused this request", status_code=400)
    if message.startswith("note "):
        title = message.removeprefix("note ")
        if "save_note" not in responses(request):
            return call("save_note", {"title": title})
        return f"saved {title}"
    if message == "metadata":
        seen = responses(request).get("read_metadata")
        if seen is None:
            return call("read_metadata", {})
        return f"metadata: {json.dumps(seen.response['metadata'], sort_keys=True)}"
    if message.startswith("burst "):
        count = int(message.removeprefix("burst "))
        parts = [Part(text=f"chunk {index} ") for index in range(count)]
        return LlmResponse(content=Content(role="model", parts=parts), turn_complete=True)
    return f"echo: {message}"


root_agent = LlmAgent(
    name="desk",
    description="Echoes, saves notes, bursts, waits and fails on demand.",
    model=FunctionModel(_answer),
    tools=[save_note, read_metadata],
)
