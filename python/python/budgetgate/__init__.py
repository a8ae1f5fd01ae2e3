"""budgetgate: budgets for AI agents decided before each model and tool call.

The engine and the ledger are the budgetgate CLI's own, in-process (a
native module built with PyO3): ``budgetgate ledger show SESSION`` shows
what a Python agent used. See docs/PYTHON.md.

    from budgetgate import Gate

    with Gate(budget="budget.toml", ledger="sqlite:ledger.db", session="run-1") as gate:
        d = gate.before_tool("search", {"q": "rust"}, "call-1")
        if d.allowed:
            ...  # run the tool
            gate.after_tool("call-1", ok=True, output="...")
        else:
            print(d.reason, d.message)

Adapters, each importable on its own: ``budgetgate.pydantic_ai``,
``budgetgate.openai_agents``, ``budgetgate.langchain``,
``budgetgate.claude_agent_sdk``.
"""

from budgetgate._budgetgate import (
    BudgetError,
    CallError,
    ClosedError,
    Decision,
    Error,
    Gate,
    InputError,
    LedgerError,
    input_bound,
)

__all__ = [
    "BudgetError",
    "CallError",
    "ClosedError",
    "Decision",
    "Error",
    "Gate",
    "InputError",
    "LedgerError",
    "input_bound",
]
