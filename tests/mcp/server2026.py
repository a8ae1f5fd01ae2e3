"""A 2026-07-28 MCP server made with the official Python SDK 2.x (`MCPServer`),
for host/tests/mcp_2026.rs: over stdio, or over Streamable HTTP (optionally
behind TLS with a test certificate).

    python server2026.py stdio
    python server2026.py http [--json] [--tls CERT.pem KEY.pem]

Over HTTP it listens on a free port of 127.0.0.1 and prints it, then serves
until killed. Its tools: `echo`, `big` (a long answer) and `confirm`, which
asks the client itself with an `InputRequiredResult` (its own approval, to
show that the gateway passes a server's multi-round-trip through untouched).
"""

import socket
import sys

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("server-2026", log_level="WARNING")


@server.tool()
def echo(message: str) -> str:
    """Answers with the message."""
    return f"Echo: {message}"


@server.tool()
def big(size: int) -> str:
    """Answers with `size` letters."""
    return "x" * size


@server.tool()
def confirm(what: str, ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks the client to confirm `what` (the server's own input request)."""
    answer = (ctx.input_responses or {}).get("server_confirm")
    if answer is None or ctx.request_state != "server-asked":
        ask = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=f"server: confirm {what}?",
                requested_schema={"type": "object", "properties": {}},
            )
        )
        return types.InputRequiredResult(input_requests={"server_confirm": ask}, request_state="server-asked")
    action = getattr(answer, "action", None)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"server saw {action} for {what}")])


def main(argv):
    if argv[0] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    json_response = "--json" in argv
    tls = argv[argv.index("--tls") + 1 : argv.index("--tls") + 3] if "--tls" in argv else None
    app = server.streamable_http_app(json_response=json_response, stateless_http=True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    options = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
    config = uvicorn.Config(app, log_level="warning", **options)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1:])
