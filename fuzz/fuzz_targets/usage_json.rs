//! `TokenUsage::parse` on arbitrary bytes: the core's JSON pull reader
//! against serde_json (`SPEC C`, tokens; `SPEC A1`, strict JSON).
//!
//! Invariants: never panics; whatever the core accepts, serde_json reads as
//! an object whose four counted fields are what the core counted (absent or
//! null: 0), with no counted field given twice; a document serde_json
//! refuses as JSON the core refuses too, but for numbers beyond a double
//! (`1e400`), which the contract reads as infinite floats.
#![no_main]

use budgetgate_core::TokenUsage;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let ours = TokenUsage::parse(data);
    let theirs: Result<Value, _> = serde_json::from_slice(data);
    match (&ours, &theirs) {
        (Ok(usage), Ok(Value::Object(map))) => {
            for (key, got) in [
                ("input_tokens", usage.input_tokens),
                ("output_tokens", usage.output_tokens),
                ("cache_read_input_tokens", usage.cache_read_input_tokens),
                (
                    "cache_creation_input_tokens",
                    usage.cache_creation_input_tokens,
                ),
            ] {
                let want = match map.get(key) {
                    None | Some(Value::Null) => 0,
                    Some(v) => v
                        .as_u64()
                        .expect("a counted field the core accepted is a count"),
                };
                assert_eq!(got, want, "{key}");
            }
        }
        (Ok(_), Ok(other)) => panic!("the core accepted a non-object: {other}"),
        // `1e400` is a number (an infinite float, as Python reads it); serde_json
        // alone refuses it. A skipped field may hold one.
        (Ok(_), Err(e)) if e.to_string().starts_with("number out of range") => {}
        (Ok(_), Err(e)) => panic!("the core accepted what serde_json refuses: {e}"),
        (Err(_), _) => {}
    }
});
