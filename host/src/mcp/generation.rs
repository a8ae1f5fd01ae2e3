//! The two generations of MCP a request may speak, and what each wants of
//! the answers the gateway writes itself (`docs/MCP.md`, "Two generations").
//!
//! * **Handshake** (protocol versions up to 2025-11-25): a session opened
//!   by `initialize`, whose capabilities hold for the session; results
//!   carry no `resultType`; a server asks the client with requests of its
//!   own (`elicitation/create`).
//! * **Stateless** (2026-07-28 and later): no handshake; every request
//!   names its protocol version and the client's capabilities in
//!   `params._meta` ([`PROTOCOL_VERSION_META`],
//!   [`CLIENT_CAPABILITIES_META`]); every result carries `resultType`
//!   (`"complete"`, or `"input_required"` for an `InputRequiredResult`);
//!   a server needs input by answering the request with an
//!   `InputRequiredResult`, and the client retries it
//!   ([`crate::mcp::request_state`]).
//!
//! The generation is a property of each request, read from its own
//! `_meta`: a dual-era server may serve both on one connection, and the
//! gateway answers each request in the shapes of the generation it came in.

use serde_json::Value;

/// The `_meta` key of a stateless request's protocol version.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// The `_meta` key of a stateless request's client capabilities.
pub const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// The JSON-RPC error code of a Streamable HTTP request whose `Mcp-Method`,
/// `Mcp-Name` or `MCP-Protocol-Version` header is missing or does not match
/// its body (2026-07-28, `HeaderMismatch`).
pub const HEADER_MISMATCH: i64 = -32020;

/// The generation of MCP a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Generation {
    /// A session opened with `initialize` (2025-11-25 and earlier).
    #[default]
    Handshake,
    /// A stateless request carrying its protocol version in `_meta`
    /// (2026-07-28 and later).
    Stateless,
}

impl Generation {
    /// The generation of a request whose `params` are `params` (read): a
    /// string [`PROTOCOL_VERSION_META`] in `params._meta` makes it
    /// stateless (no handshake-era request carries that key).
    pub fn of_params(params: Option<&Value>) -> Self {
        match version_of(params) {
            Some(_) => Self::Stateless,
            None => Self::Handshake,
        }
    }

    /// The generation of one JSON-RPC message's text, read as
    /// [`Self::of_params`]; [`Self::Handshake`] when it cannot be read.
    pub fn of_text(text: &str) -> Self {
        let value: Option<Value> = serde_json::from_str(text).ok();
        Self::of_params(value.as_ref().and_then(|v| v.get("params")))
    }

    /// The `resultType` a complete result of this generation carries
    /// (none before 2026-07-28, whose schemas know no such member).
    pub fn complete(self) -> Option<&'static str> {
        match self {
            Self::Handshake => None,
            Self::Stateless => Some("complete"),
        }
    }
}

/// The protocol version a stateless request names in `params._meta`.
pub fn version_of(params: Option<&Value>) -> Option<&str> {
    params?.get("_meta")?.get(PROTOCOL_VERSION_META)?.as_str()
}

/// Whether a stateless request's client declared `capability` (such as
/// `elicitation`) in its `_meta`.
pub fn declares(params: Option<&Value>, capability: &str) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(CLIENT_CAPABILITIES_META))
        .and_then(|c| c.get(capability))
        .is_some_and(|c| !c.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_is_stateless_only_with_a_protocol_version_in_its_meta() {
        let modern = json!({"name": "echo", "_meta": {PROTOCOL_VERSION_META: "2026-07-28"}});
        assert_eq!(Generation::of_params(Some(&modern)), Generation::Stateless);
        for old in [
            json!({"name": "echo"}),
            json!({"name": "echo", "_meta": {"progressToken": 1}}),
            json!({"name": "echo", "_meta": {PROTOCOL_VERSION_META: 20260728}}),
        ] {
            assert_eq!(
                Generation::of_params(Some(&old)),
                Generation::Handshake,
                "{old}"
            );
        }
        assert_eq!(Generation::of_params(None), Generation::Handshake);
        assert_eq!(
            Generation::of_text(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
            ),
            Generation::Stateless
        );
        assert_eq!(Generation::of_text("not json"), Generation::Handshake);
    }

    #[test]
    fn capabilities_are_read_from_the_requests_own_meta() {
        let p = json!({"_meta": {CLIENT_CAPABILITIES_META: {"elicitation": {}}}});
        assert!(declares(Some(&p), "elicitation"));
        assert!(!declares(Some(&p), "sampling"));
        let null = json!({"_meta": {CLIENT_CAPABILITIES_META: {"elicitation": null}}});
        assert!(!declares(Some(&null), "elicitation"));
        assert!(!declares(None, "elicitation"));
    }
}
