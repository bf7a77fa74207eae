"""Built-in tools: transfer_to_agent, exit_loop, load_artifacts and google_search."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from adk_mesh.errors import AdkError, ToolError
from adk_mesh.models.base import BuiltinTool
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.native import WebSearchTool

if TYPE_CHECKING:
    from adk_mesh.contexts import ToolContext
    from adk_mesh.models.base import Llm, LlmRequest

__all__ = ["ExitLoopTool", "GoogleSearchTool", "LoadArtifactsTool", "TransferToAgentTool"]

logger = logging.getLogger("adk_mesh.tools")

_TEXT_MIME_PREFIXES = ("text/",)
_TEXT_MIME_TYPES = {"application/json", "application/xml", "application/yaml", "application/csv"}
_TEXT_MIME_SUFFIXES = ("+json", "+xml", "+yaml")


class TransferToAgentTool(BaseTool):
    """Hands the conversation to another agent. Added automatically to an LlmAgent that has
    transfer targets; its schema enumerates them, so the model can only name a real one."""

    sends_events = False

    def __init__(self, agent_names: list[str]) -> None:
        super().__init__(
            "transfer_to_agent",
            "Transfer the conversation to another agent that is better suited to answer. "
            "Call it with the agent's name and say nothing else in this turn.",
        )
        self.agent_names = list(agent_names)

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "agent_name": {
                    "type": "string",
                    "enum": self.agent_names,
                    "description": "The name of the agent to transfer to.",
                }
            },
            "required": ["agent_name"],
        }

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        name = args.get("agent_name")
        if name not in self.agent_names:
            raise ToolError(
                f"cannot transfer to {name!r}; the agents you can transfer to are: "
                f"{', '.join(self.agent_names)}"
            )
        ctx.actions.transfer_to_agent = name
        return {"transferred_to": name}


class ExitLoopTool(BaseTool):
    """Ends the enclosing LoopAgent: sets ``escalate`` and ``skip_summarization``."""

    sends_events = False

    def __init__(self) -> None:
        super().__init__(
            "exit_loop",
            "Exit the current loop. Call this only when the task of the loop is complete.",
        )

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        ctx.actions.escalate = True
        ctx.actions.skip_summarization = True
        return {}


class LoadArtifactsTool(BaseTool):
    """Loads stored artifacts by name.

    Response: ``{"artifacts": [...]}`` with, per name, ``{"name", "content"}`` where content is
    the text of a text artifact, or ``{"mime_type", "data"}`` (base64) for binary data; or
    ``{"name", "error"}`` when that one could not be loaded (``"Artifact not found"`` when
    it does not exist). Before each model call the artifacts of the session are named in the
    system instruction, as google-adk does (none when there are none, or when they cannot be
    listed: that is logged and the request goes without).
    """

    def __init__(self) -> None:
        super().__init__(
            "load_artifacts",
            "Load stored artifacts (documents, images, data files) by name. "
            "Pass every name you need in artifact_names.",
        )

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "artifact_names": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Names of the artifacts to load.",
                }
            },
            "required": ["artifact_names"],
        }

    async def prepare_llm_request(self, ctx: ToolContext, request: LlmRequest) -> None:
        self.process_llm_request(request)
        if ctx.invocation_context.artifact_service is None:
            return
        try:
            names = await ctx.list_artifacts()
        except Exception as error:
            logger.warning(
                "load_artifacts: the artifacts could not be listed; the request goes without "
                "their names [invocation=%s]: %s",
                ctx.invocation_id,
                getattr(error, "message", None) or type(error).__name__,
            )
            return
        if names:
            request.append_instruction(
                f"You have a list of artifacts:\n  {json.dumps(sorted(names))}\n\n"
                "When the user asks questions about any of the artifacts, call load_artifacts "
                "with their names to load them."
            )

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        names = args.get("artifact_names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ToolError("artifact_names must be a list of artifact names (strings)")
        loaded: list[dict[str, Any]] = []
        for name in names:
            try:
                part = await ctx.load_artifact(name)
            except AdkError as error:
                loaded.append({"name": name, "error": error.message})
                continue
            if part is None:
                loaded.append({"name": name, "error": "Artifact not found"})
            elif part.text is not None:
                loaded.append({"name": name, "content": part.text})
            elif part.inline_data is not None:
                blob = part.inline_data
                if _is_text(blob.mime_type):
                    try:
                        loaded.append({"name": name, "content": blob.data.decode("utf-8")})
                        continue
                    except UnicodeDecodeError:
                        pass
                loaded.append(
                    {
                        "name": name,
                        "content": {
                            "mime_type": blob.mime_type,
                            "data": base64.b64encode(blob.data).decode("ascii"),
                        },
                    }
                )
            elif part.file_data is not None:
                loaded.append(
                    {
                        "name": name,
                        "content": {
                            "mime_type": part.file_data.mime_type,
                            "file_uri": part.file_data.file_uri,
                        },
                    }
                )
            else:
                loaded.append({"name": name, "error": "Artifact holds no loadable data"})
        return {"artifacts": loaded}


def _is_text(mime_type: str) -> bool:
    # A MIME type is case-insensitive and may carry parameters ("; charset=utf-8"); JSON and
    # XML formats are named by their structured syntax suffix (RFC 6839: "+json", "+xml").
    essence = mime_type.partition(";")[0].strip().lower()
    return (
        essence.startswith(_TEXT_MIME_PREFIXES)
        or essence in _TEXT_MIME_TYPES
        or essence.endswith(_TEXT_MIME_SUFFIXES)
    )


class GoogleSearchTool(WebSearchTool):
    """Google Search grounding, run by Gemini itself on the server side.

    It is declared to the model as Gemini's built-in ``google_search`` tool (not as a function
    declaration); the results come back inside the model's answer, with the grounding
    metadata on the response. Executing it locally is an error. Gemini only: for search on
    any provider that has it, use :class:`~adk_mesh.tools.native.WebSearchTool` (on Gemini
    it sends the same ``google_search`` tool).
    """

    builtin = BuiltinTool.GOOGLE_SEARCH
    providers: ClassVar[Mapping[str, str]] = {"gemini": "google_search"}

    def __init__(self) -> None:
        BaseTool.__init__(
            self, "google_search", "Search the web with Google Search (run by Gemini)."
        )

    def alternative_text(self, model: Llm) -> str:
        # Code written for google-adk brings GoogleSearchTool to Claude or OpenAI: say that
        # WebSearchTool searches there, not only that Gemini runs this one.
        if model.supports_builtin_tool(BuiltinTool.WEB_SEARCH) is not True:
            return ""
        return f"; model {model.name!r} searches the web with WebSearchTool instead"

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise ToolError("google_search is handled internally by Gemini and cannot run locally")
