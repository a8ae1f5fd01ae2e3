//! The stored ledger record (`budget::Ledger::from_record`, `SPEC E` durable
//! state) on arbitrary bytes, and ledgers built by arbitrary operations.
//!
//! Invariants: never panics; a record that decodes encodes back to exactly
//! the same bytes (one encoding per ledger, so a store can compare bytes),
//! or, read from version 1, to a record of this version that decodes to
//! the same ledger;
//! a record one bit away from a valid one never decodes; any ledger built by
//! the API round-trips, and reservations never go negative.
#![no_main]

use budgetgate_core::budget::{Ledger, Limit, RECORD_LEN};
use budgetgate_core::tools::{ToolRule, ToolTable};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Max(u8, Option<u64>),
    Record(u8, u64),
    Reserve(u8, u64),
    CommitLast(u64),
    RollBackLast,
    Cap(u8, u32),
    Count(u8),
    Time(u64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    bytes: Vec<u8>,
    flip: u16,
    ops: Vec<Op>,
}

const NAMES: [&str; 10] = ["Bash", "Read", "Write", "a", "b", "c", "d", "e", "f", "g"];

fuzz_target!(|input: Input| {
    // Arbitrary bytes, and the same bytes at the record's length.
    let mut bytes = input.bytes.clone();
    for candidate in [&input.bytes[..], {
        bytes.resize(RECORD_LEN, 0);
        &bytes[..]
    }] {
        if let Ok(ledger) = Ledger::from_record(candidate) {
            if candidate.get(3) == Some(&1) {
                // A version-1 record (read for its counts) is stored again
                // as this version, with the same figures.
                let again = ledger.to_record();
                assert_eq!(Ledger::from_record(again.as_bytes()).as_ref(), Ok(&ledger));
            } else {
                assert_eq!(ledger.to_record().as_bytes(), candidate, "not canonical");
            }
        }
    }
    // Ledgers built through the API.
    // The caps are the tool table's (configuration); the ledger counts.
    let mut ledger: Ledger = Ledger::new(0);
    let mut tools: ToolTable<10> = ToolTable::new();
    tools.set_others(ToolRule::Run);
    let mut held = Vec::new();
    for op in input.ops.iter().take(64) {
        let limit = |i: &u8| Limit::ALL[usize::from(*i) % Limit::COUNT];
        match op {
            Op::Max(l, m) => ledger.set_max(limit(l), *m),
            Op::Record(l, n) => ledger.record(limit(l), *n),
            Op::Reserve(l, n) => {
                if let Ok(r) = ledger.try_reserve(limit(l), *n) {
                    held.push(r);
                }
            }
            Op::CommitLast(n) => {
                if let Some(r) = held.pop() {
                    ledger.commit(r, *n).expect("a held reservation commits");
                }
            }
            Op::RollBackLast => {
                if let Some(r) = held.pop() {
                    ledger.roll_back(r).expect("a held reservation rolls back");
                }
            }
            Op::Cap(i, m) => {
                let _ = tools.try_add_cap(NAMES[usize::from(*i) % NAMES.len()], *m);
                let _ = ledger.track_caps(&tools);
            }
            Op::Count(i) => {
                let name = NAMES[usize::from(*i) % NAMES.len()];
                let _ = ledger.try_count_tool(name, tools.cap(name));
            }
            Op::Time(t) => ledger.observe_time(*t),
        }
        for l in Limit::ALL {
            let expected: u64 = held
                .iter()
                .filter(|r| r.limit == l)
                .map(|r| r.amount)
                .fold(0, u64::saturating_add);
            assert!(ledger.reserved(l) >= expected.min(u64::MAX));
        }
    }
    let record = ledger.to_record();
    assert_eq!(Ledger::from_record(record.as_bytes()).as_ref(), Ok(&ledger));
    let mut flipped = record.as_bytes().to_vec();
    let bit = usize::from(input.flip) % (RECORD_LEN * 8);
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert!(
        Ledger::from_record(&flipped).is_err(),
        "a flipped bit decoded"
    );
});
