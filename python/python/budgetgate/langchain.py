"""budgetgate for LangChain / LangGraph agents: a middleware for
``langchain.agents.create_agent``, its own extension point.

    from langchain.agents import create_agent
    from budgetgate import Gate
    from budgetgate.langchain import BudgetMiddleware

    gate = Gate(budget="budget.toml", ledger="sqlite:ledger.db", session="run-1")
    agent = create_agent(model, tools=[search], middleware=[BudgetMiddleware(gate)])

Before each model call the gate decides; refused, the call is not made and
the agent ends with an AI message that says why (``on_spent="end"``, the
default) or raises :class:`BudgetExceeded` (``on_spent="error"``). Its
usage (``usage_metadata``) is counted after; a call that raised is given
back. Before each tool call the gate decides; refused, the tool is not run
and the model reads the refusal as the tool's error result.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage

from budgetgate._budgetgate import Decision, Gate, input_bound
from budgetgate._common import BudgetExceeded, anthropic_usage, call_id_or_new

__all__ = ["BudgetExceeded", "BudgetMiddleware"]


def _model_name(model: Any) -> str:
    for attr in ("model_name", "model", "model_id"):
        name = getattr(model, attr, None)
        if isinstance(name, str) and name:
            return name
    return getattr(model, "_llm_type", type(model).__name__)


def _usage_of(result: Any) -> dict[str, int] | None:
    messages = getattr(result, "result", None) or [result]
    total = None
    for m in messages:
        meta = getattr(m, "usage_metadata", None)
        if not meta:
            continue
        details = meta.get("input_token_details") or {}
        u = anthropic_usage(
            meta.get("input_tokens"),
            meta.get("output_tokens"),
            details.get("cache_read"),
            details.get("cache_creation"),
        )
        total = u if total is None else {k: total[k] + u[k] for k in u}
    return total


class BudgetMiddleware(AgentMiddleware):
    """Gates every model call and tool call of a ``create_agent`` agent."""

    def __init__(
        self,
        gate: Gate,
        *,
        max_tokens: int | None = None,
        on_spent: Literal["end", "error"] = "end",
    ) -> None:
        super().__init__()
        if on_spent not in ("end", "error"):
            raise ValueError('on_spent must be "end" or "error"')
        self.gate = gate
        self.max_tokens = max_tokens
        self.on_spent = on_spent

    # --- model calls ---

    def _before_model(self, request) -> tuple[str, Decision]:
        model = _model_name(request.model)
        max_tokens = (
            (request.model_settings or {}).get("max_tokens")
            or getattr(request.model, "max_tokens", None)
            or self.max_tokens
        )
        bound = None
        if self.gate.reserves_tokens:
            # Serialised only when reserving: it grows with the history.
            system = getattr(request.system_message, "content", None)
            bound = input_bound(json.dumps([system, [m.model_dump() for m in request.messages]], default=str))
        return model, self.gate.before_model_call(model=model, max_tokens=max_tokens, input_tokens=bound)

    def _refused_model(self, d: Decision) -> AIMessage:
        if self.on_spent == "error":
            raise BudgetExceeded(d)
        return AIMessage(content=d.message or f"budgetgate refused the model call ({d.reason})")

    def wrap_model_call(self, request, handler):
        model, d = self._before_model(request)
        if not d.allowed:
            return self._refused_model(d)
        try:
            result = handler(request)
        except Exception:
            self.gate.after_model_call(model=model, ok=False)
            raise
        except BaseException:
            self.gate.after_model_call(model=model)
            raise
        self.gate.after_model_call(model=model, usage=_usage_of(result))
        return result

    async def awrap_model_call(self, request, handler):
        model, d = self._before_model(request)
        if not d.allowed:
            return self._refused_model(d)
        try:
            result = await handler(request)
        except Exception:
            self.gate.after_model_call(model=model, ok=False)
            raise
        except BaseException:
            self.gate.after_model_call(model=model)
            raise
        self.gate.after_model_call(model=model, usage=_usage_of(result))
        return result

    # --- tool calls ---

    def _before_tool(self, request) -> tuple[str, str, ToolMessage | None]:
        call = request.tool_call
        call_id = call_id_or_new(call.get("id"))
        d = self.gate.before_tool(call["name"], call.get("args") or {}, call_id)
        if d.allowed:
            return call_id, call["name"], None
        refusal = ToolMessage(
            content=d.message or f"budgetgate refused this call ({d.reason})",
            tool_call_id=call.get("id") or call_id,
            name=call["name"],
            status="error",
        )
        return call_id, call["name"], refusal

    def _after_tool(self, call_id: str, result: Any) -> None:
        ok = getattr(result, "status", "success") != "error"
        self.gate.after_tool(call_id, ok=ok, output=getattr(result, "content", None))

    def wrap_tool_call(self, request, handler):
        call_id, _, refusal = self._before_tool(request)
        if refusal is not None:
            return refusal
        try:
            result = handler(request)
        except BaseException as e:
            self.gate.after_tool(call_id, ok=False, output=str(e))
            raise
        self._after_tool(call_id, result)
        return result

    async def awrap_tool_call(self, request, handler):
        call_id, _, refusal = self._before_tool(request)
        if refusal is not None:
            return refusal
        try:
            result = await handler(request)
        except BaseException as e:
            self.gate.after_tool(call_id, ok=False, output=str(e))
            raise
        self._after_tool(call_id, result)
        return result
