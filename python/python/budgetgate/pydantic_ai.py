"""budgetgate for pydantic-ai: a capability (``Agent(capabilities=[...])``).

    from pydantic_ai import Agent
    from budgetgate import Gate
    from budgetgate.pydantic_ai import BudgetCapability

    gate = Gate(budget="budget.toml", ledger="sqlite:ledger.db", session="run-1")
    agent = Agent("anthropic:claude-sonnet-4-5", capabilities=[BudgetCapability(gate)])

Before each model request the gate decides (in reserve mode its worst case,
the request's serialized messages as the input bound plus ``max_tokens``, is
reserved); a refused request ends the run with :class:`BudgetExceeded`, a
``UsageLimitExceeded``. Its usage is counted after; a request that raised
is given back. Before each tool call the gate decides; a refused call is
not run and the model reads the refusal as a retry prompt (``ModelRetry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, UsageLimitExceeded
from pydantic_ai.messages import ModelMessagesTypeAdapter

from budgetgate._budgetgate import Decision, Gate, input_bound
from budgetgate._common import anthropic_usage, call_id_or_new

__all__ = ["BudgetCapability", "BudgetExceeded"]


class BudgetExceeded(UsageLimitExceeded):
    """A model request refused by budgetgate: ``decision`` says why."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or f"budgetgate refused the model request ({decision.reason})")
        self.decision = decision


@dataclass
class BudgetCapability(AbstractCapability[Any]):
    """Gates every model request and tool call of an agent through ``gate``.

    ``max_tokens``: the output bound reserved when the request's settings
    give none (else the budget file's ``reserve_max_tokens`` applies).
    """

    gate: Gate
    max_tokens: int | None = None

    async def wrap_model_request(self, ctx, *, request_context, handler):
        model = request_context.model.model_name
        settings = request_context.model_settings or {}
        max_tokens = settings.get("max_tokens", self.max_tokens)
        bound = None
        if self.gate.reserves_tokens:
            # Serialised only when reserving: it grows with the history.
            bound = input_bound(ModelMessagesTypeAdapter.dump_json(request_context.messages))
        d = self.gate.before_model_call(model=model, max_tokens=max_tokens, input_tokens=bound)
        if not d.allowed:
            raise BudgetExceeded(d)
        try:
            response = await handler(request_context)
        except Exception:
            # The request failed (the provider's error): not billed.
            self.gate.after_model_call(model=model, ok=False)
            raise
        except BaseException:
            # Cancelled mid-call: it may have been billed; its reservation counts.
            self.gate.after_model_call(model=model)
            raise
        u = response.usage
        self.gate.after_model_call(
            model=model,
            usage=anthropic_usage(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens),
        )
        return response

    async def wrap_tool_execute(self, ctx, *, call, tool_def, args, handler):
        call_id = call_id_or_new(call.tool_call_id)
        d = self.gate.before_tool(call.tool_name, args if isinstance(args, dict) else call.args_as_dict(), call_id)
        if not d.allowed:
            # Not run: the model reads why, as a retry prompt.
            raise ModelRetry(d.message or f"budgetgate refused this call ({d.reason})")
        try:
            result = await handler(args)
        except BaseException as e:
            self.gate.after_tool(call_id, ok=False, output=str(e))
            raise
        self.gate.after_tool(call_id, ok=True, output=result)
        return result
