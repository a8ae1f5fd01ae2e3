//! A tool call's fingerprint from its JSON input (`SPEC C`): what the
//! repetition rule compares, the same for every front-end.

use budgetgate_core::turn::{ArgsFingerprint, FingerprintBuilder};
use serde_json::Value;

/// Fingerprints a JSON value's canonical form (`SPEC C`); `None` if it
/// nests deeper than 128 levels.
///
/// `serde_json` reads `-0` as the float `-0.0`, so the literal is lost:
/// Python reads `-0` as the integer 0 (`json.dumps` writes `0`, a repeat
/// of `0`) but `-0.0` and `-0e0` as the float `-0.0` (written `-0.0`, not a
/// repeat of `0`). A value `-0.0` is fingerprinted as the integer 0, so a
/// `-0` repeating `0` is counted as the reference counts it; a `-0.0`
/// after a `0` is then counted as a repeat too, which the reference would
/// not count: stricter, never looser.
pub fn fingerprint_value(value: &Value) -> Option<ArgsFingerprint> {
    fingerprint_walk(value, false).0
}

/// [`fingerprint_value`], with every float `-0.0` read as the float `0.0`
/// when `unsigned_zeros` (as `serde_json` compares them), otherwise as the
/// integer 0; also says whether a `-0.0` was met (before the walk ends,
/// when too deep).
pub(crate) fn fingerprint_walk(
    value: &Value,
    unsigned_zeros: bool,
) -> (Option<ArgsFingerprint>, bool) {
    fn walk(
        b: &mut FingerprintBuilder<128>,
        v: &Value,
        unsigned_zeros: bool,
        negative_zero: &mut bool,
    ) -> Option<()> {
        match v {
            Value::Null => b.null().ok(),
            Value::Bool(x) => b.bool(*x).ok(),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    b.i64(i).ok()
                } else if let Some(u) = n.as_u64() {
                    b.u64(u).ok()
                } else {
                    let x = n.as_f64()?;
                    if x == 0.0 && x.is_sign_negative() {
                        *negative_zero = true;
                        if unsigned_zeros {
                            return b.f64(0.0).ok();
                        }
                        // `-0` as Python reads it (see `fingerprint_value`).
                        return b.i64(0).ok();
                    }
                    b.f64(x).ok()
                }
            }
            Value::String(s) => b.str(s).ok(),
            Value::Array(items) => {
                b.begin_array().ok()?;
                for item in items {
                    walk(b, item, unsigned_zeros, negative_zero)?;
                }
                b.end_array().ok()
            }
            Value::Object(map) => {
                b.begin_object().ok()?;
                for (k, item) in map {
                    b.key(k).ok()?;
                    walk(b, item, unsigned_zeros, negative_zero)?;
                }
                b.end_object().ok()
            }
        }
    }
    let mut builder = FingerprintBuilder::<128>::new();
    let mut negative_zero = false;
    let fingerprint = walk(&mut builder, value, unsigned_zeros, &mut negative_zero)
        .and_then(|()| builder.finish().ok());
    (fingerprint, negative_zero)
}
