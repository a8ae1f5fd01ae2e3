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
                           [--before OTHER_BIN] [--rounds R] [--request-kb K]

`--before OTHER_BIN` adds the same two proxies run from another build (an
A/B pair in one run); `--rounds R` splits each path's calls into R rounds
taken in turn, path after path, so a slow spell of the machine falls on
every path alike. `--request-kb K` makes each request about K KB longer
(a long message, as Claude Code's requests carry the whole conversation).

With `--stream-mb N` it measures a long stream instead: the scripted API
answers one streamed Messages call of about N MB (`message_start` with its
usage, text deltas of 100 to 1000 bytes, `message_delta` with the output
tokens, `message_stop`), built once and written in 64 KiB pieces; the
client's throughput is measured straight to it and through `budgetgate
proxy --durability normal` (a fresh process for each measure), every byte
checked against what the upstream sent, and the proxy's resident memory
(VmRSS, and VmHWM, its peak, from /proc) read idle and after the stream.
`--concurrent K` runs K such streams at once (K client threads) and reports
their aggregate throughput.

    scripts/bench-proxy.py --stream-mb 1024 [--concurrent 64] [--bin ...]
"""

import argparse
import http.client
import http.server
import json
import os
import random
import signal
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


def sse(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class LongStream:
    """One streamed Messages answer of about `mb` MB, in whole events: a
    head (`message_start`, `content_block_start`), a block of about 1 MiB of
    `content_block_delta` events (text deltas of 100 to 1000 bytes) sent
    `repeats` times, a tail (`content_block_stop`, `message_delta` with the
    output tokens, `message_stop`). Built once; written in 64 KiB pieces."""

    PIECE = 64 << 10

    def __init__(self, mb):
        rnd = random.Random(31)
        words = ("the budget gate relays each event of a long answer while it "
                 "reads the usage \"quoted\" line\nbreak tab\t unicode \u00e9t\u00e9").split(" ")
        deltas, size, text_bytes = [], 0, 0
        while size < 1 << 20:
            want, text = rnd.randint(100, 1000), ""
            while len(text) < want:
                text += rnd.choice(words) + " "
            text = text[:want]
            text_bytes += len(text)
            deltas.append(sse("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}))
            size += len(deltas[-1])
        self.block = b"".join(deltas)
        self.repeats = max(1, mb * 1_000_000 // len(self.block))
        self.deltas = len(deltas) * self.repeats
        output_tokens = text_bytes * self.repeats // 4
        self.head = sse("message_start", {"type": "message_start", "message": {
            "id": "msg_long", "type": "message", "role": "assistant", "model": "claude-bench",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}) + sse(
            "content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}})
        self.tail = sse("content_block_stop", {"type": "content_block_stop", "index": 0}) + sse(
            "message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                              "usage": {"output_tokens": output_tokens}}) + sse(
            "message_stop", {"type": "message_stop"})
        self.length = len(self.head) + self.repeats * len(self.block) + len(self.tail)

    def send(self, sock):
        sock.sendall(self.head)
        block = memoryview(self.block)
        for _ in range(self.repeats):
            for i in range(0, len(block), self.PIECE):
                sock.sendall(block[i:i + self.PIECE])
        sock.sendall(self.tail)

    def matches(self, off, data):
        """Whether `data` is what the stream holds from byte `off`."""
        data = memoryview(data)
        head, block = len(self.head), len(self.block)
        body_end = head + self.repeats * block
        while len(data):
            if off < head:
                want = self.head[off:off + len(data)]
            elif off < body_end:
                at = (off - head) % block
                want = self.block[at:at + min(len(data), body_end - off)]
            else:
                want = self.tail[off - body_end:off - body_end + len(data)]
            # bytes, not memoryview: a memoryview compares item by item.
            if not want or bytes(data[:len(want)]) != want:
                return False
            data, off = data[len(want):], off + len(want)
        return True


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave at once (no 40 ms wait for a delayed ACK).
    disable_nagle_algorithm = True

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        long = getattr(self.server, "long", None)
        if request.get("stream") and long is not None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(long.length))
            self.end_headers()
            self.wfile.flush()
            long.send(self.connection)
        elif request.get("stream"):
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


# `--request-kb`: words added to each request's message (Claude Code's
# requests carry the whole conversation: tens to hundreds of KB).
PAD = ""


def measure(port, calls, stream, path="/v1/messages"):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"model": "claude-bench", "max_tokens": 16, "stream": stream,
                       "messages": [{"role": "user", "content": "hi" + PAD}]})
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


HEADERS = {"content-type": "application/json", "x-api-key": KEY,
           "authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}


def call(port, stream):
    """One call on a new connection; its status and the bytes read."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("POST", "/v1/messages", json.dumps({
        "model": "claude-bench", "max_tokens": 16, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]}), HEADERS)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def read_long(port, long, start, out, i):
    """Reads one long stream into a 1 MiB buffer, each read checked against
    what the upstream sent; `out[i]`: (seconds to the last byte, bytes,
    whether they are the whole stream exactly)."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    body = json.dumps({"model": "claude-bench", "max_tokens": 16, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})
    buf = memoryview(bytearray(1 << 20))
    start.wait()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/messages", body, HEADERS)
    resp = conn.getresponse()
    off, same = 0, resp.status == 200
    while n := resp.readinto(buf):
        same = same and long.matches(off, buf[:n])
        off += n
    out[i] = (time.perf_counter() - t0, off, same and off == long.length)
    conn.close()


def status(pid):
    """The process's VmRSS and VmHWM (its peak), MiB."""
    with open(f"/proc/{pid}/status") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f
              if line.startswith(("VmRSS", "VmHWM"))}
    return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024


def streams(port, long, k):
    """`k` long streams at once; (seconds from the start to the last byte,
    bytes, streams complete and exact)."""
    start, out = threading.Barrier(k + 1), [None] * k
    threads = [threading.Thread(target=read_long, args=(port, long, start, out, i))
               for i in range(k)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    if None in out:
        sys.exit("a client thread failed")
    return took, sum(o[1] for o in out), sum(o[2] for o in out)


def long_streams(args, long, up, tmp, budget):
    k = args.concurrent
    print(f"{k} stream(s) at once, each {long.length} bytes "
          f"({long.deltas} content_block_delta events, {len(long.block)} bytes "
          f"sent {long.repeats} times), loopback upstream")
    print("| path | streams | bytes | seconds | MB/s | complete and exact | "
          "proxy VmRSS idle (MiB) | proxy VmRSS after | proxy VmHWM (peak) | "
          "(peak - idle) / streams (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    took, total, exact = streams(up, long, k)
    print(f"| direct | {k} | {total} | {took:.2f} | {total / took / 1e6:.0f} | {exact}/{k} "
          "| | | | |")
    port = free_port()
    proc = subprocess.Popen(
        [args.bin, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
         f"http://127.0.0.1:{up}", "--budget", budget, "--ledger",
         f"sqlite:{os.path.join(tmp, 'long.sqlite3')}", "--durability", "normal"],
        stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        # One whole call first: the ledger and the upstream connection made.
        if call(port, False)[0] != 200:
            sys.exit("the proxy did not answer a call")
        idle, _ = status(proc.pid)
        took, total, exact = streams(port, long, k)
        rss, hwm = status(proc.pid)
        print(f"| budgetgate proxy --durability normal | {k} | {total} | {took:.2f} | "
              f"{total / took / 1e6:.0f} | {exact}/{k} | {idle:.1f} | {rss:.1f} | {hwm:.1f} | "
              f"{(hwm - idle) / k:.2f} |")
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--bin", default="target/release/budgetgate")
    ap.add_argument("--litellm", help="the litellm command of a LiteLLM install")
    ap.add_argument("--before", help="another build's budgetgate, measured beside --bin")
    ap.add_argument("--request-kb", type=int, default=0,
                    help="make each request about this many KB larger (a long message)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="take each path's calls in this many rounds, in turn")
    ap.add_argument("--stream-mb", type=int,
                    help="measure a long streamed answer of this many MB instead")
    ap.add_argument("--concurrent", type=int, default=1,
                    help="with --stream-mb: this many streams at once")
    args = ap.parse_args()
    global PAD
    PAD = " budget" * (args.request_kb * 1024 // 7)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    up = server.server_address[1]
    upstream_pid = None
    if args.stream_mb:
        # The upstream of long streams is a process of its own: the client
        # threads do not wait for its interpreter lock, nor it for theirs.
        server.long = LongStream(args.stream_mb)
        upstream_pid = os.fork()
        if upstream_pid == 0:
            server.serve_forever()
            os._exit(0)
        server.server_close()
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp()
    budget = os.path.join(tmp, "budget.toml")
    with open(budget, "w") as f:
        f.write("[budget]\nmax_model_calls = 100000000\nmax_tokens = 100000000000\nmax_seconds = 100000\n")
    if args.stream_mb:
        try:
            long_streams(args, server.long, up, tmp, budget)
        finally:
            os.kill(upstream_pid, signal.SIGTERM)
            os.waitpid(upstream_pid, 0)
        return

    paths = [("direct", up, None)]
    procs = []
    builds = [("", args.bin)] + ([("before: ", args.before)] if args.before else [])
    for label, binary in builds:
        for durability in ["normal", "full"]:
            port = free_port()
            ledger = os.path.join(tmp, f"{label[:6]}{durability}.sqlite3")
            procs.append(subprocess.Popen(
                [binary, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
                 f"http://127.0.0.1:{up}", "--budget", budget, "--ledger", f"sqlite:{ledger}",
                 "--durability", durability],
                stderr=subprocess.DEVNULL))
            paths.append((f"{label}budgetgate proxy --durability {durability}", port, None))
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
        rounds = max(1, args.rounds)
        for stream in [False, True]:
            base = None
            samples = {name: ([], []) for name, _, _ in paths}
            for _ in range(rounds):
                for name, port, _ in paths:
                    total, first = measure(port, args.calls // rounds, stream)
                    samples[name][0].extend(total)
                    samples[name][1].extend(first)
            for name, port, _ in paths:
                total, first = samples[name]
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
