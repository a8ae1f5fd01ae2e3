//! Differential test: every case in `tests/vectors/*.jsonl` was answered by the
//! Python reference code (see `tests/vectors/README.md`); `budgetgate eval` must
//! give the same result. Error details differ by design, so only the error kind
//! is compared.

use serde_json::value::RawValue;
use serde_json::Value;

#[derive(serde::Deserialize)]
struct Case<'a> {
    name: String,
    #[serde(borrow)]
    request: &'a RawValue,
    #[serde(borrow)]
    response: &'a RawValue,
    #[serde(default)]
    #[allow(dead_code)]
    origin: Option<String>,
}

fn check_file(file: &str) -> usize {
    let path = format!("{}/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.split('\n').filter(|l| !l.trim().is_empty()) {
        let case: Case = serde_json::from_str(line).unwrap_or_else(|e| panic!("{path}: {e}"));
        count += 1;
        let got: Value = serde_json::from_str(&budgetgate::eval::answer_line(
            case.request.get().as_bytes(),
        ))
        .expect("eval answers JSON");
        let want: Value =
            serde_json::from_str(case.response.get()).expect("vector response is JSON");
        let same = match (want.get("error"), got.get("error")) {
            (Some(w), Some(g)) => w == g,
            (None, None) => want == got,
            _ => false,
        };
        if !same {
            failures.push(format!("{}:\n  want {want}\n  got  {got}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases in {file} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    count
}

#[test]
fn validate_agent_action_matches_reference() {
    assert!(check_file("validate.jsonl") > 100);
}

#[test]
fn run_bounded_agent_matches_reference() {
    assert!(check_file("run.jsonl") > 100);
}

#[test]
fn trace_work_matches_reference() {
    assert!(check_file("trace_work.jsonl") > 50);
}

#[test]
fn plans_match_reference() {
    assert!(check_file("plan.jsonl") > 100);
}

#[test]
fn huge_number_literals_match_reference() {
    assert!(check_file("number_overflow.jsonl") > 0);
}
