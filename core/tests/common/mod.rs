//! What the core's integration tests share.

use budgetgate_core::link;

/// `payload` sealed as one frame line: `*`, its CRC-32 in eight upper-case
/// hex digits, and the newline (`docs/PROTOCOL.md`).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut line = payload.to_vec();
    line.extend_from_slice(format!("*{:08X}\n", link::checksum(payload)).as_bytes());
    line
}
