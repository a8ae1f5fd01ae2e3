"""budgetgate for the Claude Agent SDK: its hooks (``ClaudeAgentOptions(hooks=...)``).

    from claude_agent_sdk import ClaudeAgentOptions, query
    from budgetgate import Gate
    from budgetgate.claude_agent_sdk import budget_hooks

    gate = Gate(budget="budget.toml", ledger="sqlite:ledger.db", session="run-1")
    options = ClaudeAgentOptions(hooks=budget_hooks(gate))
    async for message in query(prompt="...", options=options): ...

``PreToolUse`` decides every tool call (refused: denied, and Claude reads
why; a spent session budget also stops the session); ``PostToolUse`` and
``PostToolUseFailure`` end it. A tool the budget lets through is left to
Claude Code's own permission rules and to your ``can_use_tool``: budgetgate
never allows what they would not. The SDK has no hook before a model call:
gate those with ``budgetgate proxy`` (``env={"ANTHROPIC_BASE_URL": ...}``)
on the same ledger and session.
"""

from __future__ import annotations

from typing import Any

from claude_agent_sdk import HookMatcher

from budgetgate._budgetgate import CallError, Gate
from budgetgate._common import call_id_or_new

__all__ = ["budget_hooks"]


def budget_hooks(gate: Gate) -> dict[str, list[HookMatcher]]:
    """The hooks that gate every tool call of a Claude Agent SDK session,
    for ``ClaudeAgentOptions(hooks=...)`` (merge them with your own)."""

    async def before(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        call_id = call_id_or_new(input_data.get("tool_use_id") or tool_use_id)
        d = gate.before_tool(input_data["tool_name"], input_data.get("tool_input") or {}, call_id)
        if d.allowed:
            # No decision: the host's permission rules still apply.
            return {}
        out: dict[str, Any] = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": d.message or f"budgetgate refused this call ({d.reason})",
            }
        }
        if d.ends_session:
            out["continue_"] = False
            out["stopReason"] = d.message or "budgetgate: the session's budget is spent"
        return out

    def ended(ok: bool):
        async def after(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
            call_id = input_data.get("tool_use_id") or tool_use_id
            output = input_data.get("tool_response") if ok else input_data.get("error")
            try:
                gate.after_tool(call_id, ok=ok, output=output)
            except CallError:
                # Not one this gate let through (refused, or decided by another gate).
                pass
            return {}

        return after

    return {
        "PreToolUse": [HookMatcher(hooks=[before])],
        "PostToolUse": [HookMatcher(hooks=[ended(True)])],
        "PostToolUseFailure": [HookMatcher(hooks=[ended(False)])],
    }
