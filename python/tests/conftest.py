"""Fixtures of the Python tests: a budget file, a SQLite ledger in a temporary
folder, a redis-server of its own on a free loopback port, and the CLI built
from the same tree (for the shared ledger)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def budget(tmp_path):
    """Writes a budget file and returns its path: `budget("[budget]\\n...")`."""

    def write(text: str, name: str = "budget.toml") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


@pytest.fixture
def sqlite_ledger(tmp_path) -> str:
    return f"sqlite:{tmp_path / 'ledger.db'}"


@pytest.fixture
def memory_ledger() -> str:
    return "memory:"


@pytest.fixture(params=["sqlite", "memory"])
def ledger(request) -> str:
    """A ledger one Gate decides over alone: a SQLite file, or the
    in-process ledger (the same decisions are expected of both)."""
    return request.getfixturevalue(f"{request.param}_ledger")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_ledger(redis_server):
    return redis_server[0]


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of this test's own: its ledger URL and its process.
    Skipped without redis-server, unless BUDGETGATE_REQUIRE_REDIS=1 (then
    it fails)."""
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("BUDGETGATE_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not on PATH and BUDGETGATE_REQUIRE_REDIS=1")
        pytest.skip("redis-server is not on PATH")
    port = _free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)


def _cli_path() -> Path:
    explicit = os.environ.get("BUDGETGATE_BIN")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "budgetgate"


@pytest.fixture(scope="session")
def cli():
    """Runs the budgetgate CLI built from this tree (BUDGETGATE_BIN, else
    $CARGO_TARGET_DIR/debug/budgetgate: `cargo build -p budgetgate`)."""
    path = _cli_path()
    if not path.is_file():
        pytest.fail(f"the budgetgate CLI is not built at {path} (cargo build -p budgetgate, or set BUDGETGATE_BIN)")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60)

    return run


def show_json(cli, session: str, ledger: str) -> dict:
    """`budgetgate ledger show SESSION --ledger URL --json`: the session's own ledger."""
    done = cli("ledger", "show", session, "--ledger", ledger, "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    (own,) = [r for r in rows if r["agent"] is None]
    return own
