#!/usr/bin/env bash
# Installs what the end-to-end tests of the MCP gateway
# (host/tests/mcp_gateway.rs, host/tests/mcp_http.rs) and of Claude Code
# (host/tests/claude_code.rs) run: the reference MCP servers and the Claude
# Code CLI from the npm registry, pinned in package.json / package-lock.json,
# into tests/mcp/node_modules, and the official Python MCP client, pinned in
# requirements.txt, into the venv tests/mcp/.venv, and the 2.x SDK of the
# 2026-07-28 protocol (client and MCPServer, host/tests/mcp_2026.rs), pinned
# in requirements-2026.txt, into a venv of its own, tests/mcp/.venv2026 (the
# two majors cannot share one). Idempotent: does nothing when all are
# installed from the current pins (a stamp holds their checksum). Needs node (>= 18), npm and python3 (>= 3.10) with venv (the
# CLI's package asks for node >= 22, but runs as a native binary: only its
# install script runs on node, and does on 20).
set -euo pipefail
cd "$(dirname "$0")"

stamp() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

want=$(stamp package-lock.json)
if [ "$(cat node_modules/.budgetgate-stamp 2>/dev/null)" != "$want" ]; then
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  # No package's install script runs but this one, read for what it does:
  # the CLI's postinstall copies its native binary, from the platform's
  # package npm just installed (no download), over the placeholder
  # bin/claude.exe, which otherwise only says it is not installed.
  node node_modules/@anthropic-ai/claude-code/install.cjs
  echo "$want" > node_modules/.budgetgate-stamp
fi

want=$(stamp requirements.txt)
if [ "$(cat .venv/.budgetgate-stamp 2>/dev/null)" != "$want" ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > .venv/.budgetgate-stamp
fi
want=$(stamp requirements-2026.txt)
if [ "$(cat .venv2026/.budgetgate-stamp 2>/dev/null)" != "$want" ]; then
  python3 -m venv .venv2026
  .venv2026/bin/pip install --quiet --disable-pip-version-check -r requirements-2026.txt
  echo "$want" > .venv2026/.budgetgate-stamp
fi
echo "tests/mcp: servers and clients installed"
