"""Helpers shared by the e2e apps: scenario reading and marker files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from adk_mesh.models.base import LlmRequest
from adk_mesh.types import FunctionResponse


def marker(name: str) -> Path:
    """A file in the directory the test gave (``$ADK_E2E_DIR``)."""
    return Path(os.environ["ADK_E2E_DIR"]) / name


def first_user_text(request: LlmRequest) -> str:
    """The message that started the conversation: it names the scenario."""
    for content in request.contents:
        if content.role == "user" and content.text:
            return content.text
    return ""


def responses(request: LlmRequest) -> dict[str, FunctionResponse]:
    """The function responses the model has seen so far, by tool name."""
    seen: dict[str, FunctionResponse] = {}
    for content in request.contents:
        for response in content.function_responses:
            seen[response.name] = response
    return seen


async def block_until_cancelled(token: str) -> None:
    """Write ``<token>.started``, wait forever; on cancellation write ``<token>.cancelled``."""
    marker(f"{token}.started").write_text("started")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        marker(f"{token}.cancelled").write_text("cancelled")
        raise
