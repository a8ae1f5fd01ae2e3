"""What the adapters share: no framework is imported here."""

from __future__ import annotations

import uuid
from typing import Any

from budgetgate._budgetgate import Decision, Error


class BudgetExceeded(Error):
    """A model call was refused: the budget is spent (``decision`` says
    which limit, ``decision.message`` says it in words). Raised by an
    adapter to end the agent's run where the framework has no softer way."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or f"budgetgate refused the call ({decision.reason})")
        self.decision = decision


def call_id_or_new(call_id: Any) -> str:
    """The framework's call id, or a new unique one when it has none."""
    if isinstance(call_id, str) and call_id:
        return call_id
    return f"budgetgate-{uuid.uuid4().hex}"


def anthropic_usage(
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read: int | None = 0,
    cache_write: int | None = 0,
    *,
    input_includes_cache: bool = True,
) -> dict[str, int]:
    """The four counts budgetgate reads (Anthropic's shape: input without
    the cache), from a framework's usage whose input tokens include the
    cache reads and writes (OpenAI's, pydantic-ai's, LangChain's)."""
    cache_read = cache_read or 0
    cache_write = cache_write or 0
    inp = input_tokens or 0
    if input_includes_cache:
        inp = max(inp - cache_read - cache_write, 0)
    return {
        "input_tokens": inp,
        "output_tokens": output_tokens or 0,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
