//! One rule for what "the same response" is (issue 30, item 2), checked
//! on generated Claude Code logs: the hook, reading a log as it grows over
//! several events, counts exactly the model calls and tokens `replay`'s
//! reader finds in the whole log. The logs mix what real ones hold: one
//! response over several lines, results between them, prompts typed
//! between, lines with and without `requestId`, ids coming back, synthetic
//! lines, other line kinds.

use std::io::Write;

use budgetgate::hook::{self, HookEvent};
use budgetgate::replay::{parse_budget, read_session};
use budgetgate::store::memory::MemoryStore;
use budgetgate::store::LedgerTx;
use budgetgate_core::budget::Limit;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One generated line.
#[derive(Debug, Clone)]
enum Line {
    Assistant {
        message: u8,
        request: Option<u8>,
        calls: Vec<u8>,
        input: u16,
        output: u16,
        synthetic: bool,
    },
    Results(Vec<u8>),
    Prompt,
    Other,
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        4 => (0u8..3, proptest::option::of(0u8..2), proptest::collection::vec(0u8..4, 0..3), 0u16..500, 0u16..50, proptest::bool::weighted(0.1))
            .prop_map(|(message, request, calls, input, output, synthetic)| Line::Assistant {
                message, request, calls, input, output, synthetic,
            }),
        3 => proptest::collection::vec(0u8..4, 1..3).prop_map(Line::Results),
        1 => Just(Line::Prompt),
        1 => Just(Line::Other),
    ]
}

/// `line` with some of its keys and words spelled with `\u` escapes, as a
/// JSON writer may, and what `JSON.stringify` writes that strict readers
/// refuse: a tool result cut inside a surrogate pair, a call's input
/// nested past 128 levels (`spell`: which of them).
fn spelled(line: String, spell: u8) -> String {
    let deep = format!("{{\"d\":{}{},\"f\":", "[".repeat(200), "]".repeat(200));
    let words = [
        ("\"usage\"", "\"\\u0075sage\""),
        ("\"message\"", "\"\\u006dessage\""),
        ("\"assistant\"", "\"\\u0061ssistant\""),
        ("\"user\"", "\"\\u0075ser\""),
        ("\"requestId\"", "\"request\\u0049d\""),
        ("\"tool_use_id\"", "\"tool_use_\\u0069d\""),
        ("\"content\":\"ok\"", "\"content\":\"cut \\ud83d\""),
        ("{\"f\":", deep.as_str()),
    ];
    words
        .iter()
        .enumerate()
        .filter(|(n, _)| spell & (1 << n) != 0)
        .fold(line, |line, (_, (plain, escaped))| {
            line.replacen(plain, escaped, 1)
        })
}

fn text(lines: &[Line]) -> Vec<String> {
    lines
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let mut v = match l {
                Line::Assistant { message, request, calls, input, output, synthetic } => {
                    let blocks: Vec<Value> = calls
                        .iter()
                        .map(|c| json!({"type": "tool_use", "id": format!("t{c}"), "name": "Read", "input": {"f": c}}))
                        .collect();
                    let mut v = json!({"type": "assistant", "message": {
                        "id": format!("m{message}"), "role": "assistant",
                        "model": if *synthetic { "<synthetic>" } else { "claude-x" },
                        "content": blocks, "stop_reason": null,
                        "usage": {"input_tokens": input, "output_tokens": output}}});
                    if let Some(r) = request {
                        v["requestId"] = json!(format!("r{r}"));
                    }
                    v
                }
                Line::Results(ids) => json!({"type": "user", "message": {"role": "user", "content":
                    ids.iter().map(|i| json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "ok"})).collect::<Vec<_>>()}}),
                Line::Prompt => json!({"type": "user", "message": {"role": "user", "content": "go on"}}),
                Line::Other => json!({"type": "system", "content": "compacted"}),
            };
            v["sessionId"] = json!("s1");
            v["uuid"] = json!(format!("u{n}"));
            v.to_string()
        })
        .collect()
}

/// [`text`], each line spelled as `spells` says.
fn text_spelled(lines: &[Line], spells: &[u8]) -> Vec<String> {
    text(lines)
        .into_iter()
        .zip(spells.iter().chain(std::iter::repeat(&0)))
        .map(|(line, &spell)| spelled(line, spell))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn the_hook_counts_a_growing_log_as_replay_counts_the_whole(
        lines in proptest::collection::vec(line(), 1..24),
        cuts in proptest::collection::vec(0usize..24, 0..4),
        spells in proptest::collection::vec(prop_oneof![4 => Just(0u8), 1 => any::<u8>()], 0..24),
    ) {
        let lines = text_spelled(&lines, &spells);
        let whole = lines.join("\n") + "\n";
        // Replay's reader on the whole log (one without a response is no
        // log to compare).
        let Ok(session) = read_session(&whole) else {
            return Ok(());
        };
        let calls = session.turns.len() as u64;
        let tokens: u64 = session
            .turns
            .iter()
            .map(|t| t.usage.map_or(0, |u| u.total()))
            .sum();
        // The hook, reading the log as it is written: an event after each
        // cut, and one at the end.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let budget = parse_budget("[budget]\nmax_tokens = 1000000000\nmax_model_calls = 1000000\nmax_seconds = 1000000000\n").unwrap();
        let store = MemoryStore::new();
        let event = HookEvent {
            session_id: "s1".into(),
            transcript_path: path.display().to_string(),
            name: "Stop".into(),
            agent_id: None,
            call: None,
            result: None,
        };
        let mut stops: Vec<usize> = cuts.into_iter().filter(|&c| c < lines.len()).collect();
        stops.sort_unstable();
        stops.push(lines.len());
        let mut file = std::fs::File::create(&path).unwrap();
        let mut written = 0;
        for stop in stops {
            for l in &lines[written..stop.max(written)] {
                writeln!(file, "{l}").unwrap();
            }
            written = stop.max(written);
            store
                .decide(|tx| hook::decide(tx, &event, &budget, 1_000, ""))
                .unwrap();
        }
        let ledger = store
            .decide(|tx| -> Result<_, budgetgate::store::StoreError> { tx.ledger("s1", "") })
            .unwrap()
            .expect("the session's ledger");
        prop_assert_eq!(
            (ledger.used(Limit::ModelCalls), ledger.used(Limit::Tokens)),
            (calls, tokens),
            "{}",
            whole
        );
    }
}
