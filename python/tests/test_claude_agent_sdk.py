"""budgetgate.claude_agent_sdk against the Claude Agent SDK and the Claude
Code CLI it drives, run offline against a Messages API scripted here on
loopback (as host/tests/claude_code.rs does): the CLI is the SDK's bundled
one, else tests/mcp/node_modules/.bin/claude (tests/mcp/install.sh)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query  # noqa: E402

from budgetgate import Gate  # noqa: E402
from budgetgate.claude_agent_sdk import budget_hooks  # noqa: E402
from conftest import REPO  # noqa: E402

MODEL = "claude-sonnet-4-5"
FOREVER = "max_seconds = 100000\n"


def claude_cli() -> str | None:
    import claude_agent_sdk

    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    for path in (bundled, REPO / "tests/mcp/node_modules/.bin/claude"):
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which("claude")


class ScriptedApi:
    """The i-th call of MODEL gets the i-th turn (the last again past the
    end): ("tool", name, input) or ("text", text); other models get "ok"."""

    def __init__(self, script):
        self.script = script
        self.calls: list[dict] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                route = self.path.split("?")[0]
                if route == "/v1/messages/count_tokens":
                    return self.send(200, "application/json", json.dumps({"input_tokens": 1000}))
                if route != "/v1/messages":
                    return self.send(404, "application/json", json.dumps(
                        {"type": "error", "error": {"type": "not_found_error", "message": "no"}}))
                if body.get("model") == MODEL:
                    at = len(api.calls)
                    api.calls.append(body)
                    turn = api.script[min(at, len(api.script) - 1)]
                else:
                    at, turn = 0, ("text", "ok")
                if body.get("stream"):
                    self.send(200, "text/event-stream", events(at, turn, body["model"]))
                else:
                    self.send(200, "application/json", json.dumps(message(at, turn, body["model"])))

            def send(self, status, kind, text):
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def block(at, turn):
    if turn[0] == "tool":
        return {"type": "tool_use", "id": f"toolu_{at:04}", "name": turn[1], "input": turn[2]}, "tool_use"
    return {"type": "text", "text": turn[1]}, "end_turn"


def message(at, turn, model):
    content, stop = block(at, turn)
    return {"id": f"msg_{at:04}", "type": "message", "role": "assistant", "model": model, "content": [content],
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 1000, "output_tokens": 100}}


def events(at, turn, model):
    content, stop = block(at, turn)
    if turn[0] == "tool":
        start = dict(content, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(turn[2])}
    else:
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": turn[1]}
    items = [
        {"type": "message_start", "message": {"id": f"msg_{at:04}", "type": "message", "role": "assistant",
                                              "model": model, "content": [], "stop_reason": None,
                                              "stop_sequence": None,
                                              "usage": {"input_tokens": 1000, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
         "usage": {"output_tokens": 100}},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in items)


def last_tool_result(call: dict) -> str:
    for b in call["messages"][-1]["content"]:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            c = b.get("content")
            return c if isinstance(c, str) else " ".join(x.get("text", "") for x in c or [])
    raise AssertionError(f"no tool_result in {call['messages'][-1]}")


@pytest.mark.anyio
async def test_the_bash_call_over_its_cap_is_denied_and_claude_reads_why(budget, sqlite_ledger, tmp_path):
    cli = claude_cli()
    if cli is None:
        if os.environ.get("BUDGETGATE_REQUIRE_MCP") == "1":
            pytest.fail("no Claude Code CLI (tests/mcp/install.sh) and BUDGETGATE_REQUIRE_MCP=1")
        pytest.skip("no Claude Code CLI")
    bash = lambda c: ("tool", "Bash", {"command": c, "description": "a scripted call"})  # noqa: E731
    api = ScriptedApi([bash("echo one"), bash("echo two"), ("text", "done")])
    b = budget(f"[budget]\n{FOREVER}[tools]\nmax_calls = {{ Bash = 1 }}\n")
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    with Gate(budget=b, ledger=sqlite_ledger, session="claude") as gate:
        options = ClaudeAgentOptions(
            hooks=budget_hooks(gate),
            model=MODEL,
            allowed_tools=["Bash"],
            cwd=str(work),
            cli_path=cli,
            env={
                "HOME": str(home),
                "ANTHROPIC_BASE_URL": api.url,
                "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        results = [m async for m in query(prompt="Run the scripted calls.", options=options)
                   if isinstance(m, ResultMessage)]
        assert results, "the session ended without a result"
        assert len(api.calls) == 3, [c["messages"][-1] for c in api.calls]
        assert "one" in last_tool_result(api.calls[1])
        refused = last_tool_result(api.calls[2])
        assert "(tool-cap)" in refused, refused
        assert gate.usage()["caps"]["Bash"] == {"used": 1, "max": 1}
        assert gate.usage()["limits"]["tool_calls"] == {"used": 1, "reserved": 0, "max": None}
    api.server.shutdown()
