"""The memory tools ADK users know: ``load_memory`` and ``preload_memory``.

Both search the user's long-term memory through the tool context
(:meth:`~adk_mesh.contexts.ToolContext.search_memory`): the memory service of the Runner, or,
for an agent or tool serving another service's run, the root's memory over the call itself.
Without a memory service they find nothing.

* ``load_memory`` is a tool the model calls with a query; it answers
  ``{"memories": [{"content": ..., "author": ..., "timestamp": ..., "session_id": ...}]}``,
  best match first (each content without the built-in tool calls and results a provider ran
  and the reasoning, which are that model's own context, and with each inline attachment
  named by a line of text rather than its bytes), and tells the model, in the system
  instruction, that it has memory.
* ``preload_memory`` is not called by the model: before each model call it searches memory
  with the user's current message and adds what it finds to the system instruction, between
  ``<PAST_CONVERSATIONS>`` tags. A failing search is logged and the request goes without.

Each takes ``max_memories`` (20 unless told otherwise; ``None``: every match), so that a
common word does not pour a user's whole history into one request; it is the search's
``limit``, so the store (the root's, across the mesh) reads and sends no more than that.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.tools.base import BaseTool
from adk_mesh.types import Part

if TYPE_CHECKING:
    from adk_mesh.contexts import ToolContext
    from adk_mesh.memory.base import MemoryEntry
    from adk_mesh.models.base import LlmRequest

__all__ = [
    "DEFAULT_MAX_MEMORIES",
    "LoadMemoryTool",
    "PreloadMemoryTool",
    "load_memory",
    "preload_memory",
]

logger = logging.getLogger("adk_mesh.tools")

#: How many memories one search brings by default.
DEFAULT_MAX_MEMORIES = 20

_LOAD_MEMORY_INSTRUCTION = (
    "You have a long-term memory of your past conversations with this user. When answering "
    "needs something from them, call load_memory with a query of the words to look for."
)


def _check_max(max_memories: int | None) -> int | None:
    if max_memories is not None and max_memories < 1:
        raise ConfigError(f"max_memories must be 1 or more (or None), not {max_memories}")
    return max_memories


class LoadMemoryTool(BaseTool):
    """``load_memory(query)``: the model searches the user's memory.

    Args:
        max_memories: the most memories one call returns (best first); ``None``: all.
    """

    def __init__(self, *, max_memories: int | None = DEFAULT_MAX_MEMORIES) -> None:
        super().__init__(
            "load_memory",
            "Search the memory of past conversations with the user and return what matches.",
        )
        self.max_memories = _check_max(max_memories)

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words to look for in past conversations.",
                }
            },
            "required": ["query"],
        }

    def process_llm_request(self, request: LlmRequest) -> None:
        super().process_llm_request(request)
        request.append_instruction(_LOAD_MEMORY_INSTRUCTION)

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("load_memory needs a query: the words to look for, as a string")
        # The store finds at most max_memories (in its query), not every match.
        entries = await ctx.search_memory(query, limit=self.max_memories)
        return {"memories": [_memory_json(entry) for entry in entries]}


class PreloadMemoryTool(BaseTool):
    """Adds the memories that match the user's current message to every model request.

    Not a function the model calls: it declares nothing, and calling it anyway is an error
    the model reads.

    Args:
        max_memories: the most memories added (best first); ``None``: all.
    """

    def __init__(self, *, max_memories: int | None = DEFAULT_MAX_MEMORIES) -> None:
        super().__init__(
            "preload_memory",
            "Adds relevant past conversations with the user to each request (not callable).",
        )
        self.max_memories = _check_max(max_memories)

    def process_llm_request(self, request: LlmRequest) -> None:
        """Declares nothing: the work is in :meth:`prepare_llm_request`."""

    async def prepare_llm_request(self, ctx: ToolContext, request: LlmRequest) -> None:
        message = ctx.user_content
        query = message.text if message is not None else ""
        if not query.strip():
            return
        try:
            entries = await ctx.search_memory(query, limit=self.max_memories)
        except Exception as error:
            logger.warning(
                "preload_memory: the memory search failed; the request goes without past "
                "conversations [invocation=%s]: %s",
                ctx.invocation_id,
                getattr(error, "message", None) or type(error).__name__,
            )
            return
        lines = [line for entry in entries for line in _memory_lines(entry)]
        if not lines:
            return
        past = "\n".join(lines)
        request.append_instruction(
            "Here is what was said in earlier conversations with the user that may help with "
            "the current message (best match first):\n"
            f"<PAST_CONVERSATIONS>\n{past}\n</PAST_CONVERSATIONS>"
        )

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise ToolError(
            "preload_memory is not a function to call: past conversations are already in "
            "the instructions"
        )


def _memory_json(entry: MemoryEntry) -> dict[str, Any]:
    """An entry as ``load_memory`` answers it: its content without what only the model of
    that turn reads — the calls and results of built-in tools a provider ran
    (``server_tool_call`` / ``server_tool_response``, such as Claude's encrypted search
    results), its reasoning (thought parts) and thought signatures — and with each inline
    attachment (an image, a PDF) named by a line of text instead of its bytes: the answer
    stays in the session and goes back to the model on every later call, where base64 of a
    photo is megabytes no model reads as a photo. The answer they grounded stays."""
    content = entry.content
    if any(_not_kept_whole(part) for part in content.parts):
        parts = [_remembered(part) for part in content.parts if not _left_out(part)]
        entry = entry.model_copy(update={"content": content.model_copy(update={"parts": parts})})
    return entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def _left_out(part: Part) -> bool:
    return part.is_server_tool or part.thought


def _not_kept_whole(part: Part) -> bool:
    return _left_out(part) or part.inline_data is not None or part.thought_signature is not None


def _remembered(part: Part) -> Part:
    if part.inline_data is not None:
        blob = part.inline_data
        return Part.from_text(f"[attachment: {blob.mime_type}, {len(blob.data)} bytes]")
    if part.thought_signature is not None:
        return part.model_copy(update={"thought_signature": None})
    return part


def _memory_lines(entry: MemoryEntry) -> list[str]:
    text = entry.content.text.strip()
    if not text:
        return []
    lines = []
    if entry.timestamp is not None:
        lines.append(f"Time: {entry.timestamp.isoformat(timespec='seconds')}")
    lines.append(f"{entry.author}: {text}" if entry.author else text)
    return lines


#: The shared instances, as google-adk's ``load_memory`` and ``preload_memory``.
load_memory = LoadMemoryTool()
preload_memory = PreloadMemoryTool()
