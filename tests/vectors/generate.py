#!/usr/bin/env python3
"""Generate the differential test-vector corpus for `budgetgate eval`.

Expected responses are NOT written by hand: at generation time this script reads
the seed documents (default ``../shared/seeds`` relative to the repository root),
extracts the Python reference solution from each, ``exec``s it into a private
namespace and records what it returns (or that it raised ``ValueError``) for
every request below.  No reference code is stored in this repository.

Usage::

    python3 tests/vectors/generate.py [--seeds DIR] [--out DIR] [--check]

``--seeds`` (or the environment variable ``BUDGETGATE_SEEDS``) overrides the
seed directory.  ``--check`` regenerates in memory and fails if any file on
disk differs (useful in CI to detect drift).

Output: one JSON object per line,
``{"name":…,"request":{"fn":…,"args":{…}},"response":{"ok":…}|{"error":"invalid-input"}}``
plus ``"origin":"spec"`` on the few cases the harness (not the reference)
decides.  See README.md next to this file.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_SEEDS = REPO_ROOT.parent / "shared" / "seeds"


def dumps(value) -> str:
    """The one JSON spelling used everywhere in the corpus."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------
# Extracting the reference solution from a seed document
# --------------------------------------------------------------------------

# The code block of each seed follows this (Dutch) heading: "Stuck? See the
# example solution".  It ends at the first unindented line that is prose.
SOLUTION_MARKER = "Vastgelopen? Bekijk de voorbeeldoplossing"
TOP_LEVEL_CODE = re.compile(r"(import |from |def |class |@|#|[A-Za-z_][A-Za-z0-9_]*\s*=[^=])")

SEEDS = {
    # seed prefix: (first line of the code, functions that must be defined, last def)
    "000": ("import copy", ("validate_agent_action", "run_bounded_agent", "trace_work"), "trace_work"),
    "001": ("import re", ("aggregate_usage", "bounded_workflow", "_plan", "_limits"), "_limits"),
}


def find_seed(seeds_dir: Path, prefix: str) -> Path:
    found = sorted(seeds_dir.glob(f"{prefix}_*.txt"))
    if len(found) != 1:
        sys.exit(f"expected exactly one seed {prefix}_*.txt in {seeds_dir}, found {len(found)}")
    return found[0]


def extract_reference(path: Path, first_line: str, required: tuple, last_def: str) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    begin_search = 0
    markers = [i for i, line in enumerate(lines) if line.strip() == SOLUTION_MARKER]
    if markers:
        begin_search = markers[-1] + 1
    starts = [i for i in range(begin_search, len(lines)) if lines[i] == first_line]
    if not starts:
        sys.exit(f"{path.name}: start line {first_line!r} not found")
    start = starts[0]
    end = start
    for i in range(start, len(lines)):
        line = lines[i]
        if line.strip() == "" or line[0] in " \t" or TOP_LEVEL_CODE.match(line):
            end = i + 1
            continue
        break
    code = "\n".join(lines[start:end]).rstrip() + "\n"
    tree = ast.parse(code, filename=path.name)
    defs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    for node in tree.body:
        # Only imports, defs and constant assignments: nothing that runs an example.
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)):
            sys.exit(f"{path.name}: unexpected top-level statement at line {node.lineno}")
    missing = [name for name in required if name not in defs]
    if missing or defs[-1] != last_def:
        sys.exit(f"{path.name}: extracted block defines {defs}, needs {required} ending with {last_def}")
    return code


def load_references(seeds_dir: Path):
    namespaces, provenance = {}, {}
    for prefix, (first, required, last) in SEEDS.items():
        path = find_seed(seeds_dir, prefix)
        code = extract_reference(path, first, required, last)
        namespace = {"__name__": f"seed_{prefix}_reference"}
        exec(compile(code, f"<{path.name}: reference solution>", "exec"), namespace)
        namespaces[prefix] = namespace
        provenance[path.name] = {
            "seed_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
            "code_lines": code.count("\n"),
        }
    return namespaces, provenance


# --------------------------------------------------------------------------
# Request encoding (with raw number spellings) and the evaluation harness
# --------------------------------------------------------------------------


class Raw:
    """A JSON fragment written verbatim into the request (e.g. ``-0``, ``1e2``)."""

    def __init__(self, text: str):
        self.text = text


def encode(value) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        for key in value:
            assert isinstance(key, str), key
        return "{" + ",".join(dumps(k) + ":" + encode(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode(v) for v in value) + "]"
    return dumps(value)


class SpecDecided(Exception):
    """The harness (not the reference) rejects the request; see SPEC and README."""


# Built-in tool kinds of `budgetgate eval`.  Each is a **kwargs callable, because the
# reference calls `tool(**action['arguments'])`.

def _is_number(x) -> bool:
    return type(x) in (int, float)


def kind_add(**kwargs):
    if set(kwargs) != {"a", "b"} or not _is_number(kwargs["a"]) or not _is_number(kwargs["b"]):
        raise TypeError("add takes numbers a and b")
    return kwargs["a"] + kwargs["b"]


def kind_echo(**kwargs):
    return kwargs


def kind_fail(**kwargs):
    raise RuntimeError("this tool always fails")


def kind_repeat(**kwargs):
    if set(kwargs) != {"s", "n"} or type(kwargs["s"]) is not str or type(kwargs["n"]) is not int \
            or not 0 <= kwargs["n"] <= 10000:
        raise TypeError("repeat takes a string s and an integer n in 0..=10000")
    return kwargs["s"] * kwargs["n"]


def kind_nested(**kwargs):
    if kwargs:
        raise TypeError("nested takes no arguments")
    return {"count": 15, "items": [1, 2.5, "é", None, True]}


TOOL_KINDS = {"add": kind_add, "echo": kind_echo, "fail": kind_fail,
              "repeat": kind_repeat, "nested": kind_nested}


def scripted_policy(script):
    """Returns script[i] on its i-th call; IndexError once the script is used up."""
    calls = [0]

    def policy(observations):
        i = calls[0]
        calls[0] += 1
        return script[i]

    return policy


class Harness:
    def __init__(self, refs):
        self.r0 = refs["000"]
        self.r1 = refs["001"]

    def call(self, fn: str, args: dict):
        if fn == "validate_agent_action":
            return self.r0["validate_agent_action"](args["value"])
        if fn == "run_bounded_agent":
            script, tools_spec = args["script"], args["tools"]
            if not isinstance(script, list) or not isinstance(tools_spec, dict):
                raise SpecDecided("script must be an array and tools an object")
            tools = {}
            for name, kind in tools_spec.items():
                if not isinstance(kind, str) or kind not in TOOL_KINDS:
                    raise SpecDecided(f"unknown tool kind {kind!r}")
                tools[name] = TOOL_KINDS[kind]
            budgets = {k: args[k] for k in ("max_decisions", "max_tool_calls") if k in args}
            return self.r0["run_bounded_agent"](scripted_policy(script), tools, **budgets)
        if fn == "trace_work":
            return self.r0["trace_work"](args["trace"], args["decision_units"], args["tool_units"])
        if fn == "aggregate_usage":
            return self.r1["aggregate_usage"](args["plan"])
        if fn == "bounded_workflow":
            return self.r1["bounded_workflow"](args["plan"], args["limits"])
        raise KeyError(fn)

    def evaluate(self, fn: str, args: dict):
        """Returns (response, origin)."""
        try:
            return {"ok": self.call(fn, args)}, None
        except SpecDecided:
            return {"error": "invalid-input"}, "spec"
        except ValueError:
            return {"error": "invalid-input"}, None
        # Any other exception is a generator bug or a reference crash: let it propagate.


class Corpus:
    def __init__(self, harness: Harness):
        self.harness = harness
        self.files: dict[str, list[str]] = {}
        self.names: set[str] = set()
        self.results: dict[str, object] = {}   # name -> response, for reuse by later cases
        self.fn_counts: dict[str, int] = {}

    def add(self, file: str, name: str, fn: str, args: dict, expect: str | None = None):
        """Add one case.  `expect` ("ok", "error", or a status string for runs) is a
        sanity check on the generator's own construction, never the recorded value."""
        assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name), name
        assert name not in self.names, f"duplicate case name {name}"
        self.names.add(name)
        request_text = encode({"fn": fn, "args": args})
        request = json.loads(request_text)          # exactly what a JSON reader sees
        response, origin = self.harness.evaluate(request["fn"], request["args"])
        if expect is not None:
            got = "error" if "error" in response else "ok"
            if expect in ("ok", "error"):
                assert got == expect, f"{name}: expected {expect}, got {response}"
            else:
                assert got == "ok" and response["ok"]["status"] == expect, \
                    f"{name}: expected status {expect}, got {response}"
        line = '{"name":' + dumps(name) + ',"request":' + request_text + ',"response":' + dumps(response)
        if origin:
            line += ',"origin":' + dumps(origin)
        line += "}"
        assert "\n" not in line and "\r" not in line
        assert json.loads(line)["request"] == request
        self.files.setdefault(file, []).append(line)
        self.results[name] = response
        self.fn_counts[fn] = self.fn_counts.get(fn, 0) + 1
        return response


# --------------------------------------------------------------------------
# Case builders
# --------------------------------------------------------------------------

def final(text):
    return {"kind": "final", "text": text}


def tool(call_id="c1", name="add", arguments=...):
    return {"kind": "tool", "call_id": call_id, "name": name,
            "arguments": {"a": 7, "b": 8} if arguments is ... else arguments}


def hexname(ch: str) -> str:
    return "u" + "-".join(f"{ord(c):04x}" for c in ch)


PY_WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
# Characters that look blank but are not whitespace to str.strip().
NOT_WHITESPACE = ["\u200b", "\u2060", "\ufeff", "\u180e", "\u00ad", "\u200d"]

STD_TOOLS = {"add": "add", "echo": "echo", "fail": "fail", "repeat": "repeat", "nested": "nested"}


def encoded_len(value) -> int:
    return len(dumps(value).encode("utf-8"))


# ---------------- validate_agent_action ----------------

def cases_validate(c: Corpus):
    F = "validate.jsonl"

    def v(name, value, expect=None):
        c.add(F, "validate-" + name, "validate_agent_action", {"value": value}, expect)

    # SPEC A1 worked example (the copy independence itself is a unit-test matter).
    v("spec-add-7-8", tool(), "ok")
    v("spec-final-15", final("15"), "ok")

    # non-objects
    for label, value in [("null", None), ("int", 1), ("float", 1.5), ("bool", True),
                         ("string", "final"), ("array-empty", []),
                         ("array-of-final", [final("x")]), ("object-empty", {})]:
        v("non-action-" + label, value, "error")

    # ---- final
    v("final-one-char", final("x"), "ok")
    v("final-padded-text-kept-unstripped", final("  hi \n"), "ok")
    v("final-empty", final(""), "error")
    v("final-space", final(" "), "error")
    v("final-ascii-whitespace-mix", final(" \t\n\r\x0b\x0c "), "error")
    for ch in PY_WHITESPACE:
        v(f"final-only-whitespace-{hexname(ch)}", final(ch * 3), "error")
    v("final-unicode-whitespace-mix", final("\u00a0\u3000\u2028\u1680\x85\x1f"), "error")
    for ch in NOT_WHITESPACE:
        v(f"final-blank-looking-not-whitespace-{hexname(ch)}", final(ch), "ok")
    v("final-text-between-unicode-whitespace", final("\u3000x\u00a0"), "ok")
    for unit, label in [("a", "ascii"), ("é", "e-acute"), ("😀", "emoji"), ("中", "cjk")]:
        v(f"final-2000-chars-{label}", final(unit * 2000), "ok")
        v(f"final-2001-chars-{label}", final(unit * 2001), "error")
    v("final-2000-chars-combining-pairs", final("e\u0301" * 1000), "ok")
    v("final-2001-chars-combining-pairs", final("e\u0301" * 1000 + "e"), "error")
    v("final-2000-chars-mostly-space", final(" " * 1999 + "a"), "ok")
    v("final-2001-chars-mostly-space", final(" " * 2000 + "a"), "error")
    v("final-2001-chars-trailing-space", final("a" + " " * 2000), "error")
    for label, text in [("int", 15), ("float", 15.0), ("null", None), ("array", ["x"]),
                        ("bool", True), ("object", {"t": "x"})]:
        v(f"final-text-{label}", final(text), "error")
    v("final-missing-text", {"kind": "final"}, "error")
    v("final-extra-key", {"kind": "final", "text": "x", "call_id": "c1"}, "error")
    v("final-extra-arguments", {"kind": "final", "text": "x", "arguments": {}}, "error")
    v("final-keys-reversed-order", {"text": "done", "kind": "final"}, "ok")
    v("final-kind-capitalised", {"kind": "Final", "text": "x"}, "error")
    v("final-kind-trailing-space", {"kind": "final ", "text": "x"}, "error")
    v("final-text-with-escapes", final("line1\nline2\t\"q\"\\ \u0000\u001f\u007f\u2028"), "ok")

    # ---- tool: shape
    v("tool-missing-kind", {"call_id": "c1", "name": "add", "arguments": {}}, "error")
    v("tool-kind-null", {**tool(), "kind": None}, "error")
    v("tool-kind-uppercase", {**tool(), "kind": "TOOL"}, "error")
    v("tool-kind-other", {**tool(), "kind": "call"}, "error")
    for key in ("call_id", "name", "arguments"):
        t = tool()
        del t[key]
        v(f"tool-missing-{key.replace('_', '-')}", t, "error")
    v("tool-extra-key", {**tool(), "text": "x"}, "error")
    v("tool-extra-key-reason", {**tool(), "reason": None}, "error")
    v("tool-keys-shuffled-order",
      {"arguments": {"b": 8, "a": 7}, "name": "add", "kind": "tool", "call_id": "c1"}, "ok")

    # ---- call_id and name: [A-Za-z][A-Za-z0-9_-]{0,39}
    good = ["c", "C", "c1", "a" * 40, "Z" + "9" * 39, "c-1", "c_1", "c--__", "a-", "a_",
            "x" + "-" * 39]
    bad = ["a" * 41, "Z" + "9" * 40, "1c", "-c", "_c", "", "é", "cé", "c 1", "c1\n", "\nc1",
           "c.1", "c/1", "c:1", "ｃ1", "\u212a", "c1 "]
    for field in ("call_id", "name"):
        f = field.replace("_", "-")
        for s in good:
            label = f"len{len(s)}" if len(s) > 8 else re.sub(r"[^a-z0-9]", "x", s.lower())
            v(f"tool-{f}-ok-{label}-{hexname(s[:3])}", tool(**{field: s}), "ok")
        for s in bad:
            label = f"len{len(s)}-{hexname(s[0])}" if len(s) > 8 else (hexname(s) if s else "empty")
            v(f"tool-{f}-bad-{label}", tool(**{field: s}), "error")
        for label, value in [("int", 1), ("null", None), ("bool", True), ("array", ["c1"]),
                             ("float", 1.0)]:
            v(f"tool-{f}-type-{label}", tool(**{field: value}), "error")

    # ---- arguments: container and count
    v("tool-arguments-empty", tool(arguments={}), "ok")
    for label, value in [("null", None), ("array", []), ("string", "a"), ("int", 1),
                         ("array-of-pairs", [["a", 1]])]:
        v(f"tool-arguments-{label}", tool(arguments=value), "error")
    v("tool-arguments-8", tool(arguments={f"k{i}": i for i in range(8)}), "ok")
    v("tool-arguments-9", tool(arguments={f"k{i}": i for i in range(9)}), "error")
    v("tool-arguments-8-mixed-types",
      tool(arguments={"i": 1, "f": 1.5, "s": "x", "t": True, "n": None, "z": 0, "e": "", "m": -1}), "ok")

    # ---- argument keys: [A-Za-z][A-Za-z0-9_]{0,31}
    for label, key in [("len1", "a"), ("len32", "a" * 32), ("upper", "ABC"), ("underscore", "a_b"),
                       ("trailing-underscore", "a_"), ("digits", "a9_0"), ("python-keyword-class", "class"),
                       ("python-keyword-lambda", "lambda"), ("self", "self"), ("len32-mixed", "Z" + "_9" * 15 + "x")]:
        v(f"tool-arg-key-ok-{label}", tool(arguments={key: 1}), "ok")
    for label, key in [("len33", "a" * 33), ("hyphen", "a-b"), ("leading-digit", "1a"),
                       ("leading-underscore", "_a"), ("empty", ""), ("e-acute", "é"), ("space", "a b"),
                       ("dot", "a.b"), ("trailing-newline", "a\n"), ("fullwidth", "ａ")]:
        v(f"tool-arg-key-bad-{label}", tool(arguments={key: 1}), "error")

    # ---- argument values
    for label, value, expect in [
        ("string-empty", "", "ok"),
        ("string-2000-ascii", "a" * 2000, "ok"), ("string-2001-ascii", "a" * 2001, "error"),
        ("string-2000-e-acute", "é" * 2000, "ok"), ("string-2001-e-acute", "é" * 2001, "error"),
        ("string-2000-emoji", "😀" * 2000, "ok"), ("string-2001-emoji", "😀" * 2001, "error"),
        ("string-escapes", "\n\"\\\u0000\u001f\u007f\u2028", "ok"),
        ("bool-true", True, "ok"), ("bool-false", False, "ok"), ("null", None, "ok"),
        ("int-0", 0, "ok"), ("int-7", 7, "ok"), ("float-7.0", 7.0, "ok"),
        ("raw-1e2", Raw("1e2"), "ok"), ("raw-1e2-uppercase-e", Raw("1E2"), "ok"), ("raw-1e-plus-2", Raw("1e+2"), "ok"),
        ("raw-100e-2", Raw("100e-2"), "ok"), ("raw-minus-0", Raw("-0"), "ok"),
        ("float-minus-0.0", -0.0, "ok"), ("raw-0e0", Raw("0e0"), "ok"),
        ("int-1000000", 1000000, "ok"), ("int-minus-1000000", -1000000, "ok"),
        ("int-1000001", 1000001, "error"), ("int-minus-1000001", -1000001, "error"),
        ("float-1e6", 1e6, "ok"), ("float-minus-1e6", -1e6, "ok"),
        ("raw-1e6", Raw("1e6"), "ok"), ("raw-minus-1e6", Raw("-1e6"), "ok"),
        ("float-1000000.5", 1000000.5, "error"), ("float-minus-1000000.5", -1000000.5, "error"),
        ("raw-1000000.0000000001-next-float-above-1e6", Raw("1000000.0000000001"), "error"),
        ("raw-1000000.00000000001-rounds-to-1e6", Raw("1000000.00000000001"), "ok"),
        ("raw-1000000.0000001", Raw("1000000.0000001"), "error"),
        ("float-999999.9999999999", 999999.9999999999, "ok"),
        ("int-2pow53-plus-1", 9007199254740993, "error"),
        ("int-i64-max", 9223372036854775807, "error"), ("int-i64-min", -9223372036854775808, "error"),
        ("int-u64-max", 18446744073709551615, "error"), ("int-u64-max-plus-1", 18446744073709551616, "error"),
        ("int-huge-20-digits", 99999999999999999999, "error"),
        ("int-huge-negative", -99999999999999999999, "error"),
        ("int-huge-400-digits", Raw("1" + "0" * 400), "error"),
        ("float-1e16", 1e16, "error"), ("float-1e22", 1e22, "error"),
        ("float-max", 1.7976931348623157e308, "error"), ("float-minus-max", -1.7976931348623157e308, "error"),
        ("float-min-subnormal", 5e-324, "ok"), ("float-1e-05", 1e-05, "ok"), ("float-0.1", 0.1, "ok"),
        ("raw-1e-400-underflows-to-0", Raw("1e-400"), "ok"),
        ("raw-minus-1e-400-underflows-to-minus-0", Raw("-1e-400"), "ok"),
        ("array-empty", [], "error"), ("array-one", [1], "error"), ("object-empty", {}, "error"),
        ("object", {"x": 1}, "error"),
    ]:
        v(f"tool-arg-value-{label}", tool(arguments={"a": value}), expect)
    v("tool-arg-values-one-bad-among-8",
      tool(arguments={**{f"k{i}": i for i in range(7)}, "k7": [1]}), "error")


def cases_overflow(c: Corpus):
    """Number literals beyond f64 (Python parses them to inf).  Kept apart because a
    default serde_json reader rejects such a line as 'number out of range'."""
    F = "number_overflow.jsonl"
    for label, text in [("1e400", "1e400"), ("minus-1e400", "-1e400"), ("1.5e309", "1.5e309")]:
        c.add(F, f"overflow-validate-arg-{label}", "validate_agent_action",
              {"value": tool(arguments={"a": Raw(text)})}, "error")
    c.add(F, "overflow-run-max-decisions-1e400", "run_bounded_agent",
          {"script": [final("x")], "tools": {}, "max_decisions": Raw("1e400")}, "error")
    c.add(F, "overflow-run-script-arg-1e400", "run_bounded_agent",
          {"script": [tool(name="echo", arguments={"x": Raw("1e400")})], "tools": STD_TOOLS},
          "policy-error")
    c.add(F, "overflow-trace-work-units-1e400", "trace_work",
          {"trace": [], "decision_units": Raw("1e400"), "tool_units": {}}, "error")
    c.add(F, "overflow-plan-tokens-1e400", "aggregate_usage",
          {"plan": [{"id": "a", "parent": None, "tokens": Raw("1e400"), "output": 0}]}, "error")
    c.add(F, "overflow-limits-steps-1e400", "bounded_workflow",
          {"plan": [], "limits": {"steps": Raw("1e400"), "tokens": 0, "output": 0, "depth": 0, "fanout": 0}},
          "error")


# ---------------- run_bounded_agent ----------------

def repeat_args_for(unit: str, target: int):
    """Smallest n (then largest s) with len(json(s*n)) == target bytes, s = unit*k + 'a'*m,
    len(s) <= 2000; None when unreachable."""
    unit_bytes = encoded_len(unit) - 2
    body = target - 2
    for n in range(1, 10001):
        if body % n:
            continue
        q = body // n
        k, m = divmod(q, unit_bytes)
        if k >= 1 and k + m <= 2000:
            s = unit * k + "a" * m
            assert encoded_len(s * n) == target
            return {"s": s, "n": n}
    return None


def echo_padded(fixed: dict, target: int):
    """Arguments for echo whose compact encoding is exactly `target` bytes: `fixed`
    first, then up to three ASCII padding strings."""
    pads = ["p0", "p1", "p2"]
    args = {**fixed, **{p: "" for p in pads}}
    need = target - encoded_len(args)
    assert 0 <= need <= 6000, need
    for p in pads:
        take = min(need, 2000)
        args[p] = "x" * take
        need -= take
    assert need == 0 and encoded_len(args) == target and len(args) <= 8
    return args


def cases_run(c: Corpus):
    F = "run.jsonl"

    def run(name, script, tools=STD_TOOLS, expect=None, **budgets):
        args = {"script": script, "tools": tools, **budgets}
        return c.add(F, "run-" + name, "run_bounded_agent", args, expect)

    # SPEC A2 worked examples
    run("spec-add-then-final-15", [tool("c1", "add", {"a": 7, "b": 8}), final("15")], {"add": "add"}, "final")
    run("spec-fresh-ids-tool-budget", [tool(f"c{i}", "add", {"a": 7, "b": 8}) for i in range(3)],
        {"add": "add"}, "tool-budget", max_decisions=3, max_tool_calls=1)
    run("spec-decision-budget-1", [tool("c1", "add", {"a": 7, "b": 8}), final("15")], {"add": "add"},
        "decision-budget", max_decisions=1, max_tool_calls=4)

    # stop orders
    run("empty-script-policy-error", [], expect="policy-error")
    run("final-first", [final("done")], expect="final")
    run("final-with-tool-budget-zero", [final("done")], expect="final", max_tool_calls=0)
    run("final-after-tool-budget-used", [tool("c1"), final("done")], expect="final", max_tool_calls=1)
    run("tool-budget-stops-before-later-final", [tool("c1"), tool("c2"), final("x")],
        expect="tool-budget", max_tool_calls=1)
    run("duplicate-before-tool-budget", [tool("c1"), tool("c1")], expect="duplicate-call", max_tool_calls=1)
    run("duplicate-id-different-tool", [tool("c1", "add"), tool("c1", "echo", {})], expect="duplicate-call")
    run("duplicate-after-unknown-tool", [tool("c1", "nope", {}), tool("c1")], expect="duplicate-call")
    run("duplicate-after-failing-tool", [tool("c1", "fail", {}), tool("c1")], expect="duplicate-call")
    run("duplicate-after-tool-error-args", [tool("c1", "add", {"a": "7", "b": 8}), tool("c1")],
        expect="duplicate-call")
    run("call-id-case-sensitive-not-duplicate", [tool("c1"), tool("C1"), final("ok")], expect="final")
    run("tool-budget-zero-first-tool", [tool("c1")], expect="tool-budget", max_tool_calls=0)
    run("tool-budget-before-unknown-tool", [tool("c1"), tool("c2", "nope", {})], expect="tool-budget",
        max_tool_calls=1)
    run("policy-error-after-tools", [tool("c1"), tool("c2", "echo", {"x": 1}), 5], expect="policy-error")
    run("policy-error-before-duplicate", [tool("c1"), {**tool("c1"), "extra": 1}], expect="policy-error")
    run("script-exhausted-after-tool", [tool("c1")], expect="policy-error")
    run("script-exhausted-after-two-tools", [tool("c1"), tool("c2")], expect="policy-error")
    run("script-longer-than-budget-unused-invalid", [tool("c1"), 5, None], expect="decision-budget",
        max_decisions=1)
    run("defaults-four-tools-then-final", [tool(f"c{i}") for i in range(4)] + [final("done")], expect="final")
    run("defaults-five-tools-tool-budget", [tool(f"c{i}") for i in range(5)], expect="tool-budget")
    run("defaults-final-with-extra-key-policy-error",
        [tool(f"c{i}") for i in range(4)] + [{"kind": "final", "text": "x", "extra": 1}],
        expect="policy-error")
    run("default-decisions-8-decision-budget", [tool(f"c{i}") for i in range(9)], expect="decision-budget",
        max_tool_calls=8)
    run("decision-budget-all-tools", [tool(f"c{i}") for i in range(4)] + [final("late")],
        expect="decision-budget", max_decisions=4, max_tool_calls=4)
    run("tool-budget-not-decision-budget", [tool(f"c{i}") for i in range(5)], expect="tool-budget",
        max_decisions=5, max_tool_calls=4)
    run("decision-budget-exact-after-tools", [tool(f"c{i}") for i in range(5)], expect="decision-budget",
        max_decisions=5, max_tool_calls=5)

    # invalid script elements
    for label, element in [("int", 5), ("null", None), ("string", "final"), ("array", []),
                           ("final-whitespace", final(" \u3000")), ("final-2001", final("a" * 2001)),
                           ("tool-9-args", tool(arguments={f"k{i}": i for i in range(9)})),
                           ("tool-bad-call-id", tool("1c")), ("tool-bad-name", tool(name="a" * 41)),
                           ("tool-arg-array", tool(arguments={"a": [1]})),
                           ("tool-arg-1e16", tool(name="echo", arguments={"a": 1e16})),
                           ("tool-arg-1e22", tool(name="echo", arguments={"a": 1e22})),
                           ("tool-arg-float-max", tool(name="echo", arguments={"a": 1.7976931348623157e308})),
                           ("tool-arg-1234567.0", tool(name="echo", arguments={"a": 1234567.0})),
                           ("tool-arg-huge-int", tool(name="echo", arguments={"a": 99999999999999999999}))]:
        run(f"invalid-action-{label}", [element], expect="policy-error")
    run("final-2000-emoji", [final("😀" * 2000)], expect="final")

    # unknown tool / failing tool / bad arguments
    run("unknown-tool", [tool("c1", "nope", {}), final("done")], expect="final")
    run("unknown-tool-case-sensitive", [tool("c1", "Add"), final("done")], expect="final")
    run("unknown-tool-empty-registry", [tool("c1"), final("done")], {}, "final")
    run("failing-tool", [tool("c1", "fail", {}), final("done")], expect="final")
    run("failing-tool-with-args", [tool("c1", "fail", {"x": 1}), final("done")], expect="final")
    run("mixed-observations", [tool("c1", "nope", {}), tool("c2", "fail", {}), tool("c3"), final("15")],
        expect="final")
    for label, arguments in [("missing-b", {"a": 7}), ("extra-c", {"a": 7, "b": 8, "c": 1}),
                             ("string", {"a": "7", "b": 8}), ("bool", {"a": True, "b": 8}),
                             ("null", {"a": None, "b": 1}), ("no-args", {}), ("renamed", {"x": 7, "y": 8})]:
        run(f"add-bad-args-{label}", [tool("c1", "add", arguments), final("x")], expect="final")

    # add arithmetic: int/float result spelling
    for label, a, b in [("int-int", 7, 8), ("int-float", 7, 8.0), ("float-float", 0.1, 0.2),
                        ("minus0-minus0-float", -0.0, -0.0), ("int0-minus0-float", 0, -0.0),
                        ("raw-minus0-ints", Raw("-0"), Raw("-0")), ("max-ints", 1000000, 1000000),
                        ("max-floats", 1e6, 1e6), ("subnormals", 5e-324, 5e-324), ("small-plus-0", 1e-05, 0),
                        ("int-plus-half", 1000000, 0.5), ("neg", -1000000, -1000000),
                        ("raw-1e2-int", Raw("1e2"), 1), ("cancel-to-float-zero", 1.5, -1.5),
                        ("cancel-to-int-zero", 5, -5), ("tiny-sum", 1e-07, 2e-07)]:
        run(f"add-{label}", [tool("c1", "add", {"a": a, "b": b}), final("x")], expect="final")

    # echo: spellings of floats, key order, escapes
    for label, value in [("1e-05", 1e-05), ("0.0001", 0.0001), ("1e-07", 1e-07), ("2.5e-05", 2.5e-05),
                         ("0.1", 0.1), ("minus-0.0", -0.0), ("5e-324", 5e-324), ("1e6-float", 1e6),
                         ("minus-1e6-float", -1e6), ("123456.789", 123456.789), ("1.5", 1.5),
                         ("0.30000000000000004", 0.30000000000000004), ("1e-100", 1e-100),
                         ("raw-1e2", Raw("1e2")), ("raw-minus-0", Raw("-0")), ("int-1000000", 1000000),
                         ("raw-1000000.00000000001", Raw("1000000.00000000001")), ("raw-1e-400", Raw("1e-400")),
                         ("true", True), ("null", None), ("empty-string", "")]:
        run(f"echo-value-{label}", [tool("c1", "echo", {"v": value}), final("x")], expect="final")
    run("echo-no-args", [tool("c1", "echo", {}), final("x")], expect="final")
    run("echo-key-order-preserved", [tool("c1", "echo", {"b": 1, "a": 2, "Z": 3, "y": 4}),
                                     final("x")], expect="final")
    run("echo-eight-args", [tool("c1", "echo", {f"k{7 - i}": i for i in range(8)}), final("x")], expect="final")
    run("echo-escapes", [tool("c1", "echo", {"s": "\n\"\\/\u0000\u001f\u007f\u0085\u2028\u2029é😀"}),
                         final("x")], expect="final")
    run("nested", [tool("c1", "nested", {}), final("15")], expect="final")
    run("nested-with-arg-tool-error", [tool("c1", "nested", {"x": 1}), final("x")], expect="final")

    # repeat: byte edge at 4096 for different encodings
    for unit, label in [("a", "ascii"), ("é", "e-acute"), ("😀", "emoji"), ("中", "cjk"),
                        ("\n", "newline"), ('"', "quote"), ("\\", "backslash"), ("\t", "tab"),
                        ("\u001f", "u001f"), ("\u0000", "nul"), ("\u007f", "del"), ("\u0085", "nel"),
                        ("\u2028", "u2028"), ("/", "slash")]:
        for target in (4095, 4096, 4097):
            args = repeat_args_for(unit, target)
            if args is None:
                continue
            resp = run(f"repeat-{label}-{target}-bytes", [tool("c1", "repeat", args), final("x")], expect="final")
            ok = resp["ok"]["observations"][0]["ok"]
            assert ok == (target <= 4096), (label, target, resp["ok"]["observations"][0]["data"][:20])
    run("repeat-e-acute-2200-spec-example", [tool("c1", "repeat", {"s": "é", "n": 2200}), final("x")],
        expect="final")
    run("repeat-e-acute-2047-4096-bytes", [tool("c1", "repeat", {"s": "é", "n": 2047}), final("x")], expect="final")
    run("repeat-e-acute-2048-4098-bytes", [tool("c1", "repeat", {"s": "é", "n": 2048}), final("x")], expect="final")
    run("repeat-ascii-4094-pure", [tool("c1", "repeat", {"s": "a", "n": 4094}), final("x")], expect="final")
    run("repeat-ascii-4095-pure", [tool("c1", "repeat", {"s": "a", "n": 4095}), final("x")], expect="final")
    run("repeat-n-0", [tool("c1", "repeat", {"s": "abc", "n": 0}), final("x")], expect="final")
    run("repeat-empty-s-n-10000", [tool("c1", "repeat", {"s": "", "n": 10000}), final("x")], expect="final")
    for label, arguments in [("n-10001", {"s": "", "n": 10001}), ("n-minus-1", {"s": "a", "n": -1}),
                             ("n-bool", {"s": "a", "n": True}), ("n-float", {"s": "a", "n": 3.0}),
                             ("s-int", {"s": 5, "n": 1}), ("missing-n", {"s": "a"}),
                             ("extra", {"s": "a", "n": 1, "x": 1})]:
        run(f"repeat-bad-{label}", [tool("c1", "repeat", arguments), final("x")], expect="final")

    # echo at the byte edge with float spellings (Python repr decides the byte count)
    for label, value in [("1e-05", 1e-05), ("1e-07", 1e-07), ("2.5e-05", 2.5e-05), ("0.0001", 0.0001),
                         ("minus-0.0", -0.0), ("5e-324", 5e-324), ("1e6-float", 1e6), ("0.1", 0.1),
                         ("123456.789", 123456.789), ("0.30000000000000004", 0.30000000000000004),
                         ("1e-100", 1e-100), ("int-7", 7), ("raw-minus-0", Raw("-0")), ("raw-1e2", Raw("1e2"))]:
        for target in (4096, 4097):
            fixed_value = json.loads(encode(value))
            arguments = echo_padded({"f": fixed_value}, target)
            if isinstance(value, Raw):
                arguments["f"] = value
            resp = run(f"echo-edge-{label}-{target}-bytes", [tool("c1", "echo", arguments), final("x")],
                       expect="final")
            assert resp["ok"]["observations"][0]["ok"] == (target <= 4096), label
    for label, value in [("u2028", "\u2028"), ("newline", "\n"), ("u001f", "\u001f"), ("del", "\u007f"),
                         ("emoji", "😀")]:
        for target in (4096, 4097):
            arguments = echo_padded({"f": value * 10}, target)
            resp = run(f"echo-edge-string-{label}-{target}-bytes", [tool("c1", "echo", arguments), final("x")],
                       expect="final")
            assert resp["ok"]["observations"][0]["ok"] == (target <= 4096), label

    # budgets
    many = [tool(f"c{i}", "nope", {}) for i in range(40)]
    run("max-decisions-1", [final("x")], expect="final", max_decisions=1)
    run("max-decisions-32-16-tools-then-final", many[:16] + [final("x")], expect="final",
        max_decisions=32, max_tool_calls=16)
    run("max-decisions-32-tool-budget-at-16", many, expect="tool-budget", max_decisions=32, max_tool_calls=16)
    run("max-decisions-16-decision-budget", many, expect="decision-budget", max_decisions=16, max_tool_calls=16)
    run("max-tool-calls-16", many[:16] + [final("x")], expect="final", max_tool_calls=16, max_decisions=17)
    run("max-tool-calls-0-final", [final("x")], expect="final", max_tool_calls=0)
    run("max-tool-calls-raw-minus-0", [tool("c1")], expect="tool-budget", max_tool_calls=Raw("-0"))
    run("max-decisions-raw-1e0", [final("x")], expect="error", max_decisions=Raw("1e0"))
    for label, value in [("0", 0), ("33", 33), ("minus-1", -1), ("true", True), ("false", False),
                         ("8.0", 8.0), ("null", None), ("string", "8"), ("huge", 99999999999999999999)]:
        run(f"max-decisions-bad-{label}", [final("x")], expect="error", max_decisions=value)
    for label, value in [("17", 17), ("minus-1", -1), ("true", True), ("false", False), ("4.0", 4.0),
                         ("null", None), ("raw-0.0", Raw("0.0"))]:
        run(f"max-tool-calls-bad-{label}", [final("x")], expect="error", max_tool_calls=value)
    run("max-tool-calls-only-given", [tool("c1"), final("x")], expect="final", max_tool_calls=2)
    run("max-decisions-only-given", [tool(f"c{i}") for i in range(6)], expect="tool-budget", max_decisions=6)

    # tools map
    eight = {f"t{i}": kind for i, kind in enumerate(["add", "echo", "fail", "repeat", "nested", "add", "echo", "fail"])}
    nine = {**eight, "t8": "nested"}
    run("tools-8-entries", [tool("c1", "t0"), final("x")], eight, "final")
    run("tools-9-entries", [final("x")], nine, "error")
    run("tools-empty", [final("x")], {}, "final")
    run("tools-same-kind-two-names", [tool("c1", "plus"), tool("c2", "sum"), final("x")],
        {"plus": "add", "sum": "add"}, "final")
    for label, tname, expect in [("len40", "a" * 40, "final"), ("len41", "a" * 41, "error"),
                                 ("hyphen", "add-1", "final"), ("underscore", "add_1", "final"),
                                 ("leading-digit", "1add", "error"), ("empty", "", "error"),
                                 ("e-acute", "é", "error"), ("space", "add 1", "error"),
                                 ("leading-hyphen", "-add", "error"), ("dot", "add.v2", "error")]:
        run(f"tools-name-{label}", [tool("c1", tname) if expect == "final" else final("x"), final("x")],
            {tname: "add"}, expect)
    for label, kind in [("unknown", "sum"), ("uppercase", "Add"), ("null", None), ("int", 5),
                        ("object", {"kind": "add"})]:
        run(f"tools-kind-{label}-spec", [final("x")], {"add": kind}, "error")
    run("tools-bad-name-and-kind", [final("x")], {"1x": "sum"}, "error")

    # a longer mixed run whose trace is reused by trace_work cases
    run("long-mixed", [tool("c1"), tool("c2", "echo", {"v": 1e-05}), tool("c3", "nope", {}),
                       tool("c4", "fail", {}), tool("c5", "nested", {}), tool("c6", "repeat", {"s": "ab", "n": 3}),
                       final("done")], expect="final", max_tool_calls=6)


# ---------------- trace_work ----------------

def cases_trace_work(c: Corpus):
    F = "trace_work.jsonl"

    def tw(name, trace, decision_units, tool_units, expect=None):
        c.add(F, "trace-work-" + name, "trace_work",
              {"trace": trace, "decision_units": decision_units, "tool_units": tool_units}, expect)

    spec = c.results["run-spec-add-then-final-15"]["ok"]["trace"]
    tw("spec-example", spec, 2, {"add": 3}, "ok")
    units = {"add": 3, "echo": 1, "fail": 5, "repeat": 2, "nested": 4}
    # traces of earlier runs (reference output fed back in)
    run_names = sorted(n for n, r in c.results.items()
                       if n.startswith("run-") and "ok" in r and r["ok"]["trace"])
    picks = [n for n in run_names if any(k in n for k in (
        "spec-", "long-mixed", "duplicate", "tool-budget", "policy-error", "unknown-tool", "failing",
        "decision-budget", "nested", "max-decisions-32"))]
    for n in picks:
        trace = c.results[n]["ok"]["trace"]
        tw("from-" + n, trace, 2, units)
    tw("from-tools-8-entries-missing-cost", c.results["run-tools-8-entries"]["ok"]["trace"], 2, units, "error")

    def rows(n, kind="final"):
        return [{"step": i, "kind": kind} for i in range(n)]

    def trow(step, name="add", executed=True, ok=True, call_id=None):
        return {"step": step, "kind": "tool", "call_id": call_id or f"c{step}", "name": name,
                "executed": executed, "ok": ok}

    tw("empty", [], 2, {}, "ok")
    tw("empty-max-units", [], 1000, {}, "ok")
    tw("rows-32", rows(32), 1, {}, "ok")
    tw("rows-33", rows(33), 1, {}, "error")
    tw("rows-32-all-executed-max-cost", [trow(i) for i in range(32)], 1000, {"add": 1000}, "ok")
    tw("rows-33-rejected", [{"step": i, "kind": "rejected", "reason": "tool-budget"} for i in range(33)], 0, {},
       "error")
    tw("steps-start-at-1", [{"step": i + 1, "kind": "final"} for i in range(2)], 1, {}, "error")
    tw("steps-skip", [{"step": 0, "kind": "final"}, {"step": 2, "kind": "final"}], 1, {}, "error")
    tw("steps-repeat", [{"step": 0, "kind": "final"}, {"step": 0, "kind": "final"}], 1, {}, "error")
    tw("steps-descending", [{"step": 1, "kind": "final"}, {"step": 0, "kind": "final"}], 1, {}, "error")
    for label, step in [("bool-false", False), ("float", 0.0), ("string", "0"), ("null", None),
                        ("raw-0e0", Raw("0e0"))]:
        tw(f"step-0-{label}", [{"step": step, "kind": "final"}], 1, {}, "error")
    tw("step-0-raw-minus-0", [{"step": Raw("-0"), "kind": "final"}], 1, {}, "ok")
    tw("step-1-bool-true", [{"step": 0, "kind": "final"}, {"step": True, "kind": "final"}], 1, {}, "error")
    tw("step-missing", [{"kind": "final"}], 1, {}, "error")
    for label, kind in [("capitalised", "Tool"), ("null", None), ("other", "observation"), ("int", 1)]:
        tw(f"kind-{label}", [{"step": 0, "kind": kind}], 1, {}, "error")
    tw("kind-missing", [{"step": 0}], 1, {}, "error")
    tw("row-not-object", [[0, "final"]], 1, {}, "error")
    tw("row-null", [None], 1, {}, "error")
    for label, trace in [("object", {"0": {"step": 0, "kind": "final"}}), ("null", None), ("string", "[]")]:
        tw(f"trace-{label}", trace, 1, {}, "error")
    tw("rejected-without-reason", [{"step": 0, "kind": "rejected"}], 3, {}, "ok")
    tw("final-with-extra-fields", [{"step": 0, "kind": "final", "name": 5, "executed": "yes"}], 3, {}, "ok")
    tw("rejected-with-executed-true", [{"step": 0, "kind": "rejected", "name": "add", "executed": True}], 3, {},
       "ok")
    tw("tool-missing-name", [{"step": 0, "kind": "tool", "executed": False}], 1, {}, "error")
    tw("tool-missing-executed", [{"step": 0, "kind": "tool", "name": "add"}], 1, {"add": 1}, "error")
    tw("tool-name-not-string", [{"step": 0, "kind": "tool", "name": 5, "executed": False}], 1, {}, "error")
    tw("tool-name-null", [{"step": 0, "kind": "tool", "name": None, "executed": False}], 1, {}, "error")
    tw("tool-executed-int", [{"step": 0, "kind": "tool", "name": "add", "executed": 1}], 1, {"add": 1}, "error")
    tw("tool-executed-string", [{"step": 0, "kind": "tool", "name": "add", "executed": "true"}], 1, {"add": 1},
       "error")
    tw("tool-executed-null", [{"step": 0, "kind": "tool", "name": "add", "executed": None}], 1, {"add": 1},
       "error")
    tw("tool-minimal-fields", [{"step": 0, "kind": "tool", "name": "add", "executed": True}], 1, {"add": 1}, "ok")
    tw("tool-executed-without-cost", [trow(0)], 2, {}, "error")
    tw("tool-executed-other-cost", [trow(0)], 2, {"echo": 1}, "error")
    tw("tool-not-executed-without-cost", [trow(0, "nope", False, False)], 2, {}, "ok")
    tw("tool-not-executed-empty-name", [trow(0, "", False, False)], 2, {}, "ok")
    tw("tool-executed-empty-name-with-cost", [trow(0, "")], 2, {"": 9}, "ok")
    tw("tool-executed-name-case-sensitive", [trow(0, "Add")], 2, {"add": 3}, "error")
    tw("tool-unit-key-not-a-tool-name", [trow(0, "not a name!")], 2, {"not a name!": 7}, "ok")
    tw("tool-executed-ok-false-still-costs", [trow(0, "fail", True, False)], 2, {"fail": 5}, "ok")
    tw("all-kinds", [trow(0), {"step": 1, "kind": "rejected", "reason": "duplicate-call-id"}], 2, {"add": 3}, "ok")
    for label, du, expect in [("0", 0, "ok"), ("1000", 1000, "ok"), ("1001", 1001, "error"),
                              ("minus-1", -1, "error"), ("true", True, "error"), ("false", False, "error"),
                              ("float-2.0", 2.0, "error"), ("null", None, "error"), ("string", "2", "error"),
                              ("raw-minus-0", Raw("-0"), "ok"), ("raw-1e3", Raw("1e3"), "error"),
                              ("huge", 99999999999999999999, "error")]:
        tw(f"decision-units-{label}", [trow(0), {"step": 1, "kind": "final"}], du, {"add": 3}, expect)
    for label, cost, expect in [("0", 0, "ok"), ("1000", 1000, "ok"), ("1001", 1001, "error"),
                                ("minus-1", -1, "error"), ("true", True, "error"), ("float-3.0", 3.0, "error"),
                                ("null", None, "error"), ("raw-minus-0", Raw("-0"), "ok")]:
        tw(f"tool-cost-{label}", [trow(0)], 2, {"add": cost}, expect)
    tw("tool-cost-bad-but-unused", [], 2, {"unused": 1001}, "error")
    eight = {f"t{i}": i for i in range(8)}
    tw("tool-units-8", [trow(0, "t7")], 2, eight, "ok")
    tw("tool-units-9", [trow(0, "t7")], 2, {**eight, "t8": 8}, "error")
    tw("tool-units-9-empty-trace", [], 2, {**eight, "t8": 8}, "error")
    for label, tu in [("null", None), ("array", []), ("array-of-pairs", [["add", 3]])]:
        tw(f"tool-units-{label}", [], 2, tu, "error")
    tw("max-total", [trow(i, f"t{i % 8}") for i in range(32)], 1000, {f"t{i}": 1000 for i in range(8)}, "ok")
    tw("unknown-not-executed-costs-decision", [trow(0, "nope", False, False), {"step": 1, "kind": "final"}], 2,
       {"add": 3}, "ok")
    tw("invalid-row-after-valid", [{"step": 0, "kind": "final"}, {"step": 1, "kind": "bogus"}], 2, {}, "error")


# ---------------- plans ----------------

def row(i, parent=None, tokens=0, output=0):
    return {"id": i, "parent": parent, "tokens": tokens, "output": output}


SPEC_PLAN = [row("a", None, 2, 1), row("b", "a", 3, 2)]
LESSON_PLAN = [row("a", None, 2, 1), row("b", "a", 3, 0), row("c", "a", 0, 2), row("d", "b", 1, 1)]
BIG = {"steps": 32, "tokens": 320000, "output": 320000, "depth": 32, "fanout": 32}


def lim(**over):
    return {**BIG, **over}


def cases_plans(c: Corpus):
    F = "plan.jsonl"

    def agg(name, plan, expect=None):
        c.add(F, "aggregate-" + name, "aggregate_usage", {"plan": plan}, expect)

    def bw(name, plan, limits, expect=None):
        return c.add(F, "workflow-" + name, "bounded_workflow", {"plan": plan, "limits": limits}, expect)

    spec_limits = {"steps": 4, "tokens": 4, "output": 10, "depth": 4, "fanout": 4}
    agg("spec-a-b", SPEC_PLAN, "ok")
    r = bw("spec-tokens-4-stops-before-b", SPEC_PLAN, spec_limits, "ok")
    assert r["ok"]["accepted"] == ["a"] and r["ok"]["reason"] == "tokens"
    r = bw("spec-tokens-5-complete", SPEC_PLAN, {**spec_limits, "tokens": 5}, "ok")
    assert r["ok"]["reason"] == "complete" and r["ok"]["stopped"] is None
    r = bw("spec-free-step-steps-0", [row("z")], {**spec_limits, "steps": 0}, "ok")
    assert r["ok"]["reason"] == "steps" and r["ok"]["accepted"] == []
    agg("lesson-plan", LESSON_PLAN, "ok")
    for label, over in [("tokens-4", {"tokens": 4}), ("steps-2", {"steps": 2}), ("output-2", {"output": 2}),
                        ("depth-1", {"depth": 1}), ("fanout-1", {"fanout": 1}), ("all-4", {}),
                        ("depth-2", {"depth": 2}), ("tokens-6", {"tokens": 6}), ("tokens-5", {"tokens": 5})]:
        bw(f"lesson-plan-{label}", LESSON_PLAN,
           {**{"steps": 4, "tokens": 4, "output": 4, "depth": 4, "fanout": 4}, **over}, "ok")

    # aggregate shapes
    agg("empty", [], "ok")
    chain32 = [row("n0")] + [row(f"n{i}", f"n{i - 1}", 1, 1) for i in range(1, 32)]
    star32 = [row(f"r{i}", None, 10000, 10000) for i in range(32)]
    agg("chain-32-depth-32", chain32, "ok")
    agg("roots-32-fanout-32-max-tokens", star32, "ok")
    agg("rows-33", chain32 + [row("extra")], "error")
    agg("three-roots-share-virtual-parent", [row("a"), row("b"), row("c")], "ok")
    agg("root-fanout-vs-child-fanout", [row("a"), row("b", "a"), row("c", "a"), row("d", "a"), row("e")], "ok")
    agg("wide-second-level", [row("a"), row("b"), row("c", "a"), row("d", "b"), row("e", "b"), row("f", "b")],
        "ok")
    # ids
    for label, ident, expect in [("len1", "a", "ok"), ("len32", "a" * 32, "ok"), ("len33", "a" * 33, "error"),
                                 ("trailing-hyphen", "a-", "ok"), ("digits-hyphens", "a1-b2--c", "ok"),
                                 ("uppercase", "A", "error"), ("mixed-case", "aB", "error"),
                                 ("underscore", "a_b", "error"), ("leading-digit", "1a", "error"),
                                 ("leading-hyphen", "-a", "error"), ("e-acute", "é", "error"),
                                 ("empty", "", "error"), ("space", "a b", "error"),
                                 ("trailing-newline", "a\n", "error"), ("kelvin-sign", "\u212a", "error"),
                                 ("int", 5, "error"), ("null", None, "error")]:
        agg(f"id-{label}", [row(ident)], expect)
    agg("duplicate-id", [row("a"), row("a")], "error")
    agg("duplicate-id-child", [row("a"), row("b", "a"), row("b", "a")], "error")
    agg("parent-later", [row("b", "a"), row("a")], "error")
    agg("parent-unknown", [row("a"), row("b", "x")], "error")
    agg("parent-self", [row("a", "a")], "error")
    for label, parent in [("empty", ""), ("int", 5), ("uppercase", "A"), ("bool", False), ("array", ["a"])]:
        agg(f"parent-{label}", [row("a"), row("b", parent)], "error")
    for key in ("tokens", "output"):
        for label, value, expect in [("0", 0, "ok"), ("10000", 10000, "ok"), ("10001", 10001, "error"),
                                     ("minus-1", -1, "error"), ("float-1.0", 1.0, "error"),
                                     ("true", True, "error"), ("false", False, "error"), ("null", None, "error"),
                                     ("string", "1", "error"), ("raw-minus-0", Raw("-0"), "ok"),
                                     ("raw-1e2", Raw("1e2"), "error"), ("huge", 99999999999999999999, "error")]:
            agg(f"{key}-{label}", [{**row("a"), key: value}], expect)
    agg("missing-key", [{"id": "a", "parent": None, "tokens": 0}], "error")
    agg("extra-key", [{**row("a"), "depth": 1}], "error")
    agg("missing-parent-key", [{"id": "a", "tokens": 0, "output": 0}], "error")
    for label, value in [("row-null", [None]), ("row-array", [["a", None, 0, 0]]), ("plan-object", {"a": row("a")}),
                         ("plan-null", None), ("plan-string", "a")]:
        agg(label, value, "error")
    agg("keys-in-other-order", [{"output": 1, "tokens": 2, "parent": None, "id": "a"}], "ok")

    # bounded_workflow: each limit at equality vs one over
    plan3 = [row("a", None, 3, 2), row("b", "a", 4, 5), row("c", "b", 1, 1)]       # steps 3, tokens 8, output 8, depth 3
    fan = [row("p"), row("q", "p"), row("r", "p"), row("s", "p")]                     # fanout 3 under p
    for key, plan, eq in [("steps", plan3, 3), ("tokens", plan3, 8), ("output", plan3, 8), ("depth", plan3, 3),
                          ("fanout", fan, 3)]:
        r = bw(f"{key}-at-limit", plan, lim(**{key: eq}), "ok")
        assert r["ok"]["reason"] == "complete", r
        r = bw(f"{key}-one-under", plan, lim(**{key: eq - 1}), "ok")
        assert r["ok"]["reason"] == key, r
    r = bw("fanout-roots-share-virtual-parent", [row("a"), row("b"), row("c")], lim(fanout=2), "ok")
    assert r["ok"]["stopped"] == "c" and r["ok"]["reason"] == "fanout"
    bw("fanout-roots-3-at-limit", [row("a"), row("b"), row("c")], lim(fanout=3), "ok")
    bw("fanout-children-of-different-parents", [row("a"), row("b"), row("c", "a"), row("d", "b")], lim(fanout=2),
       "ok")
    # several limits broken by one step: priority steps, tokens, output, depth, fanout
    # first row (steps 1, tokens 5, output 5, depth 1, fanout 1) and a second row
    # (steps 2, tokens 5, output 5, depth 2, fanout 1 under a)
    one = [row("a", None, 5, 5)]
    two = [row("a"), row("b", "a", 5, 5)]
    for label, plan, over, want in [
        ("row1-all-five", one, {"steps": 0, "tokens": 4, "output": 4, "depth": 0, "fanout": 0}, "steps"),
        ("row1-tokens-output-depth-fanout", one, {"tokens": 4, "output": 4, "depth": 0, "fanout": 0}, "tokens"),
        ("row1-output-depth-fanout", one, {"output": 4, "depth": 0, "fanout": 0}, "output"),
        ("row1-depth-fanout", one, {"depth": 0, "fanout": 0}, "depth"),
        ("row1-fanout", one, {"fanout": 0}, "fanout"),
        ("row1-steps-fanout", one, {"steps": 0, "fanout": 0}, "steps"),
        ("row1-tokens-depth", one, {"tokens": 4, "depth": 0}, "tokens"),
        ("row2-steps-tokens-output-depth", two, {"steps": 1, "tokens": 4, "output": 4, "depth": 1}, "steps"),
        ("row2-tokens-output-depth", two, {"tokens": 4, "output": 4, "depth": 1}, "tokens"),
        ("row2-output-depth", two, {"output": 4, "depth": 1}, "output"),
        ("row2-steps-depth", two, {"steps": 1, "depth": 1}, "steps"),
    ]:
        r = bw(f"priority-{label}", plan, lim(**over), "ok")
        assert r["ok"]["reason"] == want and r["ok"]["stopped"] == plan[-1]["id"], (label, r)
    bw("priority-first-row-fanout-0-depth-0", [row("a")], lim(depth=0, fanout=0), "ok")
    bw("priority-first-row-output-and-depth", [row("a", None, 0, 1)], lim(output=0, depth=0), "ok")
    # zero limits
    zero = {"steps": 0, "tokens": 0, "output": 0, "depth": 0, "fanout": 0}
    bw("empty-plan-zero-limits", [], zero, "ok")
    bw("empty-plan-max-limits", [], BIG, "ok")
    bw("free-row-zero-limits", [row("a")], zero, "ok")
    bw("free-row-zero-except-steps", [row("a")], {**zero, "steps": 1}, "ok")
    bw("free-row-depth-fanout-1", [row("a")], {**zero, "steps": 1, "depth": 1, "fanout": 1}, "ok")
    bw("free-rows-only-steps-limit", [row("a"), row("b"), row("c")], lim(steps=2, tokens=0, output=0), "ok")
    # maxima
    bw("tokens-320000-exact", star32, lim(), "ok")
    bw("tokens-319999-stops-last", star32, lim(tokens=319999), "ok")
    bw("chain-32-depth-32", chain32, lim(), "ok")
    bw("chain-32-depth-31", chain32, lim(depth=31), "ok")
    for key in ("steps", "depth", "fanout"):
        bw(f"limit-{key}-32-ok", SPEC_PLAN, lim(**{key: 32}), "ok")
        bw(f"limit-{key}-33-invalid", SPEC_PLAN, lim(**{key: 33}), "error")
    for key in ("tokens", "output"):
        bw(f"limit-{key}-320000-ok", SPEC_PLAN, lim(**{key: 320000}), "ok")
        bw(f"limit-{key}-320001-invalid", SPEC_PLAN, lim(**{key: 320001}), "error")
    for key in ("steps", "tokens", "output", "depth", "fanout"):
        for label, value, expect in [("minus-1", -1, "error"), ("true", True, "error"), ("false", False, "error"),
                                     ("float", 4.0, "error"), ("null", None, "error"), ("string", "4", "error"),
                                     ("raw-minus-0", Raw("-0"), "ok"), ("raw-1e1", Raw("1e1"), "error")]:
            bw(f"limit-{key}-{label}", SPEC_PLAN, lim(**{key: value}), expect)
        bw(f"limits-missing-{key}", SPEC_PLAN, {k: v for k, v in BIG.items() if k != key}, "error")
    bw("limits-extra-key", SPEC_PLAN, {**BIG, "time": 1}, "error")
    bw("limits-depth-spelled-max-depth", SPEC_PLAN,
       {"steps": 32, "tokens": 1, "output": 1, "max_depth": 32, "fanout": 32}, "error")
    for label, value in [("null", None), ("array", [4, 4, 10, 4, 4]), ("empty-object", {})]:
        bw(f"limits-{label}", SPEC_PLAN, value, "error")
    bw("limits-empty-plan-bad-limits", [], {**zero, "steps": -1}, "error")
    # whole-plan validation after an early stop
    for label, bad_row in [("bool-tokens", {**row("x"), "tokens": True}), ("duplicate-id", row("a")),
                           ("future-parent", row("x", "y")), ("uppercase-id", row("X")),
                           ("extra-key", {**row("x"), "note": ""}), ("float-output", {**row("x"), "output": 1.0})]:
        bw(f"invalid-row-after-stop-{label}", [row("a"), row("b", "a", 9, 0), bad_row], lim(tokens=1), "error")
        bw(f"invalid-row-after-steps-0-{label}", [row("a"), bad_row], {**zero}, "error")
    bw("rows-33-even-with-steps-0", chain32 + [row("extra")], zero, "error")
    bw("usage-covers-prefix-only", LESSON_PLAN, lim(output=3), "ok")
    bw("stop-at-first-row", LESSON_PLAN, lim(tokens=1), "ok")
    bw("stop-at-last-row", LESSON_PLAN, lim(depth=2), "ok")

    # deterministic sweep
    rng = random.Random(20261030)
    for k in range(60):
        n = rng.randint(0, 10)
        plan = []
        for i in range(n):
            parent = None if i == 0 or rng.random() < 0.3 else plan[rng.randrange(i)]["id"]
            plan.append(row(f"s{i}", parent, rng.randint(0, 6), rng.randint(0, 6)))
        limits = {"steps": rng.randint(0, 10), "tokens": rng.randint(0, 30), "output": rng.randint(0, 30),
                  "depth": rng.randint(0, 5), "fanout": rng.randint(0, 4)}
        if k % 3 == 0:
            agg(f"sweep-{k:02d}", plan, "ok")
        bw(f"sweep-{k:02d}", plan, limits, "ok")


def cases_run_sweep(c: Corpus):
    """Deterministic sweep of scripts drawn from a small pool of proposals."""
    rng = random.Random(4096)
    pool = [lambda i: tool(f"c{i}"), lambda i: tool(f"c{i}", "echo", {"x": i, "y": 0.5}),
            lambda i: tool(f"c{i}", "fail", {}), lambda i: tool(f"c{i}", "nope", {}),
            lambda i: tool("c0"), lambda i: tool(f"c{i}", "repeat", {"s": "é", "n": 2047 + i % 2}),
            lambda i: tool(f"c{i}", "nested", {}), lambda i: final(f"answer {i}"), lambda i: final(" "),
            lambda i: {"kind": "tool"}]
    weights = [4, 3, 2, 2, 2, 2, 1, 1, 1, 1]
    for k in range(50):
        n = rng.randint(0, 12)
        script = [rng.choices(pool, weights)[0](i) for i in range(n)]
        budgets = {}
        if rng.random() < 0.8:
            budgets["max_decisions"] = rng.randint(1, 12)
        if rng.random() < 0.8:
            budgets["max_tool_calls"] = rng.randint(0, 6)
        c.add("run.jsonl", f"run-sweep-{k:02d}", "run_bounded_agent",
              {"script": script, "tools": STD_TOOLS, **budgets}, "ok")


# --------------------------------------------------------------------------

def build(seeds_dir: Path):
    refs, provenance = load_references(seeds_dir)
    corpus = Corpus(Harness(refs))
    cases_validate(corpus)
    cases_run(corpus)
    cases_run_sweep(corpus)
    cases_trace_work(corpus)
    cases_plans(corpus)
    cases_overflow(corpus)
    outputs = {name: "\n".join(lines) + "\n" for name, lines in corpus.files.items()}
    manifest = {
        "generator": "tests/vectors/generate.py",
        "python": sys.version.split()[0],
        "unicode": __import__("unicodedata").unidata_version,
        "seeds": provenance,
        "files": {name: len(lines) for name, lines in corpus.files.items()},
        "functions": dict(sorted(corpus.fn_counts.items())),
        "total": sum(len(lines) for lines in corpus.files.values()),
    }
    outputs["manifest.json"] = json.dumps(manifest, ensure_ascii=False, indent=2) + "\n"
    return outputs, manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=Path,
                        default=Path(os.environ.get("BUDGETGATE_SEEDS", DEFAULT_SEEDS)),
                        help="directory holding the seed documents (default ../shared/seeds; env BUDGETGATE_SEEDS)")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: this directory)")
    parser.add_argument("--check", action="store_true", help="fail if the files on disk differ")
    options = parser.parse_args()
    outputs, manifest = build(options.seeds)
    if options.check:
        def comparable(name, text):
            if name != "manifest.json":
                return text
            data = json.loads(text)
            data.pop("python", None)          # the interpreter may differ; the vectors may not
            data.pop("unicode", None)
            return data

        stale = [n for n, text in outputs.items()
                 if not (options.out / n).exists()
                 or comparable(n, (options.out / n).read_text(encoding="utf-8")) != comparable(n, text)]
        if stale:
            sys.exit(f"stale vector files: {', '.join(stale)} (run python3 tests/vectors/generate.py)")
        print("vectors up to date")
        return
    options.out.mkdir(parents=True, exist_ok=True)
    for name, text in outputs.items():
        (options.out / name).write_text(text, encoding="utf-8", newline="\n")
    for name, count in manifest["files"].items():
        print(f"{name}: {count}")
    for fn, count in manifest["functions"].items():
        print(f"  {fn}: {count}")
    print(f"total: {manifest['total']}")


if __name__ == "__main__":
    main()
