"""A real MCP client (the official Python SDK) in front of `budgetgate mcp`.

Used by host/tests/mcp_gateway.rs: it starts the gateway command given after
`--` as its MCP server over stdio, performs the steps of SCENARIO and prints
one JSON line per observation, which the Rust test checks.

    python client.py SCENARIO [--approve accept|decline] -- GATEWAY ARGS...

SCENARIO is a JSON array of steps: {"list": true} or
{"call": NAME, "arguments": {...}}.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


def emit(**fields):
    print(json.dumps(fields), flush=True)


async def main(argv):
    split = argv.index("--")
    own, gateway = argv[:split], argv[split + 1:]
    scenario = json.loads(own[0])
    approve = None
    if "--approve" in own:
        approve = own[own.index("--approve") + 1]

    async def on_elicit(context, params):
        emit(elicitation=params.message)
        return types.ElicitResult(action=approve, content={} if approve == "accept" else None)

    params = StdioServerParameters(command=gateway[0], args=gateway[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, elicitation_callback=on_elicit if approve else None
        ) as session:
            init = await session.initialize()
            emit(initialized=init.serverInfo.name)
            for step in scenario:
                if "list" in step:
                    tools = await session.list_tools()
                    emit(tools=[t.name for t in tools.tools])
                else:
                    result = await session.call_tool(step["call"], step.get("arguments", {}))
                    text = " ".join(c.text for c in result.content if c.type == "text")
                    meta = (result.meta or {}).get("budgetgate")
                    emit(call=step["call"], is_error=result.isError, text=text, meta=meta)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except BaseExceptionGroup as group:
        # The SDK's reader can still be delivering a late notification of the
        # server's (tools/list_changed, logging) while the session closes;
        # that race is the client's, after every step was done and printed.
        import anyio

        if not all(isinstance(e, anyio.BrokenResourceError) for e in group.exceptions):
            raise

