"""budgetgate.pydantic_ai against pydantic-ai itself, driven by its
FunctionModel and TestModel (no network)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from budgetgate import Gate  # noqa: E402
from budgetgate.pydantic_ai import BudgetCapability, BudgetExceeded  # noqa: E402

FOREVER = "max_seconds = 100000\n"


def make_agent(model, gate: Gate, ran: list) -> Agent:
    agent = Agent(model, capabilities=[BudgetCapability(gate)])

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        return f"results for {q}"

    return agent


def test_a_refused_tool_call_is_a_retry_the_model_reads(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}[tools]\nmax_calls = {{ search = 1 }}\n")
    seen_retry: list[str] = []

    def model(messages, info: AgentInfo) -> ModelResponse:
        # pydantic-ai hands a ModelRetry back to the model as the call's
        # return part with the outcome "retried".
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart) and last.outcome == "retried":
            seen_retry.append(last.model_response_str())
            return ModelResponse(parts=[TextPart("stopping: budget")], usage=RequestUsage(input_tokens=5, output_tokens=3))
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        return ModelResponse(
            parts=[ToolCallPart("search", {"q": f"q{step}"}, tool_call_id=f"call-{step}")],
            usage=RequestUsage(input_tokens=10, output_tokens=2),
        )

    ran: list[str] = []
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        result = make_agent(FunctionModel(model), gate, ran).run_sync("find things")
        assert result.output == "stopping: budget"
        assert ran == ["q0"], "the second search was refused before it ran"
        assert len(seen_retry) == 1 and "(tool-cap)" in seen_retry[0], seen_retry
        use = gate.usage()
        assert use["caps"]["search"] == {"used": 1, "max": 1}
        assert use["limits"]["tool_calls"]["used"] == 1
        # Three model requests, each counted with its usage.
        assert use["limits"]["model_calls"]["used"] == 3
        assert use["limits"]["tokens"]["used"] == 12 + 12 + 8


def test_a_spent_budget_refuses_the_model_request(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 2\n")
    calls = []

    def model(messages, info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        step = len(calls)
        return ModelResponse(parts=[ToolCallPart("search", {"q": f"q{step}"}, tool_call_id=f"c{step}")])

    ran: list[str] = []
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        with pytest.raises(BudgetExceeded) as e:
            make_agent(FunctionModel(model), gate, ran).run_sync("loop forever")
        assert len(calls) == 2, "the third request never reached the model"
        d = e.value.decision
        assert (d.reason, d.limit, d.used, d.max) == ("steps", "model_calls", 2, 2)
        assert gate.usage()["limits"]["model_calls"] == {"used": 2, "reserved": 0, "max": 2}


def test_reserve_mode_reserves_the_requests_worst_case(budget, sqlite_ledger):
    # The input bound alone (4096 + the messages' bytes) passes 5000 tokens
    # with max_tokens 1000: refused before the model is called.
    b = budget(f'[budget]\n{FOREVER}max_tokens = 5000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        agent = Agent(TestModel(), capabilities=[BudgetCapability(gate, max_tokens=1000)])
        with pytest.raises(BudgetExceeded) as e:
            agent.run_sync("x" * 10)
        assert e.value.decision.reason == "token-reserve"
        assert gate.usage()["limits"]["model_calls"]["used"] == 0
        agent = Agent(TestModel(), capabilities=[BudgetCapability(gate, max_tokens=100)])
        assert agent.run_sync("hi").output
        lim = gate.usage()["limits"]
        assert lim["model_calls"]["used"] == 1 and lim["tokens"]["reserved"] == 0


def test_a_failed_model_request_is_given_back(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 1\n")

    def broken(messages, info):
        raise RuntimeError("provider down")

    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        with pytest.raises(RuntimeError, match="provider down"):
            Agent(FunctionModel(broken), capabilities=[BudgetCapability(gate)]).run_sync("hi")
        assert gate.usage()["limits"]["model_calls"] == {"used": 0, "reserved": 0, "max": 1}
        assert Agent(TestModel(), capabilities=[BudgetCapability(gate)]).run_sync("hi").output
