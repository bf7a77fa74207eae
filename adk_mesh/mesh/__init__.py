"""The gRPC mesh: serve agents and tools, and use remote ones as if they were local.

* :class:`ToolServer` serves tools (or a Toolset) over ``adk_mesh.v1.ToolService``;
  :class:`RemoteToolset` is the Toolset that uses them from another process.
* :class:`AgentServer` serves an agent tree over ``adk_mesh.v1.AgentService`` (root runs with
  a persisted session, delegated runs that persist nothing); :class:`RemoteAgent` is the
  BaseAgent that delegates to one, as a transfer target or inside an AgentTool.
* What a server allows: :class:`ServerLimits` (model calls per invocation, delegation depth,
  id length, tool timeout); a caller may lower them, never raise them.
* Who may call what: :class:`ServerSecurity` (TLS with :class:`ServerTLS`, the mesh door's
  allow-list, end-user :class:`Authenticator`\\ s); clients connect with :class:`ClientTLS`.
* :func:`open_channel`: a traced ``grpc.aio`` channel with the mesh's TLS (renewed when its
  files change), for calling the services with the generated stubs directly.
"""

from __future__ import annotations

from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._limits import ServerLimits
from adk_mesh.mesh.agent_server import AgentServer
from adk_mesh.mesh.auth import (
    ApiKeyAuthenticator,
    Authenticator,
    JwtAuthenticator,
    Principal,
    new_api_key,
)
from adk_mesh.mesh.remote_agent import RemoteAgent
from adk_mesh.mesh.remote_toolset import RemoteToolset
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.mesh.tool_server import ToolServer

__all__ = [
    "AgentServer",
    "ApiKeyAuthenticator",
    "Authenticator",
    "ClientTLS",
    "JwtAuthenticator",
    "Principal",
    "RemoteAgent",
    "RemoteToolset",
    "ServerLimits",
    "ServerSecurity",
    "ServerTLS",
    "ToolServer",
    "new_api_key",
    "open_channel",
]
