//! The stored device run (`resume::decode`, `SPEC E` durable state, issue
//! 15) and audit entries on arbitrary bytes.
//!
//! Invariants: never panics; a record that decodes encodes back to exactly
//! the same bytes (one encoding per run), its duty windows re-based at any
//! instant at least a window after 0 (issue 15: the record does not depend
//! on the clock of the boot that wrote it); the same record with one bit
//! flipped never decodes (the CRC, or the checks before it); an audit entry
//! that decodes encodes back to the same bytes.
#![no_main]

use budgetgate_core::resume::{
    self, AuditEntry, AuditRecord, RunView, AUDIT_ENTRY_MAX, RUN_RECORD_MAX,
};
use budgetgate_core::TraceRow;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    bytes: Vec<u8>,
    flip: u16,
    /// Where the duty windows are re-based, past the longest window.
    now: u32,
}

fuzz_target!(|input: Input| {
    let bytes = &input.bytes[..];
    if let Ok(header) = resume::decode(bytes) {
        let rows: Vec<TraceRow> = resume::rows(bytes, &header).collect();
        assert_eq!(rows.len(), usize::from(header.rows));
        let now = (1u64 << 32) + u64::from(input.now);
        let duty = resume::duty_windows(bytes, &header, now);
        assert_eq!(duty.iter().flatten().count(), usize::from(header.duty));
        let view = RunView {
            run: header.run,
            phase: header.phase,
            stage: header.stage,
            status: header.status,
            used_ms: header.used_ms,
            limits: header.limits,
            tool_attempts: header.tool_attempts,
            trace: &rows,
            duty: &duty,
            duty_clock_ms: now,
        };
        let mut out = [0u8; RUN_RECORD_MAX];
        let n = view.encode(&mut out).expect("a decoded run encodes");
        assert_eq!(&out[..n], bytes, "not canonical");
        let mut flipped = bytes.to_vec();
        let bit = usize::from(input.flip) % (bytes.len() * 8);
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(resume::decode(&flipped).is_err(), "a flipped bit decoded");
    }
    if let Ok(entry) = AuditRecord::decode(bytes) {
        let again = AuditEntry {
            run: entry.run,
            step: entry.step,
            call_id: &entry.call_id,
            tool: &entry.tool,
            verdict: entry.verdict,
            time_ms: entry.time_ms,
        };
        let mut out = [0u8; AUDIT_ENTRY_MAX];
        let n = again.encode(&mut out).expect("a decoded entry encodes");
        assert_eq!(&out[..n], bytes, "audit entry not canonical");
    }
});
