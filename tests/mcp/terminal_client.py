"""Approval at the gateway's terminal, end to end (host/tests/mcp_gateway.rs).

Starts GATEWAY ARGS... (`budgetgate mcp ... -- SERVER`) with a pseudo-terminal
as its controlling terminal (a session of its own, the terminal's slave
made controlling) and pipes as its stdin and stdout, as a client without
the elicitation capability would. It speaks JSON-RPC on the pipes and plays
the person at the terminal on the pty's master side:

    python terminal_client.py STEPS [--background] -- GATEWAY ARGS...

--background starts the gateway as a background job of a shell with job
control on that terminal (`set -m; GATEWAY & wait`), as `budgetgate mcp … &`
typed in a terminal would be.

STEPS is a JSON array; each step calls a tool and says how the person (or
the client) answers the question that appears at the terminal:
    {"call": NAME, "arguments": {...}, "type": "y\\n"}     type at the terminal
    {"call": NAME, "arguments": {...}, "client_answers": "accept", "type": null}
        the client answers the question's id itself, nobody types; the
        gateway's deadline decides
    {"call": NAME, "arguments": {...}, "no_question": true}
        no question is expected at the terminal
Prints one JSON line per step: {"call", "asked" (what the terminal showed),
"answer" (the JSON-RPC answer to the call)}.
"""

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
import time


def main(argv):
    split = argv.index("--")
    steps = json.loads(argv[0])
    gateway = argv[split + 1:]
    if "--background" in argv[:split]:
        gateway = ["sh", "-c", 'set -m; "$@" & wait "$!"', "sh"] + gateway
    master, slave = os.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        gateway,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        preexec_fn=controlling_terminal,
        pass_fds=(slave,),
    )
    os.close(slave)
    shown = bytearray()

    def send(msg):
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    # The gateway's output, read from its descriptor (not through a
    # buffered reader, whose buffer `select` cannot see: two lines that came
    # in one read would leave the second unseen).
    out_fd = proc.stdout.fileno()
    pending = bytearray()

    def read_answer(id_, deadline):
        """The gateway's answer to request id_, reading the terminal meanwhile."""
        while True:
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                msg = json.loads(line)
                if msg.get("id") == id_:
                    return msg
            if time.time() >= deadline:
                break
            ready, _, _ = select.select([out_fd, master], [], [], 0.1)
            if master in ready:
                try:
                    shown.extend(os.read(master, 4096))
                except OSError:
                    pass
            if out_fd in ready:
                chunk = os.read(out_fd, 65536)
                if not chunk:
                    raise SystemExit("the gateway closed its stdout")
                pending.extend(chunk)
        raise SystemExit(f"no answer to {id_}; the terminal showed {bytes(shown)!r}")

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "terminal-test", "version": "0"}}})
    read_answer(0, time.time() + 30)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for n, step in enumerate(steps, start=1):
        start = len(shown)
        send({"jsonrpc": "2.0", "id": n, "method": "tools/call",
              "params": {"name": step["call"], "arguments": step.get("arguments", {})}})
        # Wait for the question at the terminal (or an answer with none).
        deadline = time.time() + (0 if step.get("no_question") else 30)
        while b"allow? [y/N]" not in shown[start:] and time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if master in ready:
                shown.extend(os.read(master, 4096))
        if step.get("client_answers"):
            # The agent's client tries to answer the question it never saw.
            send({"jsonrpc": "2.0", "id": f"budgetgate-approval-{n}",
                  "result": {"action": step["client_answers"]}})
        if step.get("type"):
            os.write(master, step["type"].encode())
        answer = read_answer(n, time.time() + 30)
        time.sleep(0.2)
        while select.select([master], [], [], 0)[0]:
            try:
                shown.extend(os.read(master, 4096))
            except OSError:
                break
        print(json.dumps({"call": step["call"],
                          "asked": shown[start:].decode("utf-8", "replace"),
                          "answer": answer}), flush=True)
    proc.stdin.close()
    proc.wait(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1:])
