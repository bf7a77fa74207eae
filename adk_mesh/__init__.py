"""adk-mesh: the Agent Development Kit model in Python, as a gRPC microservice mesh."""

from __future__ import annotations

from adk_mesh.agents import BaseAgent, LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
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
    ArtifactError,
    ConfigError,
    DelegationError,
    InvalidArgumentError,
    ModelError,
    SessionError,
    ToolError,
)
from adk_mesh.memory import InMemoryMemoryService, MemoryEntry, MemoryService
from adk_mesh.models.base import GenerateContentConfig, Llm, LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions import (
    InMemorySessionService,
    Session,
    SessionService,
    SqliteSessionService,
    session_service_from_url,
)
from adk_mesh.state import State
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

__version__ = "0.1.0"

__all__ = [
    "AdkError",
    "AdkIOError",
    "AdkJSONError",
    "AgentError",
    "AgentTool",
    "ArtifactError",
    "ArtifactService",
    "BaseAgent",
    "BaseTool",
    "Blob",
    "CallbackContext",
    "ConfigError",
    "Content",
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
    "InvocationContext",
    "Llm",
    "LlmAgent",
    "LlmRequest",
    "LlmResponse",
    "LoadArtifactsTool",
    "LoopAgent",
    "MemoryEntry",
    "MemoryService",
    "ModelError",
    "ParallelAgent",
    "Part",
    "ReadonlyContext",
    "RunConfig",
    "Runner",
    "SequentialAgent",
    "Session",
    "SessionError",
    "SessionService",
    "SqliteSessionService",
    "State",
    "StateMergePolicy",
    "StreamingMode",
    "ToolContext",
    "ToolDeclaration",
    "ToolError",
    "Toolset",
    "UsageMetadata",
    "__version__",
    "artifact_service_from_url",
    "session_service_from_url",
]
