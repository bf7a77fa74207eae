"""A stdio MCP server that notes each start: ``python marker_server20.py FILE [--hang]``.

As it starts, before it reads or answers anything, it appends a line with its process id to
FILE, so a test reads how often (and whether yet) its toolset started it, and which process
serves. ``ping`` answers ``pong``. With ``--hang`` it never answers at all: a server whose
opening exchange does not end (an ``npx`` server still downloading).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("marker")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    with Path(sys.argv[1]).open("a") as marker:
        marker.write(f"{os.getpid()}\n")
    if "--hang" in sys.argv[2:]:
        # Waits for a signal, never for its stdin: only the toolset's kill ends it.
        while True:
            signal.pause()
    server.run("stdio")
