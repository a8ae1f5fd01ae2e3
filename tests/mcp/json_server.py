"""A real MCP server of the official Python SDK (FastMCP) over Streamable
HTTP that answers `application/json` (json_response) and keeps no sessions
(stateless_http), for host/tests/mcp_http.rs: the gateway's JSON path.

    python json_server.py PORT
"""

import sys

from mcp.server.fastmcp import FastMCP

server = FastMCP(
    "json-server",
    port=int(sys.argv[1]),
    json_response=True,
    stateless_http=True,
    log_level="WARNING",
)


@server.tool()
def echo(message: str) -> str:
    """Answers with the message."""
    return f"Echo: {message}"


@server.tool()
def big(size: int) -> str:
    """Answers with `size` letters."""
    return "x" * size


if __name__ == "__main__":
    server.run(transport="streamable-http")
