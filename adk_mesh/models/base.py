"""The Llm interface and the request a model receives."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adk_mesh.types import Content, LlmResponse, ToolDeclaration

__all__ = ["TURN_INSTRUCTION_MARK", "BuiltinTool", "GenerateContentConfig", "Llm", "LlmRequest"]

#: How an agent's instruction starts when it travels among the contents instead of in the
#: system instruction (an agent with a ``static_instruction`` keeps that one unchanged, request
#: after request, for the provider's prompt cache): a user content, labelled so the model does
#: not take it for the user's words. Models that read the conversation (the offline model) skip
#: it.
TURN_INSTRUCTION_MARK = "[Instruction for this turn, from the system, not the user's words]"


class BuiltinTool(StrEnum):
    """Provider-native tools, declared through the Tool API and run by the provider.

    The public tools that declare them live in :mod:`adk_mesh.tools.native`; each provider
    sends them in its own way (Gemini's ``google_search`` / ``url_context`` /
    ``code_execution``, Anthropic's versioned server tools, OpenAI Responses' ``web_search``)
    and reports what they found as :class:`~adk_mesh.types.GroundingMetadata`.
    """

    #: Gemini's Google Search grounding (``GoogleSearchTool``): Gemini only.
    GOOGLE_SEARCH = "google_search"
    #: Web search run by the provider (``WebSearchTool``).
    WEB_SEARCH = "web_search"
    #: Fetching the pages at URLs the conversation names (``UrlContextTool``).
    URL_CONTEXT = "url_context"
    #: Running code the model writes in the provider's sandbox (``CodeExecutionTool``).
    CODE_EXECUTION = "code_execution"


class GenerateContentConfig(BaseModel):
    """Sampling and output settings. ``None`` leaves the provider's default."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = None
    max_output_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    #: Ask for JSON output ("application/json"); with ``response_schema``, JSON of that schema.
    response_mime_type: str | None = None
    #: The JSON Schema (of an object) the answer must follow: each provider asks for it in its
    #: own way (Gemini's response schema, OpenAI's ``json_schema`` response format, a tool
    #: Anthropic is made to call, Ollama's ``format``); the answer's text is the JSON.
    response_schema: dict[str, Any] | None = None
    #: What the schema is called where a provider names it (OpenAI's ``json_schema.name``, the
    #: Anthropic tool); ``None``: ``"final_response"``.
    response_schema_name: str | None = None


class LlmRequest(BaseModel):
    """What a model is asked: the conversation, the tools, the system prompt and the config."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    contents: list[Content] = Field(default_factory=list)
    tools: list[ToolDeclaration] = Field(default_factory=list)
    builtin_tools: list[BuiltinTool] = Field(default_factory=list)
    system_instruction: str | None = None
    config: GenerateContentConfig = Field(default_factory=GenerateContentConfig)

    def append_instruction(self, text: str) -> None:
        """Add a paragraph to the system instruction."""
        if not text:
            return
        self.system_instruction = (
            f"{self.system_instruction}\n\n{text}" if self.system_instruction else text
        )


class Llm(abc.ABC):
    """A language model provider.

    ``generate_content`` is an async generator. With ``stream=False`` it yields exactly one
    complete response. With ``stream=True`` it yields partial responses (``partial=True``) as
    the provider sends them, then one final aggregated response with ``turn_complete=True``
    that holds the whole content (text joined, function calls assembled) and usage.

    Failures raise :class:`~adk_mesh.errors.ModelError` (with the HTTP status when there was
    one). Closing the generator (``aclose``) or cancelling the task that iterates it must stop
    the underlying request at once. Implementations are safe to share between concurrent
    invocations.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]: ...

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool | None:
        """Whether this model can run the provider-native ``tool``: an agent with a tool its
        model cannot run fails at construction rather than at its first model call. ``None``
        (the default) means it cannot tell: the tool is sent, and the model call fails if
        the provider refuses it."""
        return None
