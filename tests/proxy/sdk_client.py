"""Drives `budgetgate proxy` with the official `anthropic` and `openai` Python
SDKs (host/tests/proxy.rs starts the proxy and a scripted model API, then runs
this with the venv of tests/mcp/install.sh).

    python sdk_client.py BASE_URL

Makes, in order: an Anthropic Messages call, the same streamed, an OpenAI Chat
Completions call, the same streamed (without asking for usage), then one more
call with each SDK, which the budget (4 model calls) refuses. Prints one JSON
line per call: what the SDK returned or raised, and how many HTTP requests it
sent for it (an SDK that retried a refusal would send more than one).
"""

import json
import sys
import time

import anthropic
import httpx2
import openai

base = sys.argv[1]
sent = []


def count(request):
    sent.append(request.url.path)


def report(name, **fields):
    print(json.dumps({"call": name, **fields}), flush=True)


def attempt(name, call):
    before = len(sent)
    started = time.monotonic()
    try:
        result = call()
        report(name, ok=True, result=result, requests=len(sent) - before)
    except (anthropic.APIStatusError, openai.APIStatusError) as e:
        report(
            name,
            ok=False,
            status=e.status_code,
            error=type(e).__name__,
            message=str(e),
            requests=len(sent) - before,
            seconds=round(time.monotonic() - started, 3),
        )


claude = anthropic.Anthropic(
    base_url=base,
    api_key="test-key",
    max_retries=2,
    http_client=httpx2.Client(event_hooks={"request": [count]}),
)
gpt = openai.OpenAI(
    base_url=base + "/v1",
    api_key="test-key",
    max_retries=2,
    http_client=httpx2.Client(event_hooks={"request": [count]}),
)
ask = [{"role": "user", "content": "hi"}]


def messages():
    m = claude.messages.create(model="claude-test", max_tokens=100, messages=ask)
    return {"text": m.content[0].text, "output_tokens": m.usage.output_tokens}


def messages_streamed():
    with claude.messages.stream(model="claude-test", max_tokens=100, messages=ask) as s:
        m = s.get_final_message()
    return {"text": m.content[0].text, "output_tokens": m.usage.output_tokens}


def chat():
    c = gpt.chat.completions.create(model="gpt-test", messages=ask)
    return {"text": c.choices[0].message.content, "prompt_tokens": c.usage.prompt_tokens}


def chat_streamed():
    chunks = list(gpt.chat.completions.create(model="gpt-test", messages=ask, stream=True))
    return {
        "text": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
        "usage_chunks": sum(1 for c in chunks if c.usage is not None),
    }


attempt("messages", messages)
attempt("messages-streamed", messages_streamed)
attempt("chat", chat)
attempt("chat-streamed", chat_streamed)
attempt("messages-refused", messages_streamed)
attempt("chat-refused", chat)
