"""Provider-native tools: capabilities the model provider runs itself, declared through the
Tool API beside FunctionTools, AgentTools and toolsets.

=====================  ==========================  ==============================================
tool                   provider                    what the provider is sent
=====================  ==========================  ==============================================
``WebSearchTool``      ``gemini/``                 ``{"google_search": {}}``
                       ``anthropic/``              ``{"type": "web_search_20250305", ...}``
                       ``openai-responses/``       ``{"type": "web_search"}``
                       ``openai/`` search models   ``web_search_options: {}``
``GoogleSearchTool``   ``gemini/``                 ``{"google_search": {}}``
``UrlContextTool``     ``gemini/``                 ``{"url_context": {}}``
                       ``anthropic/``              ``{"type": "web_fetch_20250910", ...}``
``CodeExecutionTool``  ``gemini/``                 ``{"code_execution": {}}``
                       ``anthropic/``              ``{"type": "code_execution_20250825", ...}``
                       ``openai-responses/``       ``{"type": "code_interpreter", ...}``
=====================  ==========================  ==============================================

The model decides when to use them and the provider runs them inside the model call: nothing
runs in this process, no function call or response enters the session, and what they found
comes back on the model's event as :class:`~adk_mesh.types.GroundingMetadata` (sources, search
queries, citations, code and its output), in one shape whichever provider answered.

An :class:`~adk_mesh.agents.LlmAgent` whose model cannot run one of its native tools fails at
construction with a :class:`~adk_mesh.errors.ConfigError` naming the providers that can (a
model given as a string is resolved then). A native tool inside a :class:`Toolset` is only
known at the model call; there the provider refuses it with a
:class:`~adk_mesh.errors.ModelError`.

A native tool cannot be served by a ``ToolServer`` (it is part of the model request, not a
call a tool service could answer): the server refuses it at construction. Give it to the agent
whose model runs it; a ``RemoteToolset`` never carries one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.models.base import BuiltinTool
from adk_mesh.tools.base import BaseTool

if TYPE_CHECKING:
    from adk_mesh.contexts import ToolContext
    from adk_mesh.models.base import Llm, LlmRequest

__all__ = [
    "CodeExecutionTool",
    "NativeTool",
    "UrlContextTool",
    "WebSearchTool",
    "check_native_tools",
]


class NativeTool(BaseTool):
    """A tool the model provider runs itself (see the module docs).

    Subclasses name the :class:`BuiltinTool` they declare and the providers that run it
    (``providers``: model string prefix to what the provider is sent), which the
    construction-time error lists. :meth:`execute` always fails: a model that calls the tool
    as a function reads that error.
    """

    is_builtin = True
    builtin: ClassVar[BuiltinTool]
    #: Model string prefix (``gemini``, ``anthropic``, ...) to the provider's wire name.
    providers: ClassVar[Mapping[str, str]]

    def process_llm_request(self, request: LlmRequest) -> None:
        """Ask for the built-in tool once, however many agents' tools declare it."""
        if self.builtin not in request.builtin_tools:
            request.builtin_tools.append(self.builtin)

    @classmethod
    def providers_text(cls) -> str:
        """The providers that run this tool, for error messages."""
        return ", ".join(f"{prefix}/ ({wire})" for prefix, wire in cls.providers.items())

    def check_model(self, model: Llm, *, agent: str) -> None:
        """Raise :class:`ConfigError` when ``model`` says it cannot run this tool."""
        if model.supports_builtin_tool(self.builtin) is False:
            provider = getattr(model, "provider", None) or type(model).__name__
            raise ConfigError(
                f"agent {agent!r} has the provider-native tool {self.name!r}, which "
                f"{provider} model {model.name!r} cannot run; providers that can: "
                f"{self.providers_text()}{self.alternative_text(model)}"
            )

    def alternative_text(self, model: Llm) -> str:
        """What ``model`` runs instead of this tool, for the refusal (``""``: nothing)."""
        return ""

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise ToolError(
            f"{self.name} is run by the model provider ({', '.join(self.providers)}) "
            "and cannot run locally"
        )


class WebSearchTool(NativeTool):
    """Web search run by the model provider: Gemini's Google Search grounding, Anthropic's
    web search server tool, OpenAI's Responses web search (and Chat Completions' search
    models). The sources, queries and citations come back as the event's grounding."""

    builtin = BuiltinTool.WEB_SEARCH
    providers: ClassVar[Mapping[str, str]] = {
        "gemini": "google_search",
        "anthropic": "web_search_20250305",
        "openai-responses": "web_search",
        "openai": "web_search_options, search models only",
    }

    def __init__(self) -> None:
        super().__init__("web_search", "Search the web (run by the model provider).")


class UrlContextTool(NativeTool):
    """Lets the provider fetch the pages at URLs the conversation names and read them:
    Gemini's URL context, Anthropic's web fetch server tool. The pages fetched come back as
    the event's grounding sources."""

    builtin = BuiltinTool.URL_CONTEXT
    providers: ClassVar[Mapping[str, str]] = {
        "gemini": "url_context",
        "anthropic": "web_fetch_20250910",
    }

    def __init__(self) -> None:
        super().__init__("url_context", "Read the pages at given URLs (run by the model provider).")


class CodeExecutionTool(NativeTool):
    """Lets the model write code and run it in the provider's sandbox: Gemini's code
    execution, Anthropic's code execution server tool, the Responses API's code interpreter.
    The code and its output come back as the event's grounding ``code_executions``."""

    builtin = BuiltinTool.CODE_EXECUTION
    providers: ClassVar[Mapping[str, str]] = {
        "gemini": "code_execution",
        "anthropic": "code_execution_20250825",
        "openai-responses": "code_interpreter",
    }

    def __init__(self) -> None:
        super().__init__(
            "code_execution", "Write and run code in a sandbox (run by the model provider)."
        )


def check_native_tools(tools: list[Any], model: Llm, *, agent: str) -> None:
    """Raise :class:`ConfigError` for the first native tool in ``tools`` that ``model``
    cannot run (other tools and toolsets are left alone)."""
    for tool in tools:
        if isinstance(tool, NativeTool):
            tool.check_model(model, agent=agent)
