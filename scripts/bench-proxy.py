#!/usr/bin/env python3
"""Added latency of `budgetgate proxy` per model call (docs/BENCHMARKS.md).

Starts a scripted Messages API on loopback (this script, a thread), then for
each path — straight to it, through `budgetgate proxy` with `--durability
normal` and with `full`, and through LiteLLM's proxy when `--litellm PATH` names
its `litellm` command — makes the same calls one after another on one
keep-alive connection, streamed and not, and prints per call the median and
p99 of the whole call and of the time to the first byte. What each path adds
is its figures minus the direct ones, measured in the same run.

    scripts/bench-proxy.py [--calls N] [--bin target/release/budgetgate] [--litellm PATH]
"""

import argparse
import http.client
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# The key every path is called with (LiteLLM's proxy wants a master key).
KEY = "sk-" + "b3nch" * 12

BODY = json.dumps({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-bench",
    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5},
}).encode()

EVENTS = b"".join(
    f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    for name, data in [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-bench",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "ok"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
)


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave at once (no 40 ms wait for a delayed ACK).
    disable_nagle_algorithm = True

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        if request.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(EVENTS)))
            self.end_headers()
            self.wfile.write(EVENTS)
        else:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port):
    for _ in range(3600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def measure(port, calls, stream, path="/v1/messages"):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"model": "claude-bench", "max_tokens": 16, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]})
    headers = {"content-type": "application/json", "x-api-key": KEY,
               "authorization": f"Bearer {KEY}",
               "anthropic-version": "2023-06-01"}
    total, first = [], []
    for i in range(calls + calls // 10):
        start = time.perf_counter()
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        resp.read(1)
        ttfb = time.perf_counter() - start
        resp.read()
        done = time.perf_counter() - start
        if resp.status != 200:
            sys.exit(f"status {resp.status} on port {port}")
        if i >= calls // 10:  # the first tenth warms up
            total.append(done)
            first.append(ttfb)
    conn.close()
    return total, first


def figures(samples):
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return statistics.median(samples) * 1e6, p99 * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--bin", default="target/release/budgetgate")
    ap.add_argument("--litellm", help="the litellm command of a LiteLLM install")
    args = ap.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    up = server.server_address[1]
    tmp = tempfile.mkdtemp()
    budget = os.path.join(tmp, "budget.toml")
    with open(budget, "w") as f:
        f.write("[budget]\nmax_model_calls = 100000000\nmax_tokens = 100000000000\nmax_seconds = 100000\n")

    paths = [("direct", up, None)]
    procs = []
    for durability in ["normal", "full"]:
        port = free_port()
        ledger = os.path.join(tmp, f"{durability}.sqlite3")
        procs.append(subprocess.Popen(
            [args.bin, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
             f"http://127.0.0.1:{up}", "--budget", budget, "--ledger", f"sqlite:{ledger}",
             "--durability", durability],
            stderr=subprocess.DEVNULL))
        paths.append((f"budgetgate proxy --durability {durability}", port, None))
    if args.litellm:
        port = free_port()
        config = os.path.join(tmp, "litellm.yaml")
        with open(config, "w") as f:
            f.write(
                "model_list:\n  - model_name: claude-bench\n    litellm_params:\n"
                f"      model: anthropic/claude-bench\n      api_base: http://127.0.0.1:{up}\n"
                "      api_key: bench\n"
                f"general_settings:\n  master_key: {KEY}\n"
            )
        log = open(os.path.join(tmp, "litellm.log"), "w")
        print(f"LiteLLM's log: {log.name}", file=sys.stderr)
        procs.append(subprocess.Popen(
            [args.litellm, "--config", config, "--port", str(port), "--host", "127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT))
        paths.append(("LiteLLM proxy", port, None))
    try:
        for _, port, _ in paths:
            wait_for(port)
        rows = []
        for stream in [False, True]:
            base = None
            for name, port, _ in paths:
                total, first = measure(port, args.calls, stream)
                (t50, t99), (f50, f99) = figures(total), figures(first)
                if base is None:
                    base = (t50, t99, f50, f99)
                rows.append((("streamed" if stream else "whole"), name, t50, t99, f50, f99,
                             t50 - base[0], t99 - base[1], f50 - base[2]))
        print(f"{args.calls} calls each, one keep-alive connection, loopback upstream (µs)")
        print("| answer | path | median | p99 | first byte, median | added median | added p99 | added to first byte |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[6]:.0f} | {r[7]:.0f} | {r[8]:.0f} |")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
