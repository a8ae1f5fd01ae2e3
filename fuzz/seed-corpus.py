#!/usr/bin/env python3
"""Seed the fuzz corpora from the reference vectors (tests/vectors/*.jsonl).

Writes fuzz/corpus/<target>/<sha1> files (the corpus folder is not committed):
  action_json: every `value` of a validate_agent_action request, and every
               proposal of a run_bounded_agent script, spelled exactly as in
               the vector file (numbers like -0, 1e2, 1e400 kept verbatim);
  plan_json:   `plan` + NUL + `limits` of every bounded_workflow request, and
               `plan` alone of every aggregate_usage request;
  run_events:  nothing; its input is a structured byte format that libFuzzer
               builds up from scratch within seconds;
  link_frames: a few framed request streams (PROPOSE with vector proposals,
               STATUS, HELLO, RESET), sealed with CRC-32 as the link does, plus
               a corrupted checksum, a missing one and an overlong line.
  hook_event, hook_transcript, mcp_lines, replay_formats: the small
               hand-written events, transcript lines, JSON-RPC lines and
               recordings in host_seeds() below (the shapes of Claude Code's
               hook events and transcripts, MCP's stdio transport and the
               replay formats), plus the recordings in examples/replay/.
Usage: python3 fuzz/seed-corpus.py   (from anywhere)
"""
import binascii
import struct
import hashlib
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent
VECTORS = ROOT.parent / "tests" / "vectors"
DECODER = json.JSONDecoder()


def skip_ws(text, i):
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def members(text, start):
    """(key, raw value text) of the object starting at text[start], spelled as written."""
    out = []
    i = skip_ws(text, start)
    assert text[i] == "{"
    i = skip_ws(text, i + 1)
    if text[i] == "}":
        return out
    while True:
        key, i = DECODER.raw_decode(text, skip_ws(text, i))
        i = skip_ws(text, i)
        assert text[i] == ":"
        begin = skip_ws(text, i + 1)
        _, end = DECODER.raw_decode(text, begin)
        out.append((key, text[begin:end], begin))
        i = skip_ws(text, end)
        if text[i] == "}":
            return out
        assert text[i] == ","
        i += 1


def elements(text, start):
    """Raw text of each element of the array starting at text[start]."""
    out = []
    i = skip_ws(text, start)
    assert text[i] == "["
    i = skip_ws(text, i + 1)
    if text[i] == "]":
        return out
    while True:
        begin = skip_ws(text, i)
        _, end = DECODER.raw_decode(text, begin)
        out.append(text[begin:end])
        i = skip_ws(text, end)
        if text[i] == "]":
            return out
        i += 1


def assistant_line(msg_id, request_id, model, usage, content, extra=""):
    return json.dumps({
        "parentUuid": "u0", "isSidechain": False, "type": "assistant", "uuid": "u-" + msg_id,
        "timestamp": "2026-01-05T10:00:01.200Z", "requestId": request_id, "sessionId": "s1",
        "message": {"model": model, "id": msg_id, "type": "message", "role": "assistant",
                    "content": content, "stop_reason": None, "usage": usage}},
        separators=(",", ":")) + extra


def host_seeds(seeds):
    """Seeds of the host-side targets, written here in the real shapes."""
    tool_use = [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]
    lines = [
        assistant_line("msg_1", "req_1", "claude-x", {"input_tokens": 12, "output_tokens": 3,
                       "cache_creation_input_tokens": 200, "cache_read_input_tokens": 0}, tool_use),
        assistant_line("msg_1", "req_1", "claude-x", {"input_tokens": 12, "output_tokens": 30}, tool_use),
        assistant_line("msg_2", "req_2", "<synthetic>", {"input_tokens": 0, "output_tokens": 0}, []),
        assistant_line("msg_3", "req_3", "claude-unpriced", None, [{"type": "text", "text": "lone \\ud83d"}]),
        json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}}),
        '{"type":"assistant","message":{"id":"m","usage":{"input_tokens":1},"usage":{}}}',
        '{"type":"assistant","requestId":"r","message":{"id":"m","model":"claude-x","usage":{"input_tokens":1e400}}}',
        '{"type":"assistant","message":{"model":"claude-x","content":[[[[{"x":"}"}]]]]}}',
    ]
    for line in lines:
        seeds["hook_transcript"].add(line.encode())
    transcript_a = ("\n".join(lines[:2]) + "\n").encode()
    transcript_b = ("\n".join(lines[2:5]) + "\n" + lines[0][:40]).encode()

    def event(name, **extra):
        e = {"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": "/home/u",
             "permission_mode": "default", "hook_event_name": name}
        e.update(extra)
        return json.dumps(e).encode()

    events = [
        event("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="toolu_1"),
        event("PreToolUse", tool_name="Write", tool_input={"file_path": "/x", "content": "y"}, tool_use_id="toolu_2"),
        event("PreToolUse", tool_name="mcp__srv__do it", tool_input={}, tool_use_id="toolu_3"),
        event("PreToolUse", tool_name="Read", tool_input={}, tool_use_id="toolu_4", agent_id="a1", agent_type="Explore"),
        event("PostToolUse", tool_name="Read", tool_input={}, tool_response={"ok": True}, tool_use_id="toolu_1"),
        event("UserPromptSubmit", prompt="hello"),
        event("Stop", stop_hook_active=False),
        event("SubagentStop", stop_hook_active=False, agent_id="a1"),
        event("SessionStart", source="startup"),
        b'{"session_id":"s1","session_id":"s2","transcript_path":"/t","cwd":"/","hook_event_name":"Stop"}',
        b'{"session_id":"","transcript_path":"/t","cwd":"/","hook_event_name":"Stop"}',
        b'{"session_id":"s1","transcript_path":"/t","hook_event_name":"PreToolUse","tool_name":"Read"}',
    ]
    for i, e in enumerate(events):
        seeds["hook_event"].add(bytes([i % 2]) + e)
        seeds["hook_event"].add(bytes([i % 2]) + e + b"\0" + transcript_a + b"\0" + transcript_b)

    rpc = [
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}',
        '{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"Write","arguments":{"p":1}}}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user"}}',
        '[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo"}}]',
        '{"jsonrpc":"2.0","id":"budgetgate-approval-1","result":{"action":"accept","content":{}}}',
        '{"jsonrpc":"1.0","id":5,"method":"ping"}',
        '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":[1]}}',
        '{"jsonrpc":"2.0","id":7,"id":8,"method":"ping"}',
        '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo"',
        '[]',
    ]
    server = [
        '\x01{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}',
        '\x01{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"denied","inputSchema":{"type":"object"}}]}}',
        '\x01{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}',
        '\x01{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"boom"}}',
        '\x01{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}',
    ]
    for script in (0x00, 0x1b, 0xe4, 0xff):
        seeds["mcp_lines"].add(bytes([script]) + "\n".join(rpc[:6] + server[:3]).encode() + b"\n")
        seeds["mcp_lines"].add(bytes([script]) + "\n".join(rpc[6:] + server[3:] + ["\x02"]).encode())
    seeds["mcp_lines"].add(b"\x00" + b"\xff\xfe not utf-8\n" + b"x" * 300 + b"\n\r\n")
    # As over stdio: answers left unsettled (\x03), a ping between, the next
    # call committing them in its decision, and the loop's settle (\x04).
    stdio = [
        rpc[0], server[0].replace("\x01", "\x03", 1), rpc[3],
        '\x03{"jsonrpc":"2.0","id":2,"result":{"content":[]}}',
        '{"jsonrpc":"2.0","id":"p","method":"ping"}', '\x03{"jsonrpc":"2.0","id":"p","result":{}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"n":3}}}',
        '\x03{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"n":4}}}',
        '\x03{"jsonrpc":"2.0","id":4,"result":{"content":[]}}', '\x04',
        '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"n":5}}}',
    ]
    for script in (0x00, 0x44, 0xe4):
        seeds["mcp_lines"].add(bytes([script]) + "\n".join(stdio).encode() + b"\n")
    # Issue 29: a cancel right after the call and its late answer; the
    # ledger down (\x05) while answers come and a call follows; answers
    # lost (\x06 may have run, \x07 never reached); an over-long answer
    # with a readable id; a tick (\x02) that renews what is held.
    faults = [
        rpc[0],
        '{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"n":11}}}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11}}',
        '\x03{"jsonrpc":"2.0","id":11,"result":{"content":[{"type":"text","text":"late"}]}}',
        '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{"n":12}}}',
        '\x05', '\x03{"jsonrpc":"2.0","id":12,"result":{"content":[]}}',
        '{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":{"n":13}}}',
        '\x04', '\x05',
        '{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"echo","arguments":{"n":14}}}',
        '\x0614',
        '{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"echo","arguments":{"n":15}}}',
        '\x0715', '\x02',
        '{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"echo","arguments":{"n":16}}}',
        '{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"' + "y" * 300 + '"}]},"id":16}',
    ]
    for script in (0x00, 0x44, 0xe4):
        seeds["mcp_lines"].add(bytes([script]) + "\n".join(faults).encode() + b"\n")
    # Issue 33: MCP 2026-07-28 (stateless) shapes: server/discover, calls
    # carrying the protocol version and client capabilities in `_meta`
    # (asked about by InputRequiredResult when the gate says ask), a retry
    # with inputResponses and a requestState (forged: the fuzzer cannot
    # know the process's key), a server's own InputRequiredResult and a
    # result with resultType, mixed with handshake-era lines.
    meta = ('"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            '"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}')
    stateless = [
        '{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{' + meta + '}}',
        '\x01{"jsonrpc":"2.0","id":"d","result":{"resultType":"complete","supportedVersions":["2026-07-28"]}}',
        '{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"echo","arguments":{"n":21},' + meta + '}}',
        '\x03{"jsonrpc":"2.0","id":21,"result":{"resultType":"complete","content":[{"type":"text","text":"21"}]}}',
        '{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"echo","arguments":{"n":22},' + meta + '}}',
        '{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo","arguments":{"n":22},' + meta
        + ',"inputResponses":{"budgetgate_approval":{"action":"accept","content":{}}},'
        + '"requestState":"bg1.eyJuIjowfQ.AAAA"}}',
        '{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"echo","arguments":{"n":24},' + meta + '}}',
        '\x01{"jsonrpc":"2.0","id":24,"result":{"resultType":"input_required","inputRequests":{"q":'
        + '{"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":"object"}}}},'
        + '"requestState":"server-state"}}',
        '{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"echo","arguments":{"n":24},' + meta
        + ',"inputResponses":{"q":{"action":"accept","content":{}}},"requestState":"server-state"}}',
        rpc[0], '\x02',
    ]
    for script in (0x00, 0x22, 0x66, 0xe4):
        seeds["mcp_lines"].add(bytes([script]) + "\n".join(stateless).encode() + b"\n")

    recordings = [p.read_bytes() for p in sorted((ROOT.parent / "examples" / "replay").glob("*"))]
    recordings += [
        b"\n".join(line.encode() for line in lines[:5]),
        json.dumps({"request": {"model": "claude-x", "max_tokens": 64, "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
                                "messages": [{"role": "user", "content": "hi"}]},
                    "response": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                                 "content": tool_use, "stop_reason": "tool_use",
                                 "usage": {"input_tokens": 10, "output_tokens": 5}}}).encode(),
        b"interactions:\n- request:\n    method: POST\n    uri: https://api.openai.com/v1/chat/completions\n"
        b"    body: '{\"model\":\"gpt-x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n"
        b"  response:\n    status: {code: 200, message: OK}\n    headers: {Date: ['Mon, 05 Jan 2026 10:00:00 GMT']}\n"
        b"    body: {string: '{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"tool_calls\":"
        b"[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}],"
        b"\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}'}\n",
        json.dumps({"trajectory": [{"action": "rm -rf /tmp/x\n", "observation": "", "response": "", "thought": ""}],
                    "info": {"exit_status": "submitted", "model_stats": {"tokens_sent": 100, "tokens_received": 7}}}).encode(),
        json.dumps({"type": "system", "subtype": "init", "session_id": "s1", "tools": ["Bash"]}).encode() + b"\n"
        + json.dumps({"type": "assistant", "session_id": "s1", "message": {"id": "m1", "model": "claude-x", "role": "assistant",
                      "content": tool_use, "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 1}}}).encode() + b"\n",
    ]
    for i, r in enumerate(recordings):
        seeds["replay_formats"].add(bytes([i % 2]) + r)


def main():
    seeds = {"action_json": set(), "plan_json": set(), "run_events": set(), "link_frames": set(),
             "hook_event": set(), "hook_transcript": set(), "mcp_lines": set(), "replay_formats": set()}
    for path in sorted(VECTORS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            top = dict((k, (raw, at)) for k, raw, at in members(line, 0))
            request_at = top["request"][1]
            request = dict((k, (raw, at)) for k, raw, at in members(line, request_at))
            fn = json.loads(request["fn"][0])
            args = dict((k, raw) for k, raw, _ in members(line, request["args"][1]))
            if fn == "validate_agent_action" and "value" in args:
                seeds["action_json"].add(args["value"].encode())
            elif fn == "run_bounded_agent" and args.get("script", "").startswith("["):
                for proposal in elements(args["script"], 0):
                    seeds["action_json"].add(proposal.encode())
            elif fn == "bounded_workflow" and "plan" in args and "limits" in args:
                seeds["plan_json"].add(args["plan"].encode() + b"\0" + args["limits"].encode())
            elif fn == "aggregate_usage" and "plan" in args:
                seeds["plan_json"].add(args["plan"].encode())
    def frame(payload):
        return payload + b"*%08X\n" % binascii.crc32(payload)

    proposals = sorted(p for p in seeds["action_json"] if len(p) < 900)[:40]
    for i in range(0, len(proposals), 4):
        stream = b"".join(frame(b"PROPOSE " + p) for p in proposals[i:i + 4])
        seeds["link_frames"].add(frame(b"HELLO") + stream + frame(b"STATUS"))
    seeds["link_frames"].add(frame(b"RESET") + b"\r\n\n" + frame(b"STATUS").replace(b"*", b"*0", 1))
    seeds["link_frames"].add(b"STATUS\n" + b"x" * 1100 + b"\n" + frame(b"HELLO")[:-1] + b"\r\n")
    # Device run records (core/src/resume.rs layout, version 2) and audit
    # entries: a fresh run, tool rows done and in flight, a stopped run, duty
    # windows (actuator, window, most on-time, spans back from the record).
    def run_record(phase, stage, status, limits, rows, duty=()):
        body = b"BGR" + bytes([2]) + struct.pack("<I", 1) + bytes([phase, stage, status])
        body += struct.pack("<Q", 1234) + bytes([limits[0], limits[1]])
        tools = sum(1 for r in rows if r[0] == 2)
        body += bytes([tools, len(rows)])
        for row in rows:
            if row[0] == 2:
                body += bytes([2, row[1], len(row[2])]) + row[2] + bytes([len(row[3])]) + row[3]
            else:
                body += bytes(row)
        body += bytes([len(duty)])
        for actuator, window, most, spans in duty:
            body += bytes([actuator]) + struct.pack("<II", window, most) + bytes([len(spans)])
            for ago, length in spans:
                body += struct.pack("<II", ago, length)
        return body + struct.pack("<I", binascii.crc32(body))

    # SSE streams as the model APIs and Streamable HTTP send them: named
    # events, CRLF lines, comments, multi-line data, a cut-off last event.
    seeds["sse_stream"] = {
        b"\x07event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n"
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n"
        b": ping\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        b"\x31data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\r\n\r\ndata: [DONE]\r\n\r\n",
        b"\x02id: 9\nretry: 10\ndata\ndata:2\rx\n\r\r\n\xffdata: \xfe\n\ndata: cut",
    }
    done = (2, 3, b"c1", b"HassTurnOn")
    seeds["run_record"] = {
        run_record(1, 0, 0, (8, 4), []),
        run_record(1, 0, 0, (8, 4), [done]),
        run_record(1, 2, 0, (8, 4), [done, (2, 1, b"c2", b"HassValveOpen")]),
        run_record(1, 3, 1, (8, 4), [done, (0,)]),
        run_record(1, 3, 4, (8, 0), [(1, 2)]),
        run_record(1, 0, 0, (8, 4), [done], [(1, 600000, 30000, [(0, 30000)])]),
        run_record(1, 0, 0, (8, 4), [], [(0, 1000, 300, [(500, 100), (100, 200)]), (3, 10, 10, [])]),
        bytes([1]) + struct.pack("<I", 1) + bytes([0, 2]) + struct.pack("<Q", 5) + b"\x02c1\x0aHassTurnOn",
    }
    # The target's input: FLAGS FLIP NOW, then the bytes. Each record as
    # stored (FLAGS 0), and its body for the target to seal (FLAGS 1).
    head = lambda flags: bytes([flags]) + struct.pack("<HI", 77, 4_000_000)
    seeds["run_record"] = {head(0) + r for r in seeds["run_record"]} | {
        head(1) + r[:-4] for r in seeds["run_record"]
    }
    host_seeds(seeds)
    for target, items in seeds.items():
        folder = ROOT / "corpus" / target
        folder.mkdir(parents=True, exist_ok=True)
        for item in items:
            (folder / hashlib.sha1(item).hexdigest()).write_bytes(item)
        print(f"{target}: {len(items)} seeds in {folder}")


if __name__ == "__main__":
    main()
