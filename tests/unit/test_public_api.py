"""Pins the public exports of adk_mesh: removing or renaming one is a breaking change."""

from __future__ import annotations

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
}  # fmt: skip


def test_public_exports_are_pinned() -> None:
    assert set(adk_mesh.__all__) == EXPECTED
    for name in adk_mesh.__all__:
        assert getattr(adk_mesh, name) is not None


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
