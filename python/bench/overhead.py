"""What budgetgate costs a Python agent, measured in one run (issue 34):

* a `before_tool` + `after_tool` pair on the in-process ledger (`memory:`),
  a SQLite ledger with `normal` durability and one with `full`;
* pydantic-ai's own per-step overhead (an agent step: one model request and
  one tool call, with a FunctionModel that answers at once, so the time is
  pydantic-ai's), the same agent with a capability that does nothing (what
  any capability costs there), and with budgetgate's capability on each
  ledger: the difference is what budgetgate adds to a step;
* with `--leak N`: N pairs on one gate, the process's resident memory
  printed every N/10 pairs (a leak grows it steadily; SQLite's state is on
  disk, the in-process ledger's grows by what it must remember: each call
  id and its answer).

Build the extension optimised first (the dev build is many times slower):

    VIRTUAL_ENV=$PWD/python/.venv python/.venv/bin/maturin develop --release \\
        --manifest-path python/Cargo.toml
    python/.venv/bin/python python/bench/overhead.py            # figures
    python/.venv/bin/python python/bench/overhead.py --leak 1000000 --ledger sqlite

Prints one line per figure (`--json`: one JSON object per line, the keys
`what`, `us` (microseconds, the median of `--rounds` rounds) or
`pairs`/`rss_kib` for the leak check). Results are in docs/PYTHON.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import budgetgate
from budgetgate import Gate

BUDGET = """[budget]
max_seconds = 100000000
max_tool_calls = 1000000000
max_model_calls = 1000000000
max_tokens = 1000000000000
max_repeats = 1000000000
"""


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def open_gate(kind: str, folder: str, session: str) -> Gate:
    budget = os.path.join(folder, "budget.toml")
    with open(budget, "w") as f:
        f.write(BUDGET)
    if kind == "memory":
        return Gate(budget=budget, ledger="memory:", session=session)
    durability = "normal" if kind == "sqlite-normal" else "full"
    ledger = "sqlite:" + os.path.join(folder, f"{kind}.db")
    return Gate(budget=budget, ledger=ledger, session=session, durability=durability)


def pairs(gate: Gate, n: int, start: int) -> float:
    """Seconds for n before_tool + after_tool pairs."""
    t = time.perf_counter()
    for i in range(start, start + n):
        cid = f"c{i}"
        if not gate.before_tool("search", {"q": i}, cid).allowed:
            raise SystemExit(f"refused at pair {i}: the benchmark's budget is too small")
        gate.after_tool(cid, ok=True, output="results")
    return time.perf_counter() - t


def pair_cost(kind: str, rounds: int, n: int) -> float:
    with tempfile.TemporaryDirectory() as folder, open_gate(kind, folder, "pairs") as gate:
        pairs(gate, 200, 0)  # warm: the file, the statement cache
        times = [pairs(gate, n, 1000 + r * n) / n for r in range(rounds)]
    return statistics.median(times) * 1e6


def agent_step_cost(kind: str | None, rounds: int, runs: int, steps: int) -> float:
    """Microseconds per agent step (one model request + one tool call),
    with budgetgate's capability on ledger `kind`, or without it (None)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    ids = iter(range(1 << 62))

    def model(messages, info: AgentInfo) -> ModelResponse:
        # Call ids are unique in a session (a reused one is refused).
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        usage = RequestUsage(input_tokens=10, output_tokens=2)
        if step >= steps:
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        return ModelResponse(
            parts=[ToolCallPart("search", {"q": f"q{step}"}, tool_call_id=f"call-{next(ids)}")],
            usage=usage,
        )

    def measure(capabilities) -> float:
        agent = Agent(FunctionModel(model), capabilities=capabilities)

        @agent.tool_plain
        def search(q: str) -> str:
            return f"results for {q}"

        agent.run_sync("warm up")
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(runs):
                agent.run_sync("find things")
            # steps tool steps and one closing request per run.
            times.append((time.perf_counter() - t) / (runs * (steps + 1)))
        return statistics.median(times) * 1e6

    if kind is None:
        return measure([])
    if kind == "pass-through":
        # The same two hooks doing nothing: what any capability costs.
        from dataclasses import dataclass
        from typing import Any

        from pydantic_ai.capabilities import AbstractCapability

        @dataclass
        class PassThrough(AbstractCapability[Any]):
            async def wrap_model_request(self, ctx, *, request_context, handler):
                return await handler(request_context)

            async def wrap_tool_execute(self, ctx, *, call, tool_def, args, handler):
                return await handler(args)

        return measure([PassThrough()])
    from budgetgate.pydantic_ai import BudgetCapability

    with tempfile.TemporaryDirectory() as folder, open_gate(kind, folder, "agent") as gate:
        return measure([BudgetCapability(gate)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per figure; the median is shown (5)")
    ap.add_argument("--pairs", type=int, default=2000, help="pairs per round (2000)")
    ap.add_argument("--runs", type=int, default=40, help="agent runs per round (40)")
    ap.add_argument("--steps", type=int, default=5, help="tool steps per agent run (5)")
    ap.add_argument("--leak", type=int, metavar="N", help="instead: N pairs on one gate, RSS every N/10")
    ap.add_argument("--ledger", choices=["memory", "sqlite-normal", "sqlite-full", "sqlite"],
                    default="sqlite-normal", help="the leak check's ledger (sqlite: sqlite-normal)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args()

    def show(what: str, **figures) -> None:
        if args.json:
            print(json.dumps({"what": what, **figures}), flush=True)
        else:
            shown = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())
            print(f"{what}: {shown}", flush=True)

    if args.leak:
        kind = "sqlite-normal" if args.ledger == "sqlite" else args.ledger
        step = max(args.leak // 10, 1)
        with tempfile.TemporaryDirectory() as folder, open_gate(kind, folder, "leak") as gate:
            pairs(gate, 1000, -1000)
            show(f"leak {kind}", pairs=0, rss_kib=rss_kib())
            done = 0
            while done < args.leak:
                n = min(step, args.leak - done)
                secs = pairs(gate, n, done)
                done += n
                show(f"leak {kind}", pairs=done, rss_kib=rss_kib(), us_per_pair=secs / n * 1e6)
        return

    for kind in ["memory", "sqlite-normal", "sqlite-full"]:
        n = args.pairs if kind != "sqlite-full" else max(args.pairs // 10, 50)
        show(f"pair {kind}", us=pair_cost(kind, args.rounds, n))
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        show("pydantic-ai not installed: agent steps not measured")
        return
    plain = agent_step_cost(None, args.rounds, args.runs, args.steps)
    show("pydantic-ai step, no budgetgate", us=plain)
    passing = agent_step_cost("pass-through", args.rounds, args.runs, args.steps)
    show("pydantic-ai step, a capability that does nothing", us=passing, added_us=passing - plain)
    for kind in ["memory", "sqlite-normal"]:
        with_gate = agent_step_cost(kind, args.rounds, args.runs, args.steps)
        show(f"pydantic-ai step, budgetgate {kind}", us=with_gate, added_us=with_gate - plain)


if __name__ == "__main__":
    main()
