"""A real MCP client (the official Python SDK) in front of `budgetgate mcp
--listen`, over MCP's Streamable HTTP transport.

Used by host/tests/mcp_http.rs: it connects to URL (the gateway's /mcp),
performs the steps of SCENARIO and prints one JSON line per observation,
which the Rust test checks.

    python http_client.py SCENARIO URL [--approve accept|decline|cancel] [--delay S]

--approve declares the elicitation capability and answers each question
with that action (after S seconds with --delay), printing
{"elicitation": MESSAGE} when asked.

SCENARIO is a JSON array of steps: {"list": true} or
{"call": NAME, "arguments": {...}, "progress": true} (progress: ask for
progress notifications, each printed as {"progress": N}). A call answered with a JSON-RPC error
prints {"call": NAME, "error": CODE, "message": TEXT}.
"""

import asyncio
import json
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


def emit(**fields):
    print(json.dumps(fields), flush=True)


async def main(argv):
    scenario = json.loads(argv[0])
    url = argv[1]
    approve = argv[argv.index("--approve") + 1] if "--approve" in argv else None
    delay = float(argv[argv.index("--delay") + 1]) if "--delay" in argv else 0.0

    async def on_elicit(context, params):
        emit(elicitation=params.message)
        if delay:
            await asyncio.sleep(delay)
        return types.ElicitResult(action=approve, content={} if approve == "accept" else None)

    async with streamable_http_client(url) as (read, write, session_id):
        async with ClientSession(
            read, write, elicitation_callback=on_elicit if approve else None
        ) as session:
            init = await session.initialize()
            emit(initialized=init.serverInfo.name, session=session_id())
            for step in scenario:
                if "list" in step:
                    tools = await session.list_tools()
                    emit(tools=[t.name for t in tools.tools])
                    continue
                async def on_progress(progress, total, message):
                    emit(progress=progress)

                try:
                    result = await session.call_tool(
                        step["call"],
                        step.get("arguments", {}),
                        progress_callback=on_progress if step.get("progress") else None,
                    )
                except McpError as e:
                    emit(call=step["call"], error=e.error.code, message=e.error.message)
                    continue
                text = " ".join(c.text for c in result.content if c.type == "text")
                meta = (result.meta or {}).get("budgetgate")
                emit(call=step["call"], is_error=result.isError, text=text, meta=meta)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except BaseExceptionGroup as group:
        # As in client.py: a late notification racing the session's close.
        import anyio

        if not all(isinstance(e, anyio.BrokenResourceError) for e in group.exceptions):
            raise
