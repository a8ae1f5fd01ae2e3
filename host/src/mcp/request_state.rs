//! The `requestState` of the gateway's own approval questions in MCP
//! 2026-07-28 (`docs/MCP.md`, "Approval in the stateless protocol").
//!
//! A call that needs approval, made in the stateless protocol, is answered
//! with an `InputRequiredResult` carrying an elicitation request and a
//! `requestState`; the client retries the call with its answer and the
//! state echoed. The state is written by [`Sealer::seal`] and read back by
//! [`Sealer::open`]:
//!
//! ```text
//! bg1.PAYLOAD.MAC
//! PAYLOAD = base64url(compact JSON {"n":NONCE,"t":TOOL,"a":ARGS,"b":BINDING,"d":DEADLINE_MS})
//! MAC     = base64url(HMAC-SHA256(KEY, "bg1." + PAYLOAD))
//! ```
//!
//! `ARGS` is the SHA-256 (hex) of the call's arguments as canonical JSON
//! ([`arguments_digest`]: object keys sorted, compact), `BINDING` the
//! gateway's session the question was asked on, `NONCE` the question's
//! number in this process, `KEY` 32 bytes drawn from the operating system's
//! random source when the gateway starts, never stored or sent. A client
//! that edits any byte of the state (to change the tool, the arguments, the
//! deadline, or to make one up) cannot give it a valid MAC without the key:
//! the gateway refuses it as forged. What a state says is also checked
//! against what the gateway holds (the nonce is a question still awaiting
//! its retry, once), so a state is used at most once and never after its
//! deadline. A gateway that restarts draws a new key: states of the run
//! before are refused (forged), and the reservations of their calls are
//! counted as spent when they expire, as any dead gateway's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The prefix of every state the gateway writes (its format's version).
pub const PREFIX: &str = "bg1.";

/// The key of the gateway's elicitation request in `inputRequests`, and of
/// the client's answer in `inputResponses`.
pub const INPUT_KEY: &str = "budgetgate_approval";

/// Longest state read (a longer one is refused unread).
pub const MAX_STATE: usize = 4096;

/// What a state binds a call to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The question's number in this gateway process.
    #[serde(rename = "n")]
    pub nonce: u64,
    /// The tool.
    #[serde(rename = "t")]
    pub tool: String,
    /// [`arguments_digest`] of the call's arguments.
    #[serde(rename = "a")]
    pub arguments: String,
    /// The gateway's session the question was asked on.
    #[serde(rename = "b")]
    pub binding: String,
    /// When the question stops being answerable (the gateway's clock, ms).
    #[serde(rename = "d")]
    pub deadline_ms: u64,
}

/// Why a state cannot be read as one of this gateway's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// Not of the gateway's format (or longer than [`MAX_STATE`]).
    Malformed,
    /// Its MAC does not verify under this process's key: edited, made up,
    /// or written by an earlier run of the gateway.
    Forged,
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "its requestState is not one the gateway wrote",
            Self::Forged => "its requestState does not carry the gateway's signature (altered, made up, or from before the gateway restarted)",
        })
    }
}

impl std::error::Error for StateError {}

/// Seals and opens states with a key of this process.
pub struct Sealer {
    key: [u8; 32],
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer { key: <secret> }")
    }
}

impl Sealer {
    /// A sealer with a key from the operating system's random source; an
    /// error when none can be drawn.
    pub fn new() -> Result<Self, String> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key)
            .map_err(|e| format!("no random key for approval states ({e})"))?;
        Ok(Self { key })
    }

    /// A sealer with the key `key` (tests).
    pub fn with_key(key: [u8; 32]) -> Self {
        Self { key }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!())
    }

    /// The state of `claims`: `bg1.PAYLOAD.MAC`.
    pub fn seal(&self, claims: &Claims) -> String {
        let payload = B64.encode(serde_json::to_vec(claims).unwrap_or_default());
        let signed = format!("{PREFIX}{payload}");
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        format!("{signed}.{}", B64.encode(mac.finalize().into_bytes()))
    }

    /// The claims of `state`, when it is one this process sealed (the MAC
    /// compared in constant time before the payload is read).
    pub fn open(&self, state: &str) -> Result<Claims, StateError> {
        if state.len() > MAX_STATE || !state.starts_with(PREFIX) {
            return Err(StateError::Malformed);
        }
        let (signed, tag) = state.rsplit_once('.').ok_or(StateError::Malformed)?;
        let tag = B64.decode(tag).map_err(|_| StateError::Forged)?;
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        mac.verify_slice(&tag).map_err(|_| StateError::Forged)?;
        let payload = B64
            .decode(&signed[PREFIX.len()..])
            .map_err(|_| StateError::Malformed)?;
        serde_json::from_slice(&payload).map_err(|_| StateError::Malformed)
    }
}

/// The SHA-256 (hex) of `arguments` as canonical JSON: object keys sorted
/// (by their UTF-8 bytes) at every depth, compact, strings and numbers as
/// `serde_json` writes them; so `{"a":1,"b":2}` and `{"b":2,"a":1}` are one
/// call, and any other change of a value is another.
pub fn arguments_digest(arguments: &Value) -> String {
    let mut hasher = Sha256::new();
    canonical(arguments, &mut hasher);
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn canonical(value: &Value, out: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.update(b"{");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                out.update(Value::from(k.as_str()).to_string().as_bytes());
                out.update(b":");
                if let Some(v) = map.get(k) {
                    canonical(v, out);
                }
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(v, out);
            }
            out.update(b"]");
        }
        other => out.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> Claims {
        Claims {
            nonce: 7,
            tool: "send_mail".into(),
            arguments: arguments_digest(&json!({"to": "a@b", "n": [1, {"y": 2, "x": 1}]})),
            binding: "e2e/c1".into(),
            deadline_ms: 1_000,
        }
    }

    #[test]
    fn a_sealed_state_opens_to_its_claims_and_only_with_its_key() {
        let sealer = Sealer::with_key([7; 32]);
        let state = sealer.seal(&claims());
        assert!(state.starts_with(PREFIX));
        assert_eq!(sealer.open(&state), Ok(claims()));
        // Another process's key (a restart): forged.
        assert_eq!(
            Sealer::with_key([8; 32]).open(&state),
            Err(StateError::Forged)
        );
    }

    #[test]
    fn any_edit_of_a_state_is_refused_as_forged_or_malformed() {
        let sealer = Sealer::with_key([7; 32]);
        let state = sealer.seal(&claims());
        for at in PREFIX.len()..state.len() {
            let mut bytes = state.clone().into_bytes();
            if bytes[at] == b'.' {
                continue;
            }
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(bytes).expect("ASCII");
            assert!(sealer.open(&edited).is_err(), "edited at {at}: {edited}");
        }
        // A state made up with other claims and no key: its MAC fails.
        let mut other = claims();
        other.tool = "rm".into();
        let forged = Sealer::with_key([9; 32]).seal(&other);
        assert_eq!(sealer.open(&forged), Err(StateError::Forged));
        for bad in ["", "bg1.", "bg1..", "bg2.x.y", "server-state"] {
            assert!(sealer.open(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            sealer.open(&format!("{PREFIX}{}", "A".repeat(MAX_STATE))),
            Err(StateError::Malformed)
        );
    }

    #[test]
    fn the_arguments_digest_ignores_key_order_and_nothing_else() {
        let a = arguments_digest(&json!({"a": 1, "b": {"c": [1, 2], "d": "x"}}));
        let b = arguments_digest(&json!({"b": {"d": "x", "c": [1, 2]}, "a": 1}));
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        for other in [
            json!({"a": 2, "b": {"c": [1, 2], "d": "x"}}),
            json!({"a": 1, "b": {"c": [2, 1], "d": "x"}}),
            json!({"a": 1, "b": {"c": [1, 2], "d": "x", "e": null}}),
            json!({"a": "1", "b": {"c": [1, 2], "d": "x"}}),
        ] {
            assert_ne!(arguments_digest(&other), a, "{other}");
        }
    }
}
