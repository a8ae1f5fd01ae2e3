"""A scripted Streamable HTTP MCP upstream for the gateway's tests.

    python3 slow_upstream.py PORT DELAY_S RESULT_BYTES

Answers POST /mcp with JSON (no SSE, no sessions): `initialize` at once, a
`tools/call` after DELAY_S seconds with a text result of RESULT_BYTES
bytes, notifications with 202. Each call it starts is written to stderr as
`ran NAME` before it sleeps, so a test can count what the server ran.
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, DELAY, SIZE = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        msg = json.loads(body)
        if "id" not in msg:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if msg.get("method") == "tools/call":
            print(f"ran {msg['params']['name']}", file=sys.stderr, flush=True)
            time.sleep(DELAY)
            result = {"content": [{"type": "text", "text": "x" * SIZE}]}
        elif msg.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "slow", "version": "1"},
            }
        else:
            result = {}
        out = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print(f"listening on port {PORT}", file=sys.stderr, flush=True)
server.serve_forever()
