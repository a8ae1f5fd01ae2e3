"""The official Python SDK 2.x client (`mcp` 2.3.0) in front of `budgetgate mcp`,
for host/tests/mcp_2026.rs: it reaches the gateway (over stdio: the command
after `--`; over Streamable HTTP: `--url URL`) in MODE (`auto`, `legacy` or
`2026-07-28`), performs the steps of SCENARIO and prints one JSON line per
observation, which the Rust test checks.

    python client2026.py SCENARIO MODE [--approve accept|decline|cancel]
                         (-- GATEWAY ARGS... | --url URL)

SCENARIO is a JSON array of steps: {"list": true}, {"call": NAME,
"arguments": {...}}, or {"forge": NAME, "arguments": {...}, "how": HOW}: the
multi-round-trip driven by hand, the gateway's `requestState` retried as HOW
says (`edited`, `other-arguments`, `other-tool`, `replayed`, `stale`, `none`).
An error the client raises is printed as {"call": NAME, "raised": TEXT}, never
hidden: a validation error of the SDK fails the test that reads it.
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import Client, StdioServerParameters


def emit(**fields):
    print(json.dumps(fields), flush=True)


def shown(result):
    if isinstance(result, types.InputRequiredResult):
        return {"input_required": sorted((result.input_requests or {}).keys()), "state": result.request_state}
    text = " ".join(c.text for c in result.content if c.type == "text")
    meta = (result.meta or {}).get("budgetgate")
    return {"is_error": result.is_error, "text": text, "meta": meta}


async def forge(client, step, approve):
    """The gateway's approval round trip driven by hand, its state misused."""
    name, arguments, how = step["forge"], step.get("arguments", {}), step["how"]
    session = client.session
    first = await session.call_tool(name, arguments, allow_input_required=True)
    emit(call=name, round=1, **shown(first))
    if not isinstance(first, types.InputRequiredResult):
        return
    state = first.request_state
    answers = {key: types.ElicitResult(action=approve or "accept", content={}) for key in first.input_requests or {}}
    if how == "edited":
        # One character of the signed payload changed.
        head, _, rest = state.partition(".")
        body, _, mac = rest.partition(".")
        flipped = "B" if body[5] != "B" else "C"
        state = f"{head}.{body[:5]}{flipped}{body[6:]}.{mac}"
    elif how == "other-arguments":
        arguments = {**arguments, "message": "something else"}
    elif how == "other-tool":
        name = step["to"]
    elif how == "stale":
        await asyncio.sleep(step["wait"])
    elif how == "none":
        state = None
    second = await session.call_tool(
        name, arguments, input_responses=answers, request_state=state, allow_input_required=True
    )
    emit(call=name, round=2, **shown(second))
    if how == "replayed":
        third = await session.call_tool(
            name, arguments, input_responses=answers, request_state=state, allow_input_required=True
        )
        emit(call=name, round=3, **shown(third))


async def main(argv):
    if "--url" in argv:
        own, url = argv[: argv.index("--url")], argv[argv.index("--url") + 1]
        target = url
    else:
        split = argv.index("--")
        own, gateway = argv[:split], argv[split + 1 :]
        target = StdioServerParameters(command=gateway[0], args=gateway[1:])
    scenario, mode = json.loads(own[0]), own[1]
    approve = own[own.index("--approve") + 1] if "--approve" in own else None

    async def on_elicit(context, params):
        emit(elicitation=params.message)
        return types.ElicitResult(action=approve, content={} if approve == "accept" else None)

    client = Client(target, mode=mode, elicitation_callback=on_elicit if approve else None)
    async with client:
        emit(connected=mode)
        for step in scenario:
            if "list" in step:
                tools = await client.list_tools()
                emit(tools=[t.name for t in tools.tools])
            elif "forge" in step:
                try:
                    await forge(client, step, approve)
                except Exception as e:  # noqa: BLE001 - printed for the test to read
                    emit(call=step["forge"], raised=f"{type(e).__name__}: {e}")
            else:
                try:
                    result = await client.call_tool(step["call"], step.get("arguments", {}))
                    emit(call=step["call"], **shown(result))
                except Exception as e:  # noqa: BLE001 - printed for the test to read
                    emit(call=step["call"], raised=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
