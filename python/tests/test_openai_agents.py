"""budgetgate.openai_agents against the OpenAI Agents SDK itself, driven by
its ScriptedModel (no network)."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.usage import Usage  # noqa: E402

from budgetgate import Gate  # noqa: E402
from budgetgate.openai_agents import BudgetExceeded, BudgetHooks, gate_tools  # noqa: E402

FOREVER = "max_seconds = 100000\n"


def usage(i: int, o: int) -> Usage:
    return Usage(requests=1, input_tokens=i, output_tokens=o, total_tokens=i + o)


def make(gate: Gate, steps, ran: list):
    @function_tool
    def search(q: str) -> str:
        """Search."""
        ran.append(q)
        return f"results for {q}"

    model = ScriptedModel(steps)
    agent = Agent(name="a", model=model, tools=gate_tools(gate, [search]))
    return agent, model


def test_a_refused_tool_call_is_answered_with_the_refusal(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}[tools]\nmax_calls = {{ search = 1 }}\n")
    steps = [
        ModelStep(output=[function_call("search", {"q": "a"}, call_id="c1")], usage=usage(10, 2)),
        ModelStep(output=[function_call("search", {"q": "b"}, call_id="c2")], usage=usage(20, 2)),
        ModelStep(output=[assistant_message("done")], usage=usage(30, 1)),
    ]
    ran: list[str] = []
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        agent, model = make(gate, steps, ran)
        result = Runner.run_sync(agent, "go", hooks=BudgetHooks(gate, model="scripted"))
        assert result.final_output == "done"
        assert ran == ["a"], "the second search was refused before it ran"
        # What the model read for the refused call, on its third request.
        third_input = str(model.calls[2].input)
        assert "(tool-cap)" in third_input, third_input
        use = gate.usage()
        assert use["caps"]["search"] == {"used": 1, "max": 1}
        assert use["limits"]["model_calls"]["used"] == 3
        assert use["limits"]["tokens"]["used"] == 12 + 22 + 31


def test_a_spent_budget_ends_the_run_before_the_model_call(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 2\n")
    steps = [ModelStep(output=[function_call("search", {"q": str(i)}, call_id=f"c{i}")]) for i in range(3)]
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        agent, model = make(gate, steps, [])
        with pytest.raises(BudgetExceeded) as e:
            Runner.run_sync(agent, "go", hooks=BudgetHooks(gate, model="scripted"))
        assert len(model.calls) == 2
        d = e.value.decision
        assert (d.reason, d.used, d.max) == ("steps", 2, 2)
        assert gate.usage()["limits"]["model_calls"] == {"used": 2, "reserved": 0, "max": 2}


def test_a_model_call_that_raised_is_given_back(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 1\n")
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        hooks = BudgetHooks(gate, model="scripted")
        agent, _ = make(gate, [ModelStep.raise_error(RuntimeError("provider down"))], [])
        with pytest.raises(RuntimeError, match="provider down"):
            Runner.run_sync(agent, "go", hooks=hooks)
        # Given back at the next model call of the same hooks.
        agent, _ = make(gate, [ModelStep(output=[assistant_message("ok")], usage=usage(1, 1))], [])
        assert Runner.run_sync(agent, "go", hooks=hooks).final_output == "ok"
        assert gate.usage()["limits"]["model_calls"] == {"used": 1, "reserved": 0, "max": 1}


def test_reserve_mode_reserves_the_requests_worst_case(budget, sqlite_ledger):
    # The input bound alone (4096 + the request's bytes) with max_tokens
    # 1000 passes 5000 tokens: refused before the model is called; with
    # max_tokens 100 it fits.
    b = budget(f'[budget]\n{FOREVER}max_tokens = 5000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        assert gate.reserves_tokens
        agent, model = make(gate, [ModelStep(output=[assistant_message("done")], usage=usage(5, 1))], [])
        with pytest.raises(BudgetExceeded) as e:
            Runner.run_sync(agent, "go", hooks=BudgetHooks(gate, model="scripted", max_tokens=1000))
        assert e.value.decision.reason == "token-reserve" and len(model.calls) == 0
        result = Runner.run_sync(agent, "go", hooks=BudgetHooks(gate, model="scripted", max_tokens=100))
        assert result.final_output == "done"
        lim = gate.usage()["limits"]
        assert (lim["model_calls"]["used"], lim["tokens"]["used"], lim["tokens"]["reserved"]) == (1, 6, 0)
