"""The gRPC mesh: serve agents and tools, and use remote ones as if they were local.

* :class:`ToolServer` serves tools (or a Toolset) over ``adk_mesh.v1.ToolService``;
  :class:`RemoteToolset` is the Toolset that uses them from another process.
* :class:`AgentServer` serves an agent tree over ``adk_mesh.v1.AgentService`` (root runs with
  a persisted session, delegated runs that persist nothing); :class:`RemoteAgent` is the
  BaseAgent that delegates to one, as a transfer target or inside an AgentTool.
"""

from __future__ import annotations

from adk_mesh.mesh.agent_server import AgentServer
from adk_mesh.mesh.remote_agent import RemoteAgent
from adk_mesh.mesh.remote_toolset import RemoteToolset
from adk_mesh.mesh.tool_server import ToolServer

__all__ = ["AgentServer", "RemoteAgent", "RemoteToolset", "ToolServer"]
