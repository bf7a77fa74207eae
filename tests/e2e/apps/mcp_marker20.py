"""A tool service fronting one stdio MCP server that notes its starts:
``adk-mesh serve tools tests.e2e.apps.mcp_marker20:tools``.

The server (``tests/integration/mcp_interop/marker_server20.py``) appends its process id to
``$ADK_E2E_DIR/mcp-starts`` as it starts; with ``ADK_E2E_MARKER_HANG=1`` it then never
answers, so the service's warm-up waits on it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from adk_mesh import McpToolset

MARKER_SERVER = Path(__file__).resolve().parents[2] / "integration/mcp_interop/marker_server20.py"
hang = ["--hang"] if os.environ.get("ADK_E2E_MARKER_HANG") == "1" else []

tools = McpToolset(
    command=sys.executable,
    args=[str(MARKER_SERVER), str(Path(os.environ["ADK_E2E_DIR"]) / "mcp-starts"), *hang],
    name="marker",
)
