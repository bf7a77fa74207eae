"""Tools: the BaseTool and Toolset contracts, FunctionTool, AgentTool and the built-in tools."""

from __future__ import annotations

from adk_mesh.tools.agent_tool import AgentTool, StateMergePolicy
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.builtin import (
    ExitLoopTool,
    GoogleSearchTool,
    LoadArtifactsTool,
    TransferToAgentTool,
)
from adk_mesh.tools.function_tool import FunctionTool

__all__ = [
    "AgentTool",
    "BaseTool",
    "ExitLoopTool",
    "FunctionTool",
    "GoogleSearchTool",
    "LoadArtifactsTool",
    "StateMergePolicy",
    "Toolset",
    "TransferToAgentTool",
]
