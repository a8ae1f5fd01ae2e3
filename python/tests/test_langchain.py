"""budgetgate.langchain against LangChain's create_agent (LangGraph under
it), driven by langchain-core's fake chat model (no network)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from budgetgate import Gate  # noqa: E402
from budgetgate.langchain import BudgetExceeded, BudgetMiddleware  # noqa: E402

FOREVER = "max_seconds = 100000\n"


class ScriptedChat(FakeMessagesListChatModel):
    """The fake chat model, with tools bound (create_agent binds them) and
    every request it was sent kept."""

    seen: list = []

    def bind_tools(self, tools: Any, **kwargs: Any):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def ai(tool_calls=(), text="", i=10, o=2) -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=[{"name": n, "args": a, "id": cid} for n, a, cid in tool_calls],
        usage_metadata={"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
    )


def agent_with(gate: Gate, responses, ran: list, **kw):
    @tool
    def search(q: str) -> str:
        """Search."""
        ran.append(q)
        return f"results for {q}"

    model = ScriptedChat(responses=responses, seen=[])
    return create_agent(model, tools=[search], middleware=[BudgetMiddleware(gate, **kw)]), model


def test_a_refused_tool_call_is_the_tools_error_result(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}[tools]\nmax_calls = {{ search = 1 }}\n")
    responses = [
        ai([("search", {"q": "a"}, "c1")]),
        ai([("search", {"q": "b"}, "c2")], i=20),
        ai(text="done", i=30, o=1),
    ]
    ran: list[str] = []
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        agent, model = agent_with(gate, responses, ran)
        out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert out["messages"][-1].content == "done"
        assert ran == ["a"]
        refused = [m for m in model.seen[2] if isinstance(m, ToolMessage) and m.tool_call_id == "c2"]
        assert len(refused) == 1 and "(tool-cap)" in refused[0].content and refused[0].status == "error"
        use = gate.usage()
        assert use["caps"]["search"] == {"used": 1, "max": 1}
        assert use["limits"]["model_calls"]["used"] == 3
        assert use["limits"]["tokens"]["used"] == 12 + 22 + 31


def test_a_spent_budget_ends_the_agent_with_the_reason(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 2\n")
    responses = [ai([("search", {"q": str(i)}, f"c{i}")]) for i in range(3)]
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        agent, model = agent_with(gate, responses, [])
        out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert len(model.seen) == 2
        assert "budget is spent" in out["messages"][-1].content
        assert gate.usage()["limits"]["model_calls"] == {"used": 2, "reserved": 0, "max": 2}
        agent, model = agent_with(gate, responses, [], on_spent="error")
        with pytest.raises(BudgetExceeded) as e:
            agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert e.value.decision.reason == "steps" and model.seen == []


@pytest.mark.anyio
async def test_async_and_a_failed_call_given_back(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 1\n")

    class Broken(ScriptedChat):
        def _generate(self, *a, **k):
            raise RuntimeError("provider down")

    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:

        @tool
        def search(q: str) -> str:
            """Search."""
            return q

        agent = create_agent(Broken(responses=[ai()], seen=[]), tools=[search], middleware=[BudgetMiddleware(gate)])
        with pytest.raises(RuntimeError, match="provider down"):
            await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]})
        assert gate.usage()["limits"]["model_calls"] == {"used": 0, "reserved": 0, "max": 1}
        agent, _ = agent_with(gate, [ai(text="ok")], [])
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]})
        assert out["messages"][-1].content == "ok"
        assert gate.usage()["limits"]["model_calls"]["used"] == 1


def test_reserve_mode_reserves_the_requests_worst_case(budget, sqlite_ledger):
    # The input bound alone (4096 + the request's bytes) with max_tokens
    # 1000 passes 5000 tokens: refused before the model is called; with
    # max_tokens 100 it fits.
    b = budget(f'[budget]\n{FOREVER}max_tokens = 5000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        assert gate.reserves_tokens
        agent, model = agent_with(gate, [ai(text="done", i=5, o=1)], [], on_spent="error", max_tokens=1000)
        with pytest.raises(BudgetExceeded) as e:
            agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert e.value.decision.reason == "token-reserve" and model.seen == []
        agent, model = agent_with(gate, [ai(text="done", i=5, o=1)], [], max_tokens=100)
        out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert out["messages"][-1].content == "done"
        lim = gate.usage()["limits"]
        assert (lim["model_calls"]["used"], lim["tokens"]["used"], lim["tokens"]["reserved"]) == (1, 6, 0)
