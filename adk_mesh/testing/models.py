"""Test doubles for models: product code, so tests and demos of any service can use them."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from adk_mesh.errors import ModelError
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.types import Content, LlmResponse, Part

__all__ = ["FunctionModel", "ScriptedModel", "call", "text"]


def text(value: str) -> LlmResponse:
    """A model answer holding ``value``."""
    return LlmResponse(content=Content(role="model", parts=[Part(text=value)]), turn_complete=True)


def call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None) -> LlmResponse:
    """A model answer calling one tool."""
    return LlmResponse(
        content=Content(role="model", parts=[Part.from_function_call(name, args or {}, id=id)]),
        turn_complete=True,
    )


def _split_for_stream(response: LlmResponse) -> list[LlmResponse]:
    """A streamed rendition: one partial per text part, then the full response."""
    chunks: list[LlmResponse] = []
    if response.content is not None:
        for part in response.content.parts:
            if part.text:
                chunks.append(
                    LlmResponse(
                        content=Content(role="model", parts=[Part(text=part.text)]), partial=True
                    )
                )
    final = response.model_copy(update={"partial": False, "turn_complete": True})
    return [*chunks, final]


class ScriptedModel(Llm):
    """Replays a fixed list of responses, one per model call, and records the requests.

    Use :meth:`assert_consumed` (or ``async with``) at the end of a test: a script that was not
    fully used means the agent stopped earlier than the test expected. Calling the model more
    times than scripted raises :class:`~adk_mesh.errors.ModelError`.
    """

    def __init__(self, responses: Sequence[LlmResponse | str], *, name: str = "scripted") -> None:
        super().__init__(name)
        self._responses = [text(r) if isinstance(r, str) else r for r in responses]
        self.requests: list[LlmRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._responses) - len(self.requests)

    def assert_consumed(self) -> None:
        if self.remaining:
            raise AssertionError(
                f"ScriptedModel {self.name!r} has {self.remaining} unused response(s)"
            )

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        index = len(self.requests)
        if index >= len(self._responses):
            raise ModelError(
                f"ScriptedModel {self.name!r} was called {index + 1} times but has only "
                f"{len(self._responses)} scripted response(s)"
            )
        self.requests.append(request)
        response = self._responses[index]
        if stream:
            for chunk in _split_for_stream(response):
                yield chunk
        else:
            yield response


ResponseFunction = Callable[[LlmRequest], "LlmResponse | str | Awaitable[LlmResponse | str]"]


class FunctionModel(Llm):
    """A model whose every answer is computed by ``fn(request)`` (sync or async)."""

    def __init__(self, fn: ResponseFunction, *, name: str = "function") -> None:
        super().__init__(name)
        self._fn = fn
        self.requests: list[LlmRequest] = []

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(request)
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        response = text(result) if isinstance(result, str) else result
        if stream:
            for chunk in _split_for_stream(response):
                yield chunk
        else:
            yield response
