//! The stored device run (`resume::decode`, `SPEC E` durable state, issue
//! 15) and audit entries on arbitrary bytes.
//!
//! Invariants: never panics; a record that decodes encodes back to exactly
//! the same bytes (one encoding per run), its duty windows re-based at any
//! instant at least a window after 0 (issue 15: the record does not depend
//! on the clock of the boot that wrote it); the same record with one bit
//! flipped never decodes (the CRC, or the checks before it); an audit entry
//! that decodes encodes back to the same bytes.
//!
//! With `seal`, the bytes are a record's body and the target appends its
//! CRC-32 (ISO-HDLC) before decoding, as the device's writer does: a
//! mutated body then passes the CRC and reaches the decoder's own checks
//! (lengths, ranges, the order of the duty windows' spans), which unsealed
//! input almost never does.
#![no_main]

use budgetgate_core::resume::{
    self, AuditEntry, AuditRecord, RunView, AUDIT_ENTRY_MAX, RUN_RECORD_MAX,
};
use budgetgate_core::TraceRow;
use libfuzzer_sys::fuzz_target;

const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// Input: `FLAGS FLIP(2, LE) NOW(4, LE) BYTES`. `FLAGS` bit 0: seal
/// `BYTES` (a body) with its CRC first; `FLIP` picks the bit flipped;
/// `NOW` is where the duty windows are re-based, past the longest window.
fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_at_checked(7) else {
        return;
    };
    let seal = head[0] & 1 == 1;
    let flip = u16::from_le_bytes([head[1], head[2]]);
    let now = u32::from_le_bytes([head[3], head[4], head[5], head[6]]);
    let mut sealed = body.to_vec();
    if seal {
        let crc = CRC.checksum(&sealed);
        sealed.extend_from_slice(&crc.to_le_bytes());
    }
    let bytes = &sealed[..];
    if let Ok(header) = resume::decode(bytes) {
        let rows: Vec<TraceRow> = resume::rows(bytes, &header).collect();
        assert_eq!(rows.len(), usize::from(header.rows));
        let now = (1u64 << 32) + u64::from(now);
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
        let bit = usize::from(flip) % (bytes.len() * 8);
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
