"""Plugins: hooks that apply to every agent, model call and tool call of a runner.

A :class:`Plugin` is registered on the :class:`~adk_mesh.runner.Runner`
(``Runner(..., plugins=[...])``) or on a mesh server (``AgentServer(..., plugins=[...])``,
``ToolServer(..., plugins=[...])``, ``adk-mesh serve agent|tools ... --plugin MODULE:ATTR``).
Its hooks run before the agents' own callbacks, in registration order; the first that returns
a value wins (see :class:`Plugin` for the contract, and where each hook runs across services).

Built in:

* :class:`LoggingPlugin` — one structured ``logging`` record per hook (content only with
  ``ADK_MESH_CAPTURE_CONTENT=true``).
* :class:`ReflectAndRetryToolPlugin` — a failed tool call comes back to the model as guidance
  to correct it, up to N times per tool and invocation; then the error goes on.
"""

from __future__ import annotations

from adk_mesh.plugins.base import Plugin
from adk_mesh.plugins.logging_plugin import LoggingPlugin
from adk_mesh.plugins.reflect_retry import (
    REFLECT_AND_RETRY_RESPONSE_TYPE,
    ReflectAndRetryToolPlugin,
)

__all__ = [
    "REFLECT_AND_RETRY_RESPONSE_TYPE",
    "LoggingPlugin",
    "Plugin",
    "ReflectAndRetryToolPlugin",
]
