"""budgetgate for the OpenAI Agents SDK: run hooks for the model calls and
tool guardrails for the tool calls, its own extension points.

    from agents import Agent, Runner, function_tool
    from budgetgate import Gate
    from budgetgate.openai_agents import BudgetHooks, gate_tools

    gate = Gate(budget="budget.toml", ledger="sqlite:ledger.db", session="run-1")
    agent = Agent(name="a", tools=gate_tools(gate, [search]))
    Runner.run_sync(agent, "...", hooks=BudgetHooks(gate))

``BudgetHooks`` decides before each model call (``on_llm_start``; refused,
the run ends with :class:`BudgetExceeded`) and counts its usage after
(``on_llm_end``). A model call that raised never reaches ``on_llm_end``: it
is given back at the run's next model call (the SDK's own retry), or, if
the run ended there, counted as spent when the gate is closed.
``gate_tools`` adds an input guardrail that decides each function-tool call
(refused: not run, and the model reads why in place of the result) and an
output guardrail that ends it.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from agents import RunHooks
from agents.tool import FunctionTool
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from budgetgate._budgetgate import Gate, input_bound
from budgetgate._common import BudgetExceeded, anthropic_usage, call_id_or_new

__all__ = ["BudgetExceeded", "BudgetHooks", "gate_tools", "tool_guardrails"]


def _model_name(agent: Any, fallback: str | None) -> str:
    if fallback:
        return fallback
    model = getattr(agent, "model", None)
    if isinstance(model, str) and model:
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


class BudgetHooks(RunHooks):
    """Run hooks that gate every model call of a run through ``gate``.

    ``model``: the name the budget prices the calls by, when the agent's
    model is an object rather than a name. ``max_tokens``: the output bound
    reserved when the agent's model settings give none.
    """

    def __init__(self, gate: Gate, *, model: str | None = None, max_tokens: int | None = None) -> None:
        self.gate = gate
        self.model = model
        self.max_tokens = max_tokens
        self._pending: list[str] = []

    async def on_llm_start(self, context, agent, system_prompt, input_items) -> None:
        # A call still pending raised instead of answering: not billed.
        while self._pending:
            self.gate.after_model_call(model=self._pending.pop(0), ok=False)
        model = _model_name(agent, self.model)
        settings = getattr(agent, "model_settings", None)
        max_tokens = getattr(settings, "max_tokens", None) or self.max_tokens
        bound = None
        if self.gate.reserves_tokens:
            # Serialised only when reserving: it grows with the history.
            bound = input_bound(json.dumps([system_prompt, input_items], default=str))
        d = self.gate.before_model_call(model=model, max_tokens=max_tokens, input_tokens=bound)
        if not d.allowed:
            raise BudgetExceeded(d)
        self._pending.append(model)

    async def on_llm_end(self, context, agent, response) -> None:
        if not self._pending:
            return
        model = self._pending.pop(0)
        u = response.usage
        cached = getattr(getattr(u, "input_tokens_details", None), "cached_tokens", 0)
        self.gate.after_model_call(model=model, usage=anthropic_usage(u.input_tokens, u.output_tokens, cached))


def tool_guardrails(gate: Gate) -> tuple[ToolInputGuardrail, ToolOutputGuardrail]:
    """The input guardrail that decides a function-tool call and the output
    guardrail that ends it, for ``function_tool(tool_input_guardrails=[...],
    tool_output_guardrails=[...])``."""

    def budgetgate_before_tool(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        call_id = call_id_or_new(ctx.tool_call_id)
        d = gate.before_tool(ctx.tool_name, ctx.tool_arguments or "{}", call_id)
        if d.allowed:
            return ToolGuardrailFunctionOutput.allow(output_info=d)
        return ToolGuardrailFunctionOutput.reject_content(
            d.message or f"budgetgate refused this call ({d.reason})", output_info=d
        )

    def budgetgate_after_tool(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        gate.after_tool(data.context.tool_call_id, ok=True, output=data.output)
        return ToolGuardrailFunctionOutput.allow()

    return ToolInputGuardrail(budgetgate_before_tool), ToolOutputGuardrail(budgetgate_after_tool)


def gate_tools(gate: Gate, tools: Iterable[Any]) -> list[Any]:
    """``tools`` with budgetgate's guardrails added to each function tool
    (first, so nothing runs before the budget is asked); other tools are
    returned as they are."""
    before, after = tool_guardrails(gate)
    out = []
    for tool in tools:
        if isinstance(tool, FunctionTool):
            tool.tool_input_guardrails = [before, *(tool.tool_input_guardrails or [])]
            tool.tool_output_guardrails = [*(tool.tool_output_guardrails or []), after]
        out.append(tool)
    return out
