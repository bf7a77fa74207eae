"""adk-mesh: the Agent Development Kit model in Python, as a gRPC microservice mesh.

Every public name below is importable from here. Each is loaded on first use (as pydantic's
package does), so importing a part of the package — the generated protobuf code in
``adk_mesh.v1``, say, for a client in a hurry — does not load the whole runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from adk_mesh._version import __version__

if TYPE_CHECKING:
    from adk_mesh.agents import (
        BaseAgent,
        LlmAgent,
        LoopAgent,
        ParallelAgent,
        SequentialAgent,
    )
    from adk_mesh.artifacts import (
        ArtifactService,
        FileArtifactService,
        InMemoryArtifactService,
        artifact_service_from_url,
    )
    from adk_mesh.contexts import (
        CallbackContext,
        InvocationContext,
        ReadonlyContext,
        RunConfig,
        StreamingMode,
        ToolContext,
    )
    from adk_mesh.errors import (
        AdkError,
        AdkIOError,
        AdkJSONError,
        AgentError,
        AgentNotFoundError,
        AlreadyExistsError,
        ArtifactError,
        ArtifactNotFoundError,
        ConfigError,
        DeadlineExceededError,
        DelegationError,
        InvalidArgumentError,
        InvocationCancelledError,
        LlmCallLimitError,
        ModelAuthError,
        ModelError,
        ModelRateLimitError,
        ModelRequestError,
        NotFoundError,
        PermissionDeniedError,
        SessionConflictError,
        SessionError,
        SessionNotFoundError,
        StateConflictError,
        ToolError,
        ToolNotFoundError,
        UnauthenticatedError,
    )
    from adk_mesh.memory import (
        InMemoryMemoryService,
        MemoryEntry,
        MemoryService,
    )
    from adk_mesh.models.base import (
        GenerateContentConfig,
        Llm,
        LlmRequest,
    )
    from adk_mesh.runner import (
        Runner,
    )
    from adk_mesh.sessions import (
        InMemorySessionService,
        Session,
        SessionService,
        SqliteSessionService,
        session_service_from_url,
    )
    from adk_mesh.state import (
        State,
    )
    from adk_mesh.tools import (
        AgentTool,
        BaseTool,
        ExitLoopTool,
        FunctionTool,
        GoogleSearchTool,
        LoadArtifactsTool,
        StateMergePolicy,
        Toolset,
    )
    from adk_mesh.types import (
        Blob,
        Content,
        Event,
        EventActions,
        FileData,
        FinishReason,
        FunctionCall,
        FunctionResponse,
        LlmResponse,
        Part,
        ToolDeclaration,
        UsageMetadata,
    )

# Each public name, by the module that defines it.
_EXPORTS: dict[str, str] = {
    "BaseAgent": "adk_mesh.agents",
    "LlmAgent": "adk_mesh.agents",
    "LoopAgent": "adk_mesh.agents",
    "ParallelAgent": "adk_mesh.agents",
    "SequentialAgent": "adk_mesh.agents",
    "ArtifactService": "adk_mesh.artifacts",
    "FileArtifactService": "adk_mesh.artifacts",
    "InMemoryArtifactService": "adk_mesh.artifacts",
    "artifact_service_from_url": "adk_mesh.artifacts",
    "CallbackContext": "adk_mesh.contexts",
    "InvocationContext": "adk_mesh.contexts",
    "ReadonlyContext": "adk_mesh.contexts",
    "RunConfig": "adk_mesh.contexts",
    "StreamingMode": "adk_mesh.contexts",
    "ToolContext": "adk_mesh.contexts",
    "AdkError": "adk_mesh.errors",
    "AdkIOError": "adk_mesh.errors",
    "AdkJSONError": "adk_mesh.errors",
    "AgentError": "adk_mesh.errors",
    "AgentNotFoundError": "adk_mesh.errors",
    "AlreadyExistsError": "adk_mesh.errors",
    "ArtifactError": "adk_mesh.errors",
    "ArtifactNotFoundError": "adk_mesh.errors",
    "ConfigError": "adk_mesh.errors",
    "DeadlineExceededError": "adk_mesh.errors",
    "DelegationError": "adk_mesh.errors",
    "InvalidArgumentError": "adk_mesh.errors",
    "InvocationCancelledError": "adk_mesh.errors",
    "LlmCallLimitError": "adk_mesh.errors",
    "ModelAuthError": "adk_mesh.errors",
    "ModelError": "adk_mesh.errors",
    "ModelRateLimitError": "adk_mesh.errors",
    "ModelRequestError": "adk_mesh.errors",
    "NotFoundError": "adk_mesh.errors",
    "SessionConflictError": "adk_mesh.errors",
    "SessionError": "adk_mesh.errors",
    "SessionNotFoundError": "adk_mesh.errors",
    "StateConflictError": "adk_mesh.errors",
    "ToolError": "adk_mesh.errors",
    "ToolNotFoundError": "adk_mesh.errors",
    "UnauthenticatedError": "adk_mesh.errors",
    "PermissionDeniedError": "adk_mesh.errors",
    "InMemoryMemoryService": "adk_mesh.memory",
    "MemoryEntry": "adk_mesh.memory",
    "MemoryService": "adk_mesh.memory",
    "GenerateContentConfig": "adk_mesh.models.base",
    "Llm": "adk_mesh.models.base",
    "LlmRequest": "adk_mesh.models.base",
    "Runner": "adk_mesh.runner",
    "InMemorySessionService": "adk_mesh.sessions",
    "Session": "adk_mesh.sessions",
    "SessionService": "adk_mesh.sessions",
    "SqliteSessionService": "adk_mesh.sessions",
    "session_service_from_url": "adk_mesh.sessions",
    "State": "adk_mesh.state",
    "AgentTool": "adk_mesh.tools",
    "BaseTool": "adk_mesh.tools",
    "ExitLoopTool": "adk_mesh.tools",
    "FunctionTool": "adk_mesh.tools",
    "GoogleSearchTool": "adk_mesh.tools",
    "LoadArtifactsTool": "adk_mesh.tools",
    "StateMergePolicy": "adk_mesh.tools",
    "Toolset": "adk_mesh.tools",
    "Blob": "adk_mesh.types",
    "Content": "adk_mesh.types",
    "Event": "adk_mesh.types",
    "EventActions": "adk_mesh.types",
    "FileData": "adk_mesh.types",
    "FinishReason": "adk_mesh.types",
    "FunctionCall": "adk_mesh.types",
    "FunctionResponse": "adk_mesh.types",
    "LlmResponse": "adk_mesh.types",
    "Part": "adk_mesh.types",
    "ToolDeclaration": "adk_mesh.types",
    "UsageMetadata": "adk_mesh.types",
}

__all__ = [
    "AdkError",
    "AdkIOError",
    "AdkJSONError",
    "AgentError",
    "AgentNotFoundError",
    "AgentTool",
    "AlreadyExistsError",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ArtifactService",
    "BaseAgent",
    "BaseTool",
    "Blob",
    "CallbackContext",
    "ConfigError",
    "Content",
    "DeadlineExceededError",
    "DelegationError",
    "Event",
    "EventActions",
    "ExitLoopTool",
    "FileArtifactService",
    "FileData",
    "FinishReason",
    "FunctionCall",
    "FunctionResponse",
    "FunctionTool",
    "GenerateContentConfig",
    "GoogleSearchTool",
    "InMemoryArtifactService",
    "InMemoryMemoryService",
    "InMemorySessionService",
    "InvalidArgumentError",
    "InvocationCancelledError",
    "InvocationContext",
    "Llm",
    "LlmAgent",
    "LlmCallLimitError",
    "LlmRequest",
    "LlmResponse",
    "LoadArtifactsTool",
    "LoopAgent",
    "MemoryEntry",
    "MemoryService",
    "ModelAuthError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "NotFoundError",
    "ParallelAgent",
    "Part",
    "PermissionDeniedError",
    "ReadonlyContext",
    "RunConfig",
    "Runner",
    "SequentialAgent",
    "Session",
    "SessionConflictError",
    "SessionError",
    "SessionNotFoundError",
    "SessionService",
    "SqliteSessionService",
    "State",
    "StateConflictError",
    "StateMergePolicy",
    "StreamingMode",
    "ToolContext",
    "ToolDeclaration",
    "ToolError",
    "ToolNotFoundError",
    "Toolset",
    "UnauthenticatedError",
    "UsageMetadata",
    "__version__",
    "artifact_service_from_url",
    "session_service_from_url",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adk_mesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
