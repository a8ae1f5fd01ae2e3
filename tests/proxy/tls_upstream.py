"""A scripted model API over HTTPS, for `budgetgate proxy`'s TLS tests
(host/tests/proxy.rs): answers every POST with one Messages API reply (1 000
input and 100 output tokens).

    python3 tls_upstream.py CERT.pem KEY.pem

Prints the port it listens on (127.0.0.1), then serves until killed.
"""

import http.server
import json
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        body = json.dumps({
            "id": "msg_tls", "type": "message", "role": "assistant",
            "model": request.get("model"), "content": [{"type": "text", "text": "over tls"}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 100},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
