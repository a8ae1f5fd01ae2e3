#!/usr/bin/env python3
"""Compare budgetgate's loop detection with OpenHands' stuck-detector rules.

Usage:
    scripts/loops-compare.py [--budgetgate BIN] [--root DIR] [--json] [--check] LIST_OR_PATH...

Each argument is a recording or a list file (`*.list` / `*.txt`): one
session a line, `LABEL PATH [# note]`, LABEL `loop`, `progress` or `-`;
`#` starts a comment; a relative PATH is taken from `--root` or else from
the list's folder.

For every session this runs `budgetgate replay --json` with the recommended
`[loops]` (same_outcome 4, same_error 3, ping_pong_cycles 3) and loose
budget limits, so that only loop detection can refuse, and reads the first
`no_progress` refusal (pattern and turn). It then applies, to the same calls
and results, the rules of OpenHands' stuck detector as documented and read
from `openhands/controller/stuck.py` (our own implementation, not theirs):

  repeat   the last 4 actions are the same and the last 4 observations are
           the same (no other action between them);
  error    the last 3 actions are the same and their 3 observations are
           errors (only where the recording flags errors: Claude Code
           `tool_result.is_error`; a SWE-agent observation has no flag);
  monologue the last 3 agent text messages (a turn with text and no tool
           call) are the same with no observation between them (only where
           the recording keeps the model's text turns: Claude Code logs);
  alternate the last 6 actions go A, B, A, B, A, B with observations
           repeating the same way (3 whole cycles).

Steps are the replay report's per-turn index (a SWE-agent step is one turn).
budgetgate's step is the turn whose call is refused (not executed); the
OpenHands step is the turn whose observation completes the pattern (it has
run, the detector stops the agent before the next one). "Same step or
earlier" is `budgetgate turn <= OpenHands turn`.

Formats read: SWE-agent `.traj` (`trajectory[]`) and Claude Code `.jsonl`
session logs as they are; two formats replay does not read are rewritten,
content unchanged, into a temporary file of a shape it reads, which both
budgetgate and the rules then see:
  - mini-SWE-agent `.traj.json` (`messages[]`) into a SWE-agent `.traj`:
    action = the single ```bash block of an assistant message, none when it
    has not exactly one (mini-SWE-agent then runs nothing and answers with a
    format error: a turn without a call), observation = the next user
    message;
  - OpenHands' LLM completion log (`fncall_messages[]`, the Chat Completions
    history of the run's last model call) into Claude Code log lines, so
    that a result's error flag survives (see `openhands_to_lines`).

"The same observation" compares the recorded text. OpenHands' own equality
for a command's output compares only the command and its exit code; that
looser test is not applied here (the recordings rarely keep exit codes
apart from the text), so on a command whose output changes but whose exit
code does not, OpenHands would flag where this script does not.

`--check` exits 1 when a session labelled `loop` that OpenHands flags is not
refused by budgetgate at the same turn or earlier, or when a session
labelled `progress` is refused. Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUDGET = """[budget]
max_model_calls = 100000
max_tokens = 10000000000
max_seconds = 100000000
max_repeats = 100000

[loops]
same_outcome = 4
same_error = 3
ping_pong_cycles = 3
"""

BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.S)


class Event:
    """One tool call and its recorded result, or one agent text message."""

    def __init__(self, turn, kind, action=None, observation=None, error=False, text=None):
        self.turn = turn
        self.kind = kind  # "call" or "message"
        self.action = action
        self.observation = observation
        self.error = error
        self.text = text


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def temp_path(tmpdir, path, suffix):
    """A fresh file in tmpdir, named after the recording (replay's
    format detection looks at the suffix)."""
    stem = os.path.basename(path).split(".")[0]
    fd, out = tempfile.mkstemp(prefix=stem + "-", suffix=suffix, dir=tmpdir)
    os.close(fd)
    return out


def read_session(path, tmpdir):
    """Return (path replay reads, format name, events, notes)."""
    if path.endswith(".jsonl"):
        return path, "claude-code", None, []
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):
        data = {"messages": data}
    if "trajectory" in data:
        return path, "swe-agent", swe_events(data), ["error rule: n/a (no error flag)", "monologue: n/a"]
    if "fncall_messages" in data:
        out = temp_path(tmpdir, path, ".jsonl")
        with open(out, "w", encoding="utf-8") as f:
            for line in openhands_to_lines(data):
                f.write(json.dumps(line) + "\n")
        return out, "openhands-llm-log", None, ["errors: tool results beginning `ERROR:`"]
    if "messages" in data:
        traj = mini_to_traj(data)
        out = temp_path(tmpdir, path, ".traj")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(traj, f)
        return out, "mini-swe-agent", swe_events(traj), ["error rule: n/a (no error flag)", "monologue: n/a"]
    raise ValueError("not a SWE-agent, mini-SWE-agent or Claude Code recording")


def mini_to_traj(data):
    messages = data["messages"]
    steps = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") == "assistant":
            content = m["content"] if isinstance(m["content"], str) else canonical(m["content"])
            blocks = BASH_BLOCK.findall(content)
            # Not exactly one block: mini-SWE-agent runs nothing and answers
            # with a format error, so the step is a turn without a call.
            action = blocks[0] if len(blocks) == 1 else ""
            observation = ""
            if i + 1 < len(messages) and messages[i + 1].get("role") == "user":
                o = messages[i + 1]["content"]
                observation = o if isinstance(o, str) else canonical(o)
                i += 1
            steps.append({"action": action, "observation": observation, "response": content})
        i += 1
    info = data.get("info") or {}
    return {"trajectory": steps, "info": {"exit_status": info.get("exit_status")}}


def openhands_to_lines(data):
    """OpenHands' completion log (`fncall_messages`: the Chat Completions
    history of the run's last model call) as Claude Code log lines, which
    replay reads with each result's error flag: one response per assistant
    message (its text, its tool calls as `tool_use`), each `tool` message a
    `tool_result`, flagged `is_error` when it begins `ERROR:` (how OpenHands
    shows the model an ErrorObservation). An assistant message without a
    tool call is a text turn (OpenHands' agent MessageAction)."""
    lines = []
    for n, m in enumerate(data["fncall_messages"]):
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        content = content or ""
        if role == "assistant":
            blocks = [{"type": "text", "text": content}] if content.strip() else []
            for call in m.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = function.get("arguments")
                try:
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    arguments = {"raw": arguments}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name", ""), "input": arguments})
            if not blocks:
                continue
            lines.append({"type": "assistant", "uuid": "a%d" % n, "sessionId": "openhands",
                          "message": {"id": "msg_%d" % n, "role": "assistant", "content": blocks}})
        elif role == "tool":
            lines.append({"type": "user", "uuid": "r%d" % n, "sessionId": "openhands",
                          "message": {"role": "user", "content": [{
                              "type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                              "content": content, "is_error": content.startswith("ERROR:")}]}})
        elif role == "user":
            lines.append({"type": "user", "uuid": "u%d" % n, "sessionId": "openhands",
                          "message": {"role": "user", "content": content}})
    return lines


def swe_events(traj):
    events = []
    for turn, step in enumerate(traj["trajectory"]):
        action = step.get("action") or ""
        if not action.strip():
            continue
        events.append(Event(turn, "call", action=action, observation=step.get("observation") or ""))
    return events


def claude_events(path, call_turns):
    """Calls in the order of the log, each with the turn replay gave it."""
    calls = {}
    order = []
    texts = []  # (position, message id, text) of assistant text blocks
    tool_message_ids = set()
    position = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            message = row.get("message")
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                position += 1
                kind = block.get("type")
                if row.get("type") == "assistant" and kind == "tool_use":
                    calls[block["id"]] = {
                        "action": block.get("name", "") + " " + canonical(block.get("input")),
                        "position": position,
                        "result": None,
                    }
                    order.append(block["id"])
                    tool_message_ids.add(message.get("id"))
                elif row.get("type") == "assistant" and kind == "text":
                    texts.append((position, message.get("id"), block.get("text", "")))
                elif kind == "tool_result" and block.get("tool_use_id") in calls:
                    calls[block["tool_use_id"]]["result"] = (
                        canonical(block.get("content")),
                        bool(block.get("is_error")),
                        position,
                    )
    events = []
    for call_id in order:
        c = calls[call_id]
        if c["result"] is None or call_id not in call_turns:
            continue
        observation, error, at = c["result"]
        e = Event(call_turns[call_id], "call", action=c["action"], observation=observation, error=error)
        e.position = at
        events.append(e)
    # A text-only turn (no tool call in the same response) is a message.
    for at, message_id, text in texts:
        if message_id in tool_message_ids:
            continue
        e = Event(None, "message", text=text)
        e.position = at
        events.append(e)
    events.sort(key=lambda e: e.position)
    # A message takes the turn of the next call, or the last turn seen.
    last = 0
    for e in events:
        if e.turn is not None:
            last = e.turn
    pending = []
    for e in events:
        if e.kind == "message":
            pending.append(e)
        else:
            for m in pending:
                m.turn = e.turn
            pending = []
    for m in pending:
        m.turn = last
    return events


def run_budgetgate(binary, path, budget_path):
    proc = subprocess.run(
        [binary, "replay", path, "--budget", budget_path, "--json"],
        capture_output=True,
        text=True,
    )
    if not proc.stdout.strip():
        return None, (proc.stderr.strip() or "no output")
    try:
        return json.loads(proc.stdout), None
    except ValueError:
        return None, proc.stdout.strip()[:300]


def openhands(events):
    """First (pattern, turn) the stuck-detector rules flag, or None."""
    seen = []
    for e in events:
        seen.append(e)
        if e.kind != "call":
            continue
        found = check(seen)
        if found:
            return found, e.turn
    return None


def check(seen):
    calls = [e for e in seen if e.kind == "call"]
    if len(seen) < 3:
        return None
    last4 = calls[-4:]
    if len(last4) == 4 and all(c.action == last4[0].action for c in last4) and all(
        c.observation == last4[0].observation for c in last4
    ):
        return "repeat"
    last3 = calls[-3:]
    if (
        len(calls) >= 4
        and all(c.action == last3[0].action for c in last3)
        and all(c.error for c in last3)
    ):
        return "error"
    messages = [(i, e) for i, e in enumerate(seen) if e.kind == "message"]
    if len(messages) >= 3:
        tail = messages[-3:]
        if all(m.text == tail[0][1].text for _, m in tail):
            between = seen[tail[0][0] + 1 : tail[-1][0]]
            if not any(e.kind == "call" for e in between):
                return "monologue"
    last6 = calls[-6:]
    if len(last6) == 6:
        a = [c.action for c in last6]
        o = [c.observation for c in last6]
        if a[0] == a[2] == a[4] and a[1] == a[3] == a[5] and o[0] == o[2] == o[4] and o[1] == o[3] == o[5]:
            return "alternate"
    return None


def read_list(arguments, root=None):
    sessions = []
    for argument in arguments:
        if argument.endswith((".list", ".txt")):
            base = root or os.path.dirname(os.path.abspath(argument))
            with open(argument, encoding="utf-8") as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if not line:
                        continue
                    label, path = line.split(None, 1)
                    if not os.path.isabs(path):
                        path = os.path.join(base, path)
                    sessions.append((label, path))
        else:
            sessions.append(("-", argument))
    return sessions


def compare(binary, label, path, tmpdir, budget_path):
    row = {"session": os.path.basename(path), "label": label, "path": path}
    try:
        replay_path, fmt, events, notes = read_session(path, tmpdir)
    except (OSError, ValueError, KeyError) as error:
        row["error"] = str(error)
        return row
    report, error = run_budgetgate(binary, replay_path, budget_path)
    if report is None:
        row["error"] = error
        return row
    row["format"] = fmt
    row["turns"] = report.get("turns")
    row["notes"] = notes
    if events is None:
        call_turns = {}
        for t in report.get("per_turn", []):
            for c in t.get("calls", []):
                call_turns[c["id"]] = t["turn"]
        events = claude_events(replay_path, call_turns)
    stop = report.get("no_progress")
    row["budgetgate"] = (
        None
        if stop is None
        else {
            "pattern": stop["pattern"],
            "turn": stop["turn"],
            "tool": stop["tool"],
            "saved_model_calls": stop["saved_model_calls"],
            "saved_tokens": stop["saved_tokens"],
        }
    )
    row["refusals"] = report.get("refusals", {}).get("no-progress", 0)
    found = openhands(events)
    row["openhands"] = None if found is None else {"pattern": found[0], "turn": found[1]}
    return row


def verdict(row):
    bg, oh = row.get("budgetgate"), row.get("openhands")
    if row["label"] == "progress":
        return "FALSE POSITIVE" if bg else "ok"
    if oh and not bg:
        return "MISSED (OpenHands catches)"
    if oh and bg and bg["turn"] > oh["turn"]:
        return "LATER than OpenHands"
    if row["label"] == "loop" and not bg:
        return "missed by both" if not oh else "missed"
    if oh and bg:
        return "earlier" if bg["turn"] < oh["turn"] else "same step"
    if bg:
        return "budgetgate only"
    return "-"


def fmt_stop(stop):
    return "—" if not stop else "%s @ %d" % (stop["pattern"], stop["turn"])


def table(rows):
    out = [
        "| session | label | turns | budgetgate (pattern @ turn) | saved calls | OpenHands (pattern @ step) | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append("| %s | %s | — | unreadable: %s | — | — | — |" % (r["session"], r["label"], r["error"].replace("|", "/")))
            continue
        bg = r["budgetgate"]
        out.append(
            "| %s | %s | %s | %s | %s | %s | %s |"
            % (
                r["session"],
                r["label"],
                r["turns"],
                fmt_stop(bg),
                bg["saved_model_calls"] if bg else "—",
                fmt_stop(r["openhands"]),
                verdict(r),
            )
        )
    return "\n".join(out)


def summary(rows):
    ok = [r for r in rows if "error" not in r]
    loops = [r for r in ok if r["label"] == "loop"]
    progress = [r for r in ok if r["label"] == "progress"]
    oh_loops = [r for r in loops if r["openhands"]]
    bg_loops = [r for r in loops if r["budgetgate"]]
    same_or_earlier = [r for r in oh_loops if r["budgetgate"] and r["budgetgate"]["turn"] <= r["openhands"]["turn"]]
    fp = [r for r in progress if r["budgetgate"]]
    oh_fp = [r for r in progress if r["openhands"]]
    lines = [
        "sessions: %d (%d loop, %d progress, %d unlabelled, %d unreadable)"
        % (len(rows), len(loops), len(progress), len(ok) - len(loops) - len(progress), len(rows) - len(ok)),
        "loops caught by budgetgate: %d of %d" % (len(bg_loops), len(loops)),
        "loops caught by OpenHands rules: %d of %d" % (len(oh_loops), len(loops)),
        "OpenHands catches that budgetgate refuses at the same turn or earlier: %d of %d"
        % (len(same_or_earlier), len(oh_loops)),
        "progressing sessions refused by budgetgate (false positives): %d of %d%s"
        % (len(fp), len(progress), (": " + ", ".join(r["session"] for r in fp)) if fp else ""),
        "progressing sessions flagged by OpenHands rules: %d of %d%s"
        % (len(oh_fp), len(progress), (": " + ", ".join(r["session"] for r in oh_fp)) if oh_fp else ""),
    ]
    passed = len(same_or_earlier) == len(oh_loops) and not fp
    return "\n".join("- " + l for l in lines), passed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", help="recordings or list files")
    parser.add_argument("--budgetgate", default=os.environ.get("BUDGETGATE") or shutil.which("budgetgate") or "budgetgate")
    parser.add_argument("--root", help="folder a list's relative paths are taken from (default: the list's folder)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the outcome holds")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="loops-compare-") as tmpdir:
        budget_path = os.path.join(tmpdir, "budget.toml")
        with open(budget_path, "w", encoding="utf-8") as f:
            f.write(BUDGET)
        for label, path in read_list(args.inputs, args.root):
            rows.append(compare(args.budgetgate, label, path, tmpdir, budget_path))
    text, passed = summary(rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        print()
        print(text)
    if args.check and not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
