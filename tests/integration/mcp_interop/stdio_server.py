"""A small stdio MCP server for the tests: ``python stdio_server.py``.

``echo`` answers with its text, ``die`` ends the server's process in the middle of the call (a
server that crashes), ``pid`` names the process serving (a new one after a restart).
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-stdio")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def pid() -> int:
    """The id of the server's process."""
    return os.getpid()


@server.tool()
def die() -> str:
    """End the server's process during the call."""
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
