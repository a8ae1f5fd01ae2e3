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


def main():
    seeds = {"action_json": set(), "plan_json": set(), "run_events": set(), "link_frames": set()}
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
    # Device run records (core/src/resume.rs layout, version 1) and audit
    # entries: a fresh run, tool rows done and in flight, a stopped run.
    def run_record(phase, stage, status, limits, rows):
        body = b"BGR" + bytes([1]) + struct.pack("<I", 1) + bytes([phase, stage, status])
        body += struct.pack("<Q", 1234) + bytes([limits[0], limits[1]])
        tools = sum(1 for r in rows if r[0] == 2)
        body += bytes([tools, len(rows)])
        for row in rows:
            if row[0] == 2:
                body += bytes([2, row[1], len(row[2])]) + row[2] + bytes([len(row[3])]) + row[3]
            else:
                body += bytes(row)
        return body + struct.pack("<I", binascii.crc32(body))

    done = (2, 3, b"c1", b"HassTurnOn")
    seeds["run_record"] = {
        run_record(1, 0, 0, (8, 4), []),
        run_record(1, 0, 0, (8, 4), [done]),
        run_record(1, 2, 0, (8, 4), [done, (2, 1, b"c2", b"HassValveOpen")]),
        run_record(1, 3, 1, (8, 4), [done, (0,)]),
        run_record(1, 3, 4, (8, 0), [(1, 2)]),
        bytes([1]) + struct.pack("<I", 1) + bytes([0, 2]) + struct.pack("<Q", 5) + b"\x02c1\x0aHassTurnOn",
    }
    for target, items in seeds.items():
        folder = ROOT / "corpus" / target
        folder.mkdir(parents=True, exist_ok=True)
        for item in items:
            (folder / hashlib.sha1(item).hexdigest()).write_bytes(item)
        print(f"{target}: {len(items)} seeds in {folder}")


if __name__ == "__main__":
    main()
