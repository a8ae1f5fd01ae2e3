//! The agent link's frame decoder (`core/src/device/link.rs`) on an
//! arbitrary byte stream, against an independent model of the framing rules
//! (`docs/PROTOCOL.md`): split on `\n`; a line over `FRAME_MAX` bytes is
//! `TooLong` (a trailing `\r` counts toward the 1024 bytes, as the decoder
//! does; PROTOCOL.md does not say); one trailing `\r` is dropped; empty
//! lines are skipped; a frame is `PAYLOAD*XXXXXXXX` with the upper-case hex
//! CRC-32 (ISO-HDLC) of `PAYLOAD`.
//!
//! Also: every payload re-sealed with `seal` decodes to itself, and
//! `Request::parse` never panics on a payload.
#![no_main]

use budgetgate_core::link::{seal, FrameDecoder, FrameError, Request, CHECKSUM_LEN, FRAME_MAX};
use libfuzzer_sys::fuzz_target;

/// Bitwise CRC-32 (reflected, polynomial 0xEDB88320), as zlib computes it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn model_line(raw: &[u8]) -> Option<Result<Vec<u8>, FrameError>> {
    if raw.len() > FRAME_MAX {
        return Some(Err(FrameError::TooLong));
    }
    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
    if line.is_empty() {
        return None;
    }
    if line.len() < CHECKSUM_LEN || line[line.len() - CHECKSUM_LEN] != b'*' {
        return Some(Err(FrameError::MissingChecksum));
    }
    let (payload, suffix) = line.split_at(line.len() - CHECKSUM_LEN);
    let hex = &suffix[1..];
    if !hex
        .iter()
        .all(|h| h.is_ascii_digit() || (b'A'..=b'F').contains(h))
    {
        return Some(Err(FrameError::MalformedChecksum));
    }
    let sent = u32::from_str_radix(std::str::from_utf8(hex).expect("hex"), 16).expect("hex");
    if sent != crc32(payload) {
        return Some(Err(FrameError::BadChecksum));
    }
    Some(Ok(payload.to_vec()))
}

fuzz_target!(|data: &[u8]| {
    let mut decoder: FrameDecoder = FrameDecoder::new();
    let mut got: Vec<Result<Vec<u8>, FrameError>> = Vec::new();
    for &b in data {
        if let Some(r) = decoder.push(b) {
            got.push(r.map(<[u8]>::to_vec));
        }
    }
    // The model: every complete line (a trailing partial line yields nothing).
    let mut want = Vec::new();
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    lines.pop();
    for raw in lines {
        if let Some(r) = model_line(raw) {
            want.push(r);
        }
    }
    assert_eq!(got, want);
    for payload in got.iter().flatten() {
        let _ = Request::parse(payload);
        // Re-seal and decode again.
        let mut buf = vec![0u8; payload.len() + CHECKSUM_LEN + 1];
        buf[..payload.len()].copy_from_slice(payload);
        let n = seal(&mut buf, payload.len()).expect("room for the checksum");
        let mut again: FrameDecoder = FrameDecoder::new();
        let mut out = None;
        for &b in &buf[..n] {
            if let Some(r) = again.push(b) {
                out = Some(r.map(<[u8]>::to_vec));
            }
        }
        if payload.len() + CHECKSUM_LEN <= FRAME_MAX {
            assert_eq!(out, Some(Ok(payload.clone())));
        }
    }
});
