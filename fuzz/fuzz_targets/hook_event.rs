//! `budgetgate hook claude-code`'s event reader and decision
//! (`host/src/hook/`, `SPEC C`, `SPEC E`) on arbitrary bytes.
//!
//! Input: `FLAGS EVENT \0 TRANSCRIPT_A \0 TRANSCRIPT_B`. `FLAGS` bit 0
//! picks the budget (the reference's defaults, or a tight one with a cost
//! limit, approval and a tool cap). `EVENT` is the stdin JSON; when it reads,
//! its `transcript_path` is pointed at a file of this process holding
//! `TRANSCRIPT_A`, the event is decided, `TRANSCRIPT_B` is appended and the
//! event is decided again (with another `tool_use_id`), all in one ledger
//! transaction that is rolled back (so every input starts from an empty
//! ledger).
//!
//! Checks:
//! * no panic;
//! * `HookEvent::parse` accepts exactly the events an independent reading of
//!   the contract accepts (a strict JSON object, lone surrogate escapes
//!   read as U+FFFD, every common field a string,
//!   ids of 1–256 characters without control characters, `agent_id` absent,
//!   null or such an id, and for `PreToolUse` a string `tool_name`, an object
//!   `tool_input` and a string `tool_use_id`); a refused event is a
//!   `HookError::Event` with a reason;
//! * the answer is never `allow`: no answer, `deny` or `ask` (only for
//!   `PreToolUse`), or `continue: false` (only for `UserPromptSubmit`,
//!   `Stop`, `SubagentStop`); its JSON is the documented shape with a
//!   non-empty reason; a tool name outside `[A-Za-z0-9_-]{1,64}` is denied
//!   `invalid-name`; a decision that fails is an error with a message;
//! * appending bytes to the transcript never lowers the model calls, tokens
//!   or cost counted, and the stored read offset only grows, stays within
//!   the file and ends on a line boundary.
#![no_main]

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use budgetgate::hook::{self, Answer, HookError, HookEvent};
use budgetgate::ledger::{Store, StoreError};
use budgetgate::replay::{parse_budget, ReplayBudget};
use budgetgate_core::budget::{Ledger, Limit};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

struct Env {
    store: Store,
    transcript: PathBuf,
    budgets: [ReplayBudget; 2],
}

const TIGHT: &str = r#"
[budget]
max_tool_calls = 3
max_repeats = 1
max_tokens = 400
max_model_calls = 3
max_seconds = 3600
max_cost_usd = 0.001
[prices.claude-x]
input = 1.0
output = 5.0
[tools]
needs_approval = ["Write"]
max_calls = { Bash = 1 }
"#;

fn env() -> &'static Mutex<Env> {
    static ENV: OnceLock<Mutex<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        // In memory where there is a tmpfs: a file system round trip per
        // input is most of an execution's time.
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("budgetgate-fuzz-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let store = Store::open(&dir.join("state"), std::time::Duration::from_secs(5))
            .expect("ledger opens");
        let budgets = [
            ReplayBudget::default(),
            parse_budget(TIGHT).expect("tight budget"),
        ];
        Mutex::new(Env {
            store,
            transcript: dir.join("session.jsonl"),
            budgets,
        })
    })
}

/// What a rolled-back transaction hands out.
enum Out {
    Done(Box<Outcome>),
    Store(StoreError),
}

impl From<StoreError> for Out {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

struct Outcome {
    first: Result<Answer, HookError>,
    second: Option<Result<Answer, HookError>>,
    ledgers: [Option<Ledger>; 2],
    offsets: [u64; 2],
}

fn id_ok(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| {
        !s.is_empty() && s.chars().count() <= 256 && !s.chars().any(char::is_control)
    })
}

/// The contract's reading of a hook event: whether it is one.
fn oracle_accepts(text: &str) -> bool {
    // A lone surrogate escape reads as U+FFFD (its own unit tests hold
    // that rule).
    let text = budgetgate::strict::without_lone_surrogates(text);
    let Ok(Value::Object(o)) = budgetgate::strict::value_from_str(&text) else {
        return false;
    };
    let s = |k: &str| o.get(k).is_some_and(Value::is_string);
    if !(id_ok(o.get("session_id")) && s("transcript_path") && s("cwd") && s("hook_event_name")) {
        return false;
    }
    match o.get("agent_id") {
        None | Some(Value::Null) => {}
        Some(v @ Value::String(_)) if id_ok(Some(v)) => {}
        Some(_) => return false,
    }
    if o.get("hook_event_name").and_then(Value::as_str) == Some("PreToolUse") {
        return o.get("tool_input").is_some_and(Value::is_object)
            && s("tool_name")
            && s("tool_use_id");
    }
    true
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_answer(event: &HookEvent, result: &Result<Answer, HookError>) {
    let answer = match result {
        Err(e) => {
            assert!(
                !e.to_string().trim().is_empty(),
                "an error without a message"
            );
            return;
        }
        Ok(answer) => answer,
    };
    let name = event.name.as_str();
    let json = answer.to_json(name);
    if let Some(call) = &event.call {
        if !valid_name(&call.name) {
            assert!(
                matches!(answer, Answer::Deny { reason, .. } if reason == "invalid-name"),
                "{:?} is not a tool name, answered {answer:?}",
                call.name
            );
        }
    }
    match answer {
        Answer::Pass => assert!(json.is_none()),
        Answer::Deny { reason, text, stop } => {
            assert!(event.call.is_some(), "deny on {name}");
            assert!(!reason.is_empty() && !text.trim().is_empty());
            let json = json.expect("a deny is printed");
            let out = &json["hookSpecificOutput"];
            assert_eq!(out["permissionDecision"], "deny");
            assert_eq!(out["hookEventName"], name);
            assert_eq!(out["permissionDecisionReason"], text.as_str());
            assert_eq!(json.get("continue").is_some(), *stop);
            if *stop {
                assert_eq!(json["continue"], false);
                assert_eq!(json["stopReason"], text.as_str());
            }
        }
        Answer::Ask(text) => {
            assert!(event.call.is_some(), "ask on {name}");
            assert!(!text.trim().is_empty());
            let json = json.expect("an ask is printed");
            assert_eq!(json["hookSpecificOutput"]["permissionDecision"], "ask");
            assert_eq!(json["hookSpecificOutput"]["hookEventName"], name);
        }
        Answer::Stop(text) => {
            assert!(
                matches!(name, "UserPromptSubmit" | "Stop" | "SubagentStop"),
                "a stop on {name}"
            );
            assert!(!text.trim().is_empty());
            let json = json.expect("a stop is printed");
            assert_eq!(json["continue"], false);
            assert_eq!(json["stopReason"], text.as_str());
        }
    }
    if let Some(json) = answer.to_json(name) {
        let printed = json.to_string();
        let again = budgetgate::strict::value_from_str(&printed).expect("the answer is JSON");
        assert!(again.is_object());
        assert!(!printed.contains("\"allow\""), "allow answered: {printed}");
    }
}

fn counted(ledger: &Option<Ledger>, limit: Limit) -> u64 {
    ledger.as_ref().map_or(0, |l| l.used(limit))
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let event_bytes = parts.next().unwrap_or_default();
    let part_a = parts.next().unwrap_or_default();
    let part_b = parts.next().unwrap_or_default();
    let Ok(text) = std::str::from_utf8(event_bytes) else {
        return;
    };
    let parsed = HookEvent::parse(text);
    assert_eq!(
        parsed.is_ok(),
        oracle_accepts(text),
        "HookEvent::parse disagrees with the contract on {text:?}: {:?}",
        parsed.as_ref().err()
    );
    let mut event = match parsed {
        Ok(event) => event,
        Err(HookError::Event(reason)) => {
            assert!(!reason.trim().is_empty());
            return;
        }
        Err(other) => panic!("a malformed event gave {other:?}"),
    };
    assert_eq!(event.call.is_some(), event.name == "PreToolUse");

    let mut guard = env().lock().unwrap_or_else(|p| p.into_inner());
    let env = &mut *guard;
    event.transcript_path = env.transcript.display().to_string();
    std::fs::write(&env.transcript, part_a).expect("transcript written");
    let budget = &env.budgets[usize::from(flags & 1)];
    let path = env.transcript.clone();
    let shown = event.transcript_path.clone();
    let session = event.session_id.clone();
    let now = 1_780_000_000_000u64;
    let result: Result<(), Out> = env.store.decide(|tx| {
        let first = hook::decide(tx, &event, budget, now, "");
        let ledger_a = tx.ledger(&session, "")?;
        let offset_a = tx.cursor(&session, &shown)?.offset;
        let mut second = None;
        let mut ledger_b = None;
        let mut offset_b = offset_a;
        if first.is_ok() {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("transcript opens");
            file.write_all(part_b).expect("transcript appended");
            drop(file);
            let mut again = event.clone();
            if let Some(call) = &mut again.call {
                call.id.push_str("-again");
            }
            second = Some(hook::decide(tx, &again, budget, now + 1_000, ""));
            ledger_b = tx.ledger(&session, "")?;
            offset_b = tx.cursor(&session, &shown)?.offset;
        }
        // Rolled back: the next input starts from an empty ledger.
        Err(Out::Done(Box::new(Outcome {
            first,
            second,
            ledgers: [ledger_a, ledger_b],
            offsets: [offset_a, offset_b],
        })))
    });
    let outcome = match result {
        Err(Out::Done(outcome)) => outcome,
        Err(Out::Store(e)) => panic!("the fuzz ledger failed: {e}"),
        Ok(()) => unreachable!(),
    };
    check_answer(&event, &outcome.first);
    let whole: Vec<u8> = [part_a, part_b].concat();
    let [off_a, off_b] = outcome.offsets;
    assert!(off_a <= part_a.len() as u64, "offset {off_a} past the file");
    let on_line = |off: u64| off == 0 || whole.get(off as usize - 1) == Some(&b'\n');
    assert!(on_line(off_a), "offset {off_a} inside a line");
    if let Some(second) = &outcome.second {
        check_answer(&event, second);
        if second.is_ok() {
            assert!(
                off_a <= off_b && off_b <= whole.len() as u64,
                "offsets {off_a} then {off_b}"
            );
            assert!(on_line(off_b), "offset {off_b} inside a line");
            let [a, b] = &outcome.ledgers;
            for limit in [Limit::ModelCalls, Limit::Tokens, Limit::CostMicros] {
                assert!(
                    counted(b, limit) >= counted(a, limit),
                    "{limit:?} went down from {} to {} when bytes were appended",
                    counted(a, limit),
                    counted(b, limit)
                );
            }
        }
    }
});
