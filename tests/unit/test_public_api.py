"""Pins the public exports of adk_mesh: removing or renaming one is a breaking change."""

from __future__ import annotations

import ast

import adk_mesh

EXPECTED = {
    "AdkError", "AdkIOError", "AdkJSONError", "AgentError", "AgentTool", "ArtifactError",
    "ArtifactService", "BaseAgent", "BaseTool", "Blob", "CallbackContext", "ConfigError",
    "Content", "DelegationError", "Event", "EventActions", "ExitLoopTool", "FileArtifactService",
    "FileData", "FinishReason", "FunctionCall", "FunctionResponse", "FunctionTool",
    "GenerateContentConfig", "GoogleSearchTool", "InMemoryArtifactService",
    "InMemoryMemoryService", "InMemorySessionService", "InvalidArgumentError",
    "InvocationContext", "Llm", "LlmAgent", "LlmRequest", "LlmResponse", "LoadArtifactsTool",
    "LoopAgent", "MemoryEntry", "MemoryService", "ModelError", "ParallelAgent", "Part",
    "ReadonlyContext", "RunConfig", "Runner", "SequentialAgent", "Session", "SessionError",
    "SessionService", "SqliteSessionService", "State", "StateMergePolicy", "StreamingMode",
    "ToolContext", "ToolDeclaration", "ToolError", "Toolset", "UsageMetadata", "__version__",
    "artifact_service_from_url", "session_service_from_url",
    # Memory (issue 14): the SQLite FTS5 store, the factory and the memory tools.
    "SqliteMemoryService", "memory_service_from_url", "LoadMemoryTool", "PreloadMemoryTool",
    "load_memory", "preload_memory",
    # The whole error tree.
    "AgentNotFoundError", "AlreadyExistsError", "ArtifactNotFoundError", "ArtifactTooLargeError",
    "ArtifactsBusyError", "DeadlineExceededError", "InvocationCancelledError", "NotFoundError",
    "SessionNotFoundError", "StateConflictError", "SessionConflictError", "ToolNotFoundError",
    "UnauthenticatedError", "PermissionDeniedError", "LlmCallLimitError", "ModelAuthError",
    "ModelRateLimitError", "ModelRequestError",
    # Overload refusals a client can act on (issue 20): refused before it ran.
    "ServerBusyError",
    # Interoperation (issue 17): any A2A agent as an agent of the tree.
    "A2aAgent",
    # Plugins and tool confirmation (issue 18 items 5-6).
    "Plugin", "LoggingPlugin", "ReflectAndRetryToolPlugin", "ToolConfirmation",
    # Interoperation (issue 17): an MCP server's tools as a Toolset.
    "McpToolset",
    # Credentials (issue 20 item 4): tools get API keys and tokens by name.
    "Credential", "CredentialService", "EnvironmentCredentialService", "FileCredentialService",
    "ChainCredentialService", "StaticCredentialService",
    # Provider-native tools and the grounding they return (issue 20 items 1, 3).
    "WebSearchTool", "UrlContextTool", "CodeExecutionTool", "GroundingMetadata",
}  # fmt: skip


def test_public_exports_are_pinned() -> None:
    assert set(adk_mesh.__all__) == EXPECTED
    for name in adk_mesh.__all__:
        assert getattr(adk_mesh, name) is not None


def test_the_whole_error_tree_is_exported_and_shadows_nothing() -> None:
    import asyncio
    import builtins

    from adk_mesh import errors

    tree = {name for name in errors.__all__ if name[0].isupper() and name.endswith("Error")}
    assert tree <= set(adk_mesh.__all__)
    assert len(tree) == 30
    standard = set(dir(builtins)) | set(dir(asyncio))
    assert tree.isdisjoint(standard), tree & standard


def test_the_generated_code_imports_without_the_runtime() -> None:
    """A client that needs only the messages and stubs pays for protobuf and grpc, no more."""
    import subprocess
    import sys

    code = (
        "import sys, adk_mesh.v1.agent_pb2_grpc, adk_mesh.v1.tool_pb2_grpc;"
        "print(sorted(m for m in sys.modules if m.startswith(('adk_mesh', 'pydantic', 'httpx'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = ast.literal_eval(result.stdout)
    assert [name for name in loaded if not name.startswith("adk_mesh.v1")] == [
        "adk_mesh",
        "adk_mesh._version",
    ]


def test_runtime_never_imports_grpc() -> None:
    import subprocess
    import sys

    code = (
        "import sys, adk_mesh, adk_mesh.testing, adk_mesh.models;"
        "bad = sorted(m for m in sys.modules if m == 'grpc' or m.startswith(('grpc.', "
        "'adk_mesh.mesh')));"
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
