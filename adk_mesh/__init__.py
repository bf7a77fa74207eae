"""adk-mesh: the Agent Development Kit model in Python, as a gRPC microservice mesh."""

from __future__ import annotations

from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    AdkJSONError,
    AgentError,
    ArtifactError,
    ConfigError,
    InvalidArgumentError,
    ModelError,
    SessionError,
    ToolError,
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
    "ArtifactError",
    "Blob",
    "ConfigError",
    "Content",
    "Event",
    "EventActions",
    "FileData",
    "FinishReason",
    "FunctionCall",
    "FunctionResponse",
    "InvalidArgumentError",
    "LlmResponse",
    "ModelError",
    "Part",
    "SessionError",
    "ToolDeclaration",
    "ToolError",
    "UsageMetadata",
    "__version__",
]
