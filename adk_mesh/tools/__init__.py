"""Tools: the BaseTool and Toolset contracts, FunctionTool, AgentTool, the built-in tools,
the memory tools (load_memory, preload_memory), the provider-native tools (web search, URL
context, code execution) and McpToolset (an MCP server's tools)."""

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
from adk_mesh.tools.mcp import McpToolset
from adk_mesh.tools.memory_tools import (
    LoadMemoryTool,
    PreloadMemoryTool,
    load_memory,
    preload_memory,
)
from adk_mesh.tools.native import (
    CodeExecutionTool,
    NativeTool,
    UrlContextTool,
    WebSearchTool,
)

__all__ = [
    "AgentTool",
    "BaseTool",
    "CodeExecutionTool",
    "ExitLoopTool",
    "FunctionTool",
    "GoogleSearchTool",
    "LoadArtifactsTool",
    "LoadMemoryTool",
    "McpToolset",
    "NativeTool",
    "PreloadMemoryTool",
    "StateMergePolicy",
    "Toolset",
    "TransferToAgentTool",
    "UrlContextTool",
    "WebSearchTool",
    "load_memory",
    "preload_memory",
]
