//! Issue 14 (memory): `budgetgate replay` of a long Claude Code log keeps
//! neither the calls' inputs nor its report: the heap a replay holds at its
//! peak, measured with the counting global allocator of `allocation_counter`
//! (per thread, only inside `measure`; a single recording is replayed on the
//! calling thread), stays far below the inputs it read and the report it
//! wrote. No timing is measured.

use std::io::{self, Write};

use budgetgate::replay::{
    decide, parse_budget, read_session, replay, replay_to, Outcome, ReplayBudget, ReplayOptions,
    STREAM_FROM_BYTES,
};
use serde_json::json;

/// Counts what is written to it, holding nothing.
#[derive(Default)]
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The sample log repeated `copies` times, each copy with its own message,
/// request and call ids (as the criterion bench builds it).
fn repeated_sample(copies: usize) -> String {
    let sample = include_str!("../../examples/replay/claude-code.jsonl");
    (0..copies)
        .map(|copy| {
            sample
                .replace("msg_ex_", &format!("msg_{copy}_"))
                .replace("req_ex_", &format!("req_{copy}_"))
                .replace("toolu_ex_", &format!("toolu_{copy}_"))
        })
        .collect()
}

/// A budget under which every response of the sample happens.
fn roomy() -> ReplayBudget {
    parse_budget(
        "[budget]\nmax_model_calls = 100000\nmax_tokens = 10000000000\nmax_seconds = 100000000\n",
    )
    .unwrap()
}

/// Issue 14 (memory): a Claude Code log of more than
/// [`STREAM_FROM_BYTES`], read line by line, whose responses each write a
/// 16 KiB file (`Write` inputs hold whole files), is replayed through the
/// command with `--json` at a peak heap of less than a quarter of the
/// inputs it read: the inputs are kept as fingerprints only, and the report
/// is written as it is made. Its report still says what the gate decided.
#[test]
fn a_long_log_is_replayed_without_holding_its_inputs() {
    let dir = std::env::temp_dir().join(format!("budgetgate-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("long.jsonl");
    let mut log = io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let (mut inputs, mut written, mut responses) = (0u64, 0u64, 0usize);
    while written <= STREAM_FROM_BYTES {
        let content = format!("{responses:08} {}\n", "x".repeat(16 << 10));
        inputs += content.len() as u64;
        let assistant = json!({"type": "assistant", "uuid": format!("a{responses}"),
            "requestId": format!("req_{responses}"), "timestamp": "2026-01-05T10:00:01Z",
            "message": {"id": format!("msg_{responses}"), "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": format!("toolu_{responses}"), "name": "Write",
                    "input": {"file_path": format!("/src/f{responses}.rs"), "content": content}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 5}}});
        let user = json!({"type": "user", "uuid": format!("u{responses}"), "timestamp": "2026-01-05T10:00:02Z",
            "message": {"role": "user", "content": [{"type": "tool_result",
                "tool_use_id": format!("toolu_{responses}"), "content": "written"}]}});
        let lines = format!("{assistant}\n{user}\n");
        log.write_all(lines.as_bytes()).unwrap();
        written += lines.len() as u64;
        responses += 1;
    }
    log.flush().unwrap();
    drop(log);
    let args = ReplayOptions {
        file: path,
        more: Vec::new(),
        budget: None,
        approve: None,
        json: true,
        progress: false,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut status = Outcome::Held;
    let used = allocation_counter::measure(|| status = replay_to(&args, &mut out, &mut err));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(String::from_utf8_lossy(&err), "");
    // The default budget stops the run after its token limit or 15 calls.
    assert_eq!(status, Outcome::Exceeded);
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["turns"], responses);
    assert_eq!(report["per_turn"][0]["calls"][0]["verdict"], "execute");
    assert_eq!(report["per_turn"][0]["calls"][0]["recorded"], "ok");
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("read line by line")));
    assert!(
        used.bytes_max < inputs / 4,
        "peak heap {} bytes for {inputs} bytes of inputs in {responses} responses",
        used.bytes_max
    );
}

/// Issue 14 (memory): a Claude Code log of more than [`STREAM_FROM_BYTES`]
/// made of many short responses (the sample's, about 2 KB of log each) is
/// replayed through the command, `--json` and the table, at a peak heap of
/// at most 256 bytes a response beyond what replaying one copy takes: each
/// response goes to a temporary file once no later line can change it, and
/// only its record's offset, its `message.id`'s place in an index, its
/// calls' results' hashes and the gate's two bytes per decided call stay in
/// memory (about 120 bytes, vectors' spare room included). Holding the
/// responses themselves (main at dde01bb) measured 1 096 bytes a response
/// here. The report is the one the log read whole gives.
#[test]
fn a_long_log_of_short_responses_holds_a_few_words_per_response() {
    let dir = std::env::temp_dir().join(format!("budgetgate-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.jsonl");
    let one = repeated_sample(1).len() as u64;
    let copies = usize::try_from(STREAM_FROM_BYTES / one + 1).unwrap();
    let text = repeated_sample(copies);
    std::fs::write(&path, &text).unwrap();
    let responses = copies * 4;
    // What the gate itself takes, whatever the log: the heap of replaying
    // one copy of the sample read whole.
    let small = read_session(&repeated_sample(1)).unwrap();
    let gate = allocation_counter::measure(|| {
        let report = decide(&small, &roomy()).unwrap();
        report.write_json(&mut Counted::default()).unwrap();
    })
    .bytes_max;
    for (budget, json) in [(None, true), (None, false), (Some(roomy()), true)] {
        let budget_path = dir.join("roomy.toml");
        std::fs::write(
            &budget_path,
            "[budget]\nmax_model_calls = 100000\nmax_tokens = 10000000000\nmax_seconds = 100000000\n",
        )
        .unwrap();
        let args = ReplayOptions {
            file: path.clone(),
            more: Vec::new(),
            budget: budget.as_ref().map(|_| budget_path.clone()),
            approve: None,
            json,
            progress: false,
        };
        let (mut out, mut err) = (Counted::default(), Vec::new());
        let mut status = Outcome::Held;
        let used = allocation_counter::measure(|| status = replay_to(&args, &mut out, &mut err));
        assert_eq!(String::from_utf8_lossy(&err), "");
        assert!(out.0 > (responses as u64) * 100);
        let per_response = used.bytes_max.saturating_sub(gate) / responses as u64;
        assert!(
            per_response <= 256,
            "json {json}, budget {budget:?}: peak heap {} bytes ({per_response} a response beyond the gate's {gate}) for {responses} responses",
            used.bytes_max,
            budget = budget.is_some()
        );
        // The same report as the log read whole.
        let whole = read_session(&text).unwrap();
        let report = decide(&whole, budget.as_ref().unwrap_or(&ReplayBudget::default())).unwrap();
        let mut expected = Vec::new();
        if json {
            report.write_json(&mut expected).unwrap();
        } else {
            report
                .write_table(&path.display().to_string(), &mut expected)
                .unwrap();
        }
        let mut written = Vec::new();
        assert_eq!(replay_to(&args, &mut written, &mut Vec::new()), status);
        let note = b",\"a large Claude Code log: read line by line, never held whole\"";
        let note_line = b"note: a large Claude Code log: read line by line, never held whole\n";
        let strip = |bytes: &[u8], what: &[u8]| -> Vec<u8> {
            let at = bytes
                .windows(what.len())
                .position(|w| w == what)
                .expect("the note that the log was read line by line");
            [&bytes[..at], &bytes[at + what.len()..]].concat()
        };
        assert!(
            strip(&written, if json { note } else { note_line }) == expected,
            "json {json}: the report differs from the log's read whole"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 14 (memory): a decided report is written a row at a time: writing
/// the `--json` report or the table of 2 000 responses holds less than
/// 16 KiB at once while it writes more than 400 KiB, with every
/// response reached or most not reached; holding the same report's text
/// whole (what `to_json` gives) takes at least its length, which shows the
/// counter sees it.
#[test]
fn a_decided_report_is_written_a_row_at_a_time() {
    let text = repeated_sample(500);
    let session = read_session(&text).unwrap();
    assert_eq!(session.turns.len(), 2000);
    for budget in [ReplayBudget::default(), roomy()] {
        let report = decide(&session, &budget).unwrap();
        for table in [false, true] {
            let mut sink = Counted::default();
            let used = allocation_counter::measure(|| {
                if table {
                    report.write_table("sample", &mut sink).unwrap();
                } else {
                    report.write_json(&mut sink).unwrap();
                }
            });
            assert!(
                used.bytes_max < 16 << 10 && sink.0 > 400 << 10,
                "table {table}: {} bytes held to write {}",
                used.bytes_max,
                sink.0
            );
        }
        let held = replay(&session, &budget).unwrap();
        let mut json = String::new();
        let used = allocation_counter::measure(|| json = held.to_json().unwrap());
        assert!(used.bytes_max >= json.len() as u64);
    }
}
