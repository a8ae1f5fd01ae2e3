"""The Gate over a real ledger: each limit at its boundary (the call at
threshold - 1 passes, the one at the threshold is refused), the refusal's
word and figures, roll back, fail closed, a process that dies mid-call, and
the ledger shared with the CLI."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

import budgetgate
from budgetgate import Gate
from conftest import show_json

FOREVER = "max_seconds = 100000\n"


def tool_ok(gate: Gate, name: str, call_id: str, args=None) -> budgetgate.Decision:
    d = gate.before_tool(name, args if args is not None else {"id": call_id}, call_id)
    if d.allowed:
        gate.after_tool(call_id, ok=True, output="done")
    return d


def model_ok(gate: Gate, tokens: int = 10, model: str = "m") -> budgetgate.Decision:
    d = gate.before_model_call(model=model, max_tokens=100)
    if d.allowed:
        gate.after_model_call(model=model, usage={"input_tokens": 0, "output_tokens": tokens})
    return d


@pytest.mark.parametrize("ledger_kind", ["sqlite", "redis", "memory"])
def test_max_tool_calls_boundary(budget, ledger_kind, request):
    ledger = request.getfixturevalue(f"{ledger_kind}_ledger")
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 3\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        for i in range(2):
            assert tool_ok(gate, "t", f"c{i}").allowed
        # threshold - 1 used: the third passes; the fourth is refused.
        assert tool_ok(gate, "t", "c2").allowed
        d = tool_ok(gate, "t", "c3")
        assert not d.allowed and not d
        assert (d.reason, d.limit, d.used, d.max) == ("tool-budget", "tool_calls", 3, 3)
        assert "tool-budget" in d.message
        u = gate.usage()["limits"]["tool_calls"]
        assert (u["used"], u["reserved"], u["max"]) == (3, 0, 3)


def test_per_tool_cap_boundary(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}[tools]\nmax_calls = {{ search = 2 }}\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert tool_ok(gate, "search", "a").allowed
        assert tool_ok(gate, "search", "b").allowed
        d = tool_ok(gate, "search", "c")
        assert (d.allowed, d.reason, d.limit, d.used, d.max) == (False, "tool-cap", "max_calls.search", 2, 2)
        # Another tool is not capped.
        assert tool_ok(gate, "fetch", "d").allowed
        assert gate.usage()["caps"] == {"search": {"used": 2, "max": 2}}


def test_max_model_calls_boundary(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_model_calls = 2\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert not gate.reserves_tokens
        assert model_ok(gate).allowed
        assert model_ok(gate).allowed
        d = gate.before_model_call(model="m", max_tokens=100)
        assert (d.allowed, d.reason, d.limit, d.used, d.max) == (False, "steps", "model_calls", 2, 2)
        assert d.ends_session
        assert "2 of 2 model calls used" in d.message
        with pytest.raises(budgetgate.CallError):
            gate.after_model_call(model="m", usage={"output_tokens": 1})


@pytest.mark.parametrize("worst, allowed", [(1000, True), (1001, False)])
def test_reserve_mode_tokens_boundary(budget, ledger, worst, allowed):
    b = budget(f'[budget]\n{FOREVER}max_tokens = 1000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert gate.reserves_tokens
        d = gate.before_model_call(model="m", max_tokens=worst - 400, input_tokens=400)
        assert d.allowed == allowed, d
        if allowed:
            u = gate.usage()["limits"]["tokens"]
            assert (u["used"], u["reserved"]) == (0, 1000)
            gate.after_model_call(model="m", usage={"input_tokens": 300, "output_tokens": 200})
            u = gate.usage()["limits"]["tokens"]
            assert (u["used"], u["reserved"]) == (500, 0)
        else:
            assert (d.reason, d.limit, d.used, d.max) == ("token-reserve", "tokens", 0, 1000)
            assert "could use up to 1001 tokens" in d.message
            assert gate.usage()["limits"]["model_calls"]["reserved"] == 0


@pytest.mark.parametrize("spent, allowed", [(999, True), (1000, False)])
def test_cost_boundary(budget, ledger, spent, allowed):
    # 1 USD per million output tokens: one micro-USD a token.
    b = budget(
        f"[budget]\n{FOREVER}max_cost_usd = 0.001\n"
        '[prices."m"]\ninput = 1\noutput = 1\ncache_read = 1\ncache_write = 1\n'
    )
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert model_ok(gate, tokens=spent).allowed
        assert gate.usage()["limits"]["cost_micro_usd"]["used"] == spent
        d = gate.before_model_call(model="m", max_tokens=100)
        assert d.allowed == allowed, d
        if not allowed:
            assert (d.reason, d.limit, d.used, d.max) == ("cost", "cost_micro_usd", 1000, 1000)


def test_unpriced_model_under_a_cost_budget_is_never_free(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_cost_usd = 1\n[prices.\"m\"]\ninput = 1\noutput = 1\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        # Refused at its first call, before it is made: never free.
        d = gate.before_model_call(model="other", max_tokens=10)
        assert (d.allowed, d.reason) == (False, "unpriced-model")
        assert 'model "other" has no price in the budget' in d.message, d.message
        assert '[prices."other"]' in d.message, d.message
        assert gate.usage()["limits"]["model_calls"]["used"] == 0
        # Nothing was counted: a priced model's calls are still made.
        assert model_ok(gate, model="m").allowed


def test_a_failed_model_call_rolls_back(budget, ledger):
    b = budget(f'[budget]\n{FOREVER}max_model_calls = 1\nmax_tokens = 1000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert gate.before_model_call(model="m", max_tokens=900, input_tokens=100).allowed
        lim = gate.usage()["limits"]
        assert (lim["model_calls"]["reserved"], lim["tokens"]["reserved"]) == (1, 1000)
        gate.after_model_call(model="m", ok=False)
        lim = gate.usage()["limits"]
        assert [lim[k][f] for k in ("model_calls", "tokens") for f in ("used", "reserved")] == [0, 0, 0, 0]
        # The one call the budget allows is still there.
        assert model_ok(gate).allowed
        assert not gate.before_model_call(model="m", max_tokens=900).allowed


def test_a_model_call_with_nothing_reported_counts_its_reservation(budget, ledger):
    b = budget(f'[budget]\n{FOREVER}max_tokens = 1000\ntoken_mode = "reserve"\n')
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert gate.before_model_call(model="m", max_tokens=500, input_tokens=100).allowed
        gate.after_model_call(model="m")
        assert gate.usage()["limits"]["tokens"]["used"] == 600


def test_cancel_tool_gives_the_call_back(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 1\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert gate.before_tool("t", {}, "a").allowed
        gate.cancel_tool("a")
        assert tool_ok(gate, "t", "b").allowed
        assert not tool_ok(gate, "t", "c").allowed


def test_repeat_and_duplicate_call_id(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_repeats = 1\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert tool_ok(gate, "t", "a", {"q": 1}).allowed
        d = tool_ok(gate, "t", "b", {"q": 1})
        assert (d.allowed, d.reason) == (False, "repeat")
        d = tool_ok(gate, "t", "a", {"q": 2})
        assert (d.allowed, d.reason) == (False, "duplicate-call-id")


def test_needs_approval_is_refused_without_an_approver(budget, ledger):
    b = budget(f'[budget]\n{FOREVER}[tools]\nneeds_approval = ["pay"]\n')
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        d = gate.before_tool("pay", {"usd": 5}, "a")
        assert (d.allowed, d.reason) == (False, "approval-refused")
        assert "pay needs a person's approval (needs_approval in the budget), and this process has no approver" in d.message
        with pytest.raises(budgetgate.CallError):
            gate.after_tool("a")
        # The attempt counts, as the gateway's refused approvals do.
        assert gate.usage()["limits"]["tool_calls"]["used"] == 1


def test_an_approver_is_asked_with_the_call_held(budget, ledger):
    """A needs_approval call is held reserved while the approver is asked
    (the gate's lock free: the approver may use the gate); True lets it
    through, False refuses it approval-refused, the attempt counted."""
    b = budget(f'[budget]\n{FOREVER}max_tool_calls = 3\n[tools]\nneeds_approval = ["pay"]\n')
    asked = []

    def approver(tool, arguments, call_id):
        lim = gate.usage()["limits"]["tool_calls"]
        asked.append((tool, arguments, call_id, lim["used"], lim["reserved"]))
        return arguments["usd"] < 10

    with Gate(budget=b, ledger=ledger, session="s", approver=approver) as gate:
        assert tool_ok(gate, "search", "s1").allowed  # not asked about
        d = gate.before_tool("pay", {"usd": 5}, "p1")
        assert d.allowed and asked == [("pay", {"usd": 5}, "p1", 1, 1)]
        gate.after_tool("p1", ok=True, output="paid")
        d = gate.before_tool("pay", {"usd": 50}, "p2")
        assert (d.allowed, d.reason) == (False, "approval-refused")
        assert "pay needs a person's approval (needs_approval in the budget), and the approver declined it" in d.message
        with pytest.raises(budgetgate.CallError):
            gate.after_tool("p2")
        lim = gate.usage()["limits"]["tool_calls"]
        assert (lim["used"], lim["reserved"]) == (3, 0)
        # The budget is spent: refused before the approver is asked.
        d = gate.before_tool("pay", {"usd": 1}, "p3")
        assert (d.allowed, d.reason) == (False, "tool-budget") and len(asked) == 2


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_an_approver_that_fails_refuses_the_call(budget, ledger):
    """Fail closed: an approver that raises, or answers anything but a bool
    (an async approver's coroutine is truthy), refuses the call; its error
    is raised, the attempt counted. An approver that is not callable is
    refused at once."""
    b = budget(f'[budget]\n{FOREVER}[tools]\nneeds_approval = ["pay"]\n')

    def broken(tool, arguments, call_id):
        raise RuntimeError("the approval service is down")

    async def not_awaited(tool, arguments, call_id):
        return True

    with Gate(budget=b, ledger=ledger, session="s", approver=broken) as gate:
        with pytest.raises(RuntimeError, match="approval service is down"):
            gate.before_tool("pay", {}, "a")
        with pytest.raises(budgetgate.CallError):
            gate.after_tool("a")
        assert gate.usage()["limits"]["tool_calls"] == {"used": 1, "reserved": 0, "max": None}
    with Gate(budget=b, ledger=ledger, session="t", approver=not_awaited) as gate:
        with pytest.raises(TypeError, match="not True or False"):
            gate.before_tool("pay", {}, "a")
        assert gate.usage()["limits"]["tool_calls"]["used"] == 1
    with Gate(budget=b, ledger=ledger, session="u", approver=lambda *a: "yes") as gate:
        with pytest.raises(TypeError, match="answered str"):
            gate.before_tool("pay", {}, "a")
    with pytest.raises(TypeError, match="approver must be callable"):
        Gate(budget=b, ledger=ledger, session="v", approver=True)


def test_a_bad_budget_file_raises_budget_error(budget, sqlite_ledger, tmp_path):
    with pytest.raises(budgetgate.BudgetError, match="max_stepz"):
        Gate(budget=budget("[budget]\nmax_stepz = 1\n"), ledger=sqlite_ledger, session="s")
    with pytest.raises(budgetgate.BudgetError):
        Gate(budget=str(tmp_path / "missing.toml"), ledger=sqlite_ledger, session="s")
    assert issubclass(budgetgate.BudgetError, budgetgate.Error)


def test_an_unreachable_ledger_raises_ledger_error(budget, tmp_path):
    b = budget(f"[budget]\n{FOREVER}")
    free = socket_free_port()
    # A Redis server is reached at the first decision: refused there.
    gate = Gate(budget=b, ledger=f"redis://127.0.0.1:{free}/0", session="s", wait=0.5)
    with pytest.raises(budgetgate.LedgerError):
        gate.before_tool("t", {}, "a")
    with pytest.raises(budgetgate.LedgerError):
        gate.before_model_call(model="m", max_tokens=10)
    with pytest.raises(budgetgate.LedgerError):
        gate.usage()
    with pytest.raises(budgetgate.LedgerError, match="does not exist"):
        Gate(budget=b, ledger=f"sqlite:{tmp_path / 'no' / 'such' / 'l.db'}", session="s")
    with pytest.raises(budgetgate.LedgerError):
        Gate(budget=b, ledger="ftp://x", session="s")


def test_a_ledger_lost_mid_session_refuses(budget, redis_server):
    """The Redis server goes away between calls: the next decision raises
    LedgerError (fail closed), for a tool call and a model call alike."""
    url, proc = redis_server
    b = budget(f"[budget]\n{FOREVER}")
    gate = Gate(budget=b, ledger=url, session="s", wait=0.5)
    assert tool_ok(gate, "t", "a").allowed
    proc.kill()
    proc.wait(timeout=10)
    with pytest.raises(budgetgate.LedgerError):
        gate.before_tool("t", {}, "b")
    with pytest.raises(budgetgate.LedgerError):
        gate.before_model_call(model="m", max_tokens=10)


def socket_free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_raises_and_changes_nothing(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 5\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        before = gate.usage()
        with pytest.raises(budgetgate.InputError, match="not JSON-serialisable"):
            gate.before_tool("t", {"x": object()}, "a")
        with pytest.raises(budgetgate.InputError, match="not JSON"):
            gate.before_tool("t", "{not json", "a")
        deep = {}
        for _ in range(100_000):
            deep = {"d": deep}
        with pytest.raises(budgetgate.InputError):
            gate.before_tool("t", deep, "a")
        with pytest.raises(TypeError):
            gate.before_tool(17, {}, "a")
        with pytest.raises(budgetgate.InputError):
            gate.after_model_call(model="m", usage={"output_tokens": -1})
        with pytest.raises(budgetgate.CallError):
            gate.after_tool("never")
        after = gate.usage()["limits"]
        # Only the session's wall time moved.
        after.pop("time_ms"), before["limits"].pop("time_ms")
        assert after == before["limits"]
        # A call id used by nothing above: the refused inputs left no trace.
        assert tool_ok(gate, "t", "a").allowed
        # A huge name is the engine's refusal, not a crash.
        d = gate.before_tool("x" * 1_000_000, {}, "b")
        assert (d.allowed, d.reason) == (False, "invalid-name")
    with pytest.raises(budgetgate.ClosedError):
        gate.before_tool("t", {}, "z")
    with pytest.raises(ValueError):
        Gate(budget=b, ledger=ledger, session="s", durability="sometimes")


def test_a_gate_dropped_mid_call_never_gives_budget_back(budget, sqlite_ledger, tmp_path):
    """A process dies with a tool call and a model call let through and not
    ended: their reservations expire and are counted as spent."""
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 2\nmax_model_calls = 2\n")
    child = textwrap.dedent(
        f"""
        import os
        from budgetgate import Gate
        g = Gate(budget={b!r}, ledger={sqlite_ledger!r}, session="s", reservation_ttl=2.0)
        assert g.before_tool("t", {{}}, "crashed").allowed
        assert g.before_model_call(model="m", max_tokens=10).allowed
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=60)
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        lim = gate.usage()["limits"]
        assert (lim["tool_calls"]["used"], lim["tool_calls"]["reserved"]) == (0, 1)
        time.sleep(2.2)
        lim = gate.usage()["limits"]
        assert (lim["tool_calls"]["used"], lim["tool_calls"]["reserved"]) == (1, 0)
        assert (lim["model_calls"]["used"], lim["model_calls"]["reserved"]) == (1, 0)
        assert tool_ok(gate, "t", "second").allowed
        assert not tool_ok(gate, "t", "third").allowed
        assert model_ok(gate).allowed
        assert not gate.before_model_call(model="m", max_tokens=10).allowed


def test_close_counts_what_is_pending(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}")
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        assert gate.before_tool("t", {}, "a").allowed
    with Gate(budget=b, ledger=sqlite_ledger, session="s") as gate:
        lim = gate.usage()["limits"]["tool_calls"]
        assert (lim["used"], lim["reserved"]) == (1, 0)


def test_threads_never_pass_the_budget(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 20\n")
    allowed = []
    with Gate(budget=b, ledger=ledger, session="s") as gate:

        def work(n: int) -> None:
            for i in range(10):
                cid = f"{n}-{i}"
                if tool_ok(gate, "t", cid, {"cid": cid}).allowed:
                    allowed.append(cid)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(allowed) == 20
        assert gate.usage()["limits"]["tool_calls"]["used"] == 20


def test_processes_never_pass_the_budget(budget, sqlite_ledger):
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 10\n")
    child = textwrap.dedent(
        f"""
        import sys
        from budgetgate import Gate
        n = sys.argv[1]
        with Gate(budget={b!r}, ledger={sqlite_ledger!r}, session="s") as g:
            got = 0
            for i in range(8):
                d = g.before_tool("t", {{"i": i, "n": n}}, f"{{n}}-{{i}}")
                if d.allowed:
                    g.after_tool(f"{{n}}-{{i}}")
                    got += 1
            print(got)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", child, str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    got = sum(int(p.communicate(timeout=120)[0]) for p in procs)
    assert got == 10


@pytest.mark.parametrize("ledger_kind", ["sqlite", "redis"])
def test_the_cli_shows_what_python_used(budget, cli, ledger_kind, request):
    ledger = request.getfixturevalue(f"{ledger_kind}_ledger")
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 5\n[tools]\nmax_calls = {{ search = 3 }}\n")
    with Gate(budget=b, ledger=ledger, session="py-session") as gate:
        assert tool_ok(gate, "search", "a").allowed
        assert tool_ok(gate, "search", "b").allowed
        assert model_ok(gate, tokens=42).allowed
        ours = gate.usage()
    shown = show_json(cli, "py-session", ledger)
    for key in ("tool_calls", "model_calls", "tokens"):
        assert shown["limits"][key]["used"] == ours["limits"][key]["used"], key
    assert shown["limits"]["tool_calls"]["used"] == 2
    assert shown["limits"]["model_calls"]["used"] == 1
    assert shown["limits"]["tokens"]["used"] == 42
    assert shown["caps"]["search"]["used"] == 2
    text = cli("ledger", "show", "py-session", "--ledger", ledger)
    assert text.returncode == 0 and "py-session" in text.stdout


def test_input_bound_is_the_proxys():
    assert budgetgate.input_bound(b"") == 4096
    assert budgetgate.input_bound('{"a": 1}') == 4096 + 8
    assert budgetgate.input_bound(b'{"type": "image"}') == 4096 + 17 + 3000


def test_the_interpreter_runs_while_a_decision_waits_on_the_store(budget, redis_server):
    """The Redis server stops answering (SIGSTOP) while a thread decides: the
    other threads go on running Python meanwhile (the binding released the
    interpreter's lock), and the decision ends once the server is back."""
    import faulthandler
    import signal

    # Were the lock held, no Python would run until the server answers, so
    # nothing below could fail the test: a watchdog outside the interpreter
    # ends the process instead.
    faulthandler.dump_traceback_later(30, exit=True)
    url, proc = redis_server
    b = budget(f"[budget]\n{FOREVER}")
    gate = Gate(budget=b, ledger=url, session="s", wait=10.0)
    assert tool_ok(gate, "t", "warm").allowed
    proc.send_signal(signal.SIGSTOP)
    outcome: list = []
    try:
        t = threading.Thread(target=lambda: outcome.append(tool_ok(gate, "t", "waits").allowed))
        t.start()
        spins, deadline = 0, time.monotonic() + 0.5
        while time.monotonic() < deadline:
            spins += 1
        assert not outcome, "the decision cannot have been made with the server stopped"
        assert spins > 10_000, spins
    finally:
        proc.send_signal(signal.SIGCONT)
    t.join(timeout=30)
    faulthandler.cancel_dump_traceback_later()
    assert outcome == [True]


def test_a_decision_reads_as_python(budget, ledger):
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 1\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert repr(tool_ok(gate, "t", "a")) == "Decision(allowed=True)"
        assert repr(tool_ok(gate, "t", "b")) == (
            'Decision(allowed=False, reason="tool-budget", limit="tool_calls", used=1, max=1, retry_after=None)'
        )


def test_loops_refuse_a_call_whose_results_do_not_change(budget, ledger):
    """[loops] (issue 32): after_tool's ok and output are the call's outcome;
    the third call returning the same as the two before is refused
    no-progress, a changed output starts the count again, and the window is
    in the ledger (a second Gate on it refuses at once)."""
    b = budget(f"[budget]\n{FOREVER}max_repeats = 100\n[loops]\nsame_outcome = 3\nsame_error = 2\n")

    def call(gate, call_id, args, output, ok=True):
        d = gate.before_tool("status", args, call_id)
        if d.allowed:
            gate.after_tool(call_id, ok=ok, output=output)
        return d

    with Gate(budget=b, ledger=ledger, session="s") as gate:
        assert call(gate, "a", {"job": 1}, {"state": "pending"}).allowed
        assert call(gate, "b", {"job": 1}, {"state": "pending"}).allowed
        d = call(gate, "c", {"job": 1}, {"state": "pending"})
        assert (d.allowed, d.reason) == (False, "no-progress")
        assert "status has been called 2 times with this input" in d.message
        # Changed output: counted again from there.
        assert call(gate, "d", {"job": 2}, "10%").allowed
        assert call(gate, "e", {"job": 2}, "35%").allowed
        assert call(gate, "f", {"job": 2}, "35%").allowed
        # An error once, then the same call: same_error 2.
        assert call(gate, "g", {"job": 3}, "boom", ok=False).allowed
        d = gate.before_tool("status", {"job": 3}, "h")
        assert (d.allowed, d.reason) == (False, "no-progress")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        # Job 1 is free again (job 2's new outputs were news), job 3 not;
        # a second Gate on `memory:` starts a ledger of its own.
        d = gate.before_tool("status", {"job": 3}, "i")
        if ledger != "memory:":
            assert (d.allowed, d.reason) == (False, "no-progress")
        assert gate.before_tool("status", {"job": 1}, "j").allowed
    # Without [loops] nothing is kept and nothing refused.
    plain = budget(f"[budget]\n{FOREVER}max_repeats = 100\n", name="plain.toml")
    with Gate(budget=plain, ledger=ledger, session="t") as gate:
        for i in range(4):
            assert call(gate, f"p{i}", {"job": 1}, "same").allowed


def test_loops_without_an_output_report_nothing_and_a_cancelled_call_is_forgotten(budget, ledger):
    """after_tool without output says nothing of the result (no pattern is
    assumed over it); a cancelled call did not run and leaves no step that
    would hide a loop around it."""
    b = budget(f"[budget]\n{FOREVER}max_repeats = 100\n[loops]\nsame_outcome = 3\n")
    with Gate(budget=b, ledger=ledger, session="s") as gate:
        for i in range(4):
            assert gate.before_tool("poll", {"q": 1}, f"a{i}").allowed
            gate.after_tool(f"a{i}")
        # Two the same, a call that never ran between, then refused.
        for i in range(2):
            assert gate.before_tool("read", {"f": 1}, f"b{i}").allowed
            gate.after_tool(f"b{i}", output="same")
        assert gate.before_tool("edit", {"n": 1}, "c").allowed
        gate.cancel_tool("c")
        d = gate.before_tool("read", {"f": 1}, "b2")
        assert (d.allowed, d.reason) == (False, "no-progress")


def test_the_in_process_ledger_is_one_gates_own(budget, memory_ledger, cli, tmp_path):
    """`memory:` is the Gate's own ledger: its model and tool gates share
    it; another Gate (even of the same session) starts its own; a command
    line refuses it, naming it and what to use instead."""
    b = budget(f"[budget]\n{FOREVER}max_tool_calls = 1\nmax_model_calls = 1\n")
    with Gate(budget=b, ledger=memory_ledger, session="s") as first:
        assert tool_ok(first, "t", "a").allowed
        assert model_ok(first).allowed
        lim = first.usage()["limits"]
        assert (lim["tool_calls"]["used"], lim["model_calls"]["used"]) == (1, 1)
        assert not tool_ok(first, "t", "b").allowed
        with Gate(budget=b, ledger=memory_ledger, session="s") as second:
            assert tool_ok(second, "t", "a").allowed
    with pytest.raises(budgetgate.LedgerError, match="in-process ledger"):
        Gate(budget=b, ledger="memory:shared", session="s")
    done = cli("ledger", "show", "s", "--ledger", "memory:")
    assert done.returncode != 0
    assert "--ledger memory:" in done.stderr and "sqlite:FILE" in done.stderr, done.stderr
    assert not (tmp_path / "memory:").exists()
