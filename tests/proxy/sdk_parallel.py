"""Many sessions and parallel calls on one budget, through the official
`anthropic` and `openai` Python SDKs (host/tests/proxy.rs starts the proxy in
reserve mode and a scripted model API that answers slowly, then runs this with
the venv of tests/mcp/install.sh).

    python sdk_parallel.py BASE_URL SESSIONS CLIENTS_PER_SESSION

Starts SESSIONS x CLIENTS_PER_SESSION threads at once, each with its own SDK
client (Anthropic Messages for even threads, OpenAI Chat Completions for odd
ones; every other thread streams) naming its session in the
`X-Claude-Code-Session-Id` header. Each makes calls until the proxy refuses
one. Prints one JSON line per thread: its session, the calls made, the status
and error class of the refusal that stopped it, and the HTTP requests sent (an
SDK that retried a refusal would send more than one for it).
"""

import json
import sys
import threading

import anthropic
import httpx2
import openai

base, sessions, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ask = [{"role": "user", "content": "hi"}]
# No thread starts its first call before every client is built.
start = threading.Barrier(sessions * per)
lock = threading.Lock()


def thread(index):
    session = f"s{index % sessions}"
    sent = []
    headers = {"X-Claude-Code-Session-Id": session, "x-test-delay-ms": "150"}
    http = httpx2.Client(event_hooks={"request": [lambda r: sent.append(1)]})
    streamed = (index // 2) % 2 == 1
    if index % 2 == 0:
        client = anthropic.Anthropic(
            base_url=base, api_key="k", max_retries=2, http_client=http, default_headers=headers
        )

        def call():
            if streamed:
                with client.messages.stream(model="claude-test", max_tokens=100, messages=ask) as s:
                    s.get_final_message()
            else:
                client.messages.create(model="claude-test", max_tokens=100, messages=ask)
    else:
        client = openai.OpenAI(
            base_url=base + "/v1",
            api_key="k",
            max_retries=2,
            http_client=http,
            default_headers=headers,
        )

        def call():
            if streamed:
                list(
                    client.chat.completions.create(
                        model="gpt-test", max_tokens=100, messages=ask, stream=True
                    )
                )
            else:
                client.chat.completions.create(model="gpt-test", max_tokens=100, messages=ask)

    start.wait()
    made = 0
    while True:
        before = len(sent)
        try:
            call()
            made += 1
        except (anthropic.APIStatusError, openai.APIStatusError) as e:
            body = e.body if isinstance(e.body, dict) else {}
            inner = body.get("error", body) if isinstance(body, dict) else {}
            line = {
                "session": session,
                "made": made,
                "status": e.status_code,
                "error": type(e).__name__,
                "code": inner.get("code") or inner.get("type"),
                "requests_for_refusal": len(sent) - before,
                "streamed": streamed,
            }
            with lock:
                print(json.dumps(line), flush=True)
            return
        if made > 1000:
            with lock:
                print(json.dumps({"session": session, "made": made, "status": None}), flush=True)
            return


threads = [threading.Thread(target=thread, args=(i,)) for i in range(sessions * per)]
for t in threads:
    t.start()
for t in threads:
    t.join()
