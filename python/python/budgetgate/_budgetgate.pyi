"""Type stubs of the native module (python/src/lib.rs)."""

from os import PathLike
from types import TracebackType
from typing import Any, Callable, Literal, Mapping

class Error(Exception):
    """Every budgetgate error; the call it was about is not let through."""

class BudgetError(Error):
    """The budget file cannot be read or applied."""

class LedgerError(Error):
    """The ledger cannot be opened, reached or read (fail closed)."""

class InputError(Error):
    """An argument cannot be decided on; nothing changed in the ledger."""

class CallError(Error):
    """An after_* call for a call that is not pending."""

class ClosedError(Error):
    """The Gate was closed."""

class Decision:
    """The answer before a model or tool call."""

    @property
    def allowed(self) -> bool: ...
    @property
    def reason(self) -> str | None:
        """The contract's refusal word (``tool-budget``, ``steps``, ...)."""
    @property
    def message(self) -> str | None:
        """What the model should read."""
    @property
    def limit(self) -> str | None:
        """The limit's key (``tool_calls``, ``max_calls.TOOL``, ...)."""
    @property
    def used(self) -> int | None: ...
    @property
    def max(self) -> int | None: ...
    @property
    def retry_after(self) -> float | None:
        """Seconds until a rate window reopens."""
    @property
    def ends_session(self) -> bool:
        """The session's budget is spent: the agent should stop."""
    def __bool__(self) -> bool: ...

class Gate:
    """A session's gate over one budget file and one ledger."""

    def __init__(
        self,
        budget: str | PathLike[str],
        ledger: str,
        session: str,
        *,
        durability: Literal["full", "normal"] = "full",
        wait: float = 5.0,
        reservation_ttl: float = 600.0,
        approver: Callable[[str, Any, str], bool] | None = None,
    ) -> None:
        """``approver(tool, arguments, call_id) -> bool`` is asked about each
        call of a ``needs_approval`` tool, the call held reserved meanwhile;
        without one such calls are refused (``approval-refused``)."""
        ...
    @property
    def session(self) -> str: ...
    @property
    def reserves_tokens(self) -> bool:
        """The budget reserves each model call's worst case (``token_mode =
        "reserve"``): only then is ``input_tokens`` needed."""
        ...
    def before_model_call(
        self, *, model: str, max_tokens: int | None = None, input_tokens: int | None = None
    ) -> Decision: ...
    def after_model_call(
        self, *, model: str, usage: Mapping[str, int | None] | None = None, ok: bool = True
    ) -> None: ...
    def before_tool(self, name: str, arguments: Any, call_id: str) -> Decision: ...
    def after_tool(self, call_id: str, *, ok: bool = True, output: Any = None) -> None: ...
    def cancel_tool(self, call_id: str) -> None: ...
    def usage(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Gate: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

def input_bound(body: str | bytes) -> int: ...
