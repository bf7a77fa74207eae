"""An agent that remembers across sessions through memory: ``remember <fact>`` is noted (the
Runner adds the finished turn to memory), ``recall <words>`` calls ``load_memory`` and answers
with what it found."""

from __future__ import annotations

from adk_mesh import LlmAgent, load_memory
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import LlmResponse


def _answer(request: LlmRequest) -> LlmResponse | str:
    message = request.contents[-1]
    for response in message.function_responses:
        texts = [
            part["text"]
            for memory in response.response.get("memories", [])
            for part in memory["content"]["parts"]
            if "text" in part
        ]
        return "I recall: " + " | ".join(texts) if texts else "I recall nothing."
    text = message.text
    if text.startswith("recall "):
        return call("load_memory", {"query": text.removeprefix("recall ")})
    return "I will remember that."


root_agent = LlmAgent(
    name="rememberer",
    description="Remembers what it is told, across sessions.",
    model=FunctionModel(_answer),
    tools=[load_memory],
)
