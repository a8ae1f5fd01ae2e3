//! The request metadata headers of Streamable HTTP (MCP 2026-07-28):
//! `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version` mirror the body, so
//! that something between can route on them; a gateway that reads the body
//! checks that they say what it says (`HeaderMismatch`, `-32020`, answered
//! `400`), or a router and the gate would act on different requests.
//!
//! A stateless request (its `_meta` names a protocol version) must carry
//! `MCP-Protocol-Version` equal to that version, `Mcp-Method` equal to its
//! `method`, and for `tools/call`, `resources/read` and `prompts/get`
//! `Mcp-Name` equal to `params.name` (`params.uri` for a resource), plain
//! or as the spec's base64 sentinel `=?base64?…?=`. A handshake-era request
//! is not asked for them, but one that carries `Mcp-Method` or `Mcp-Name`
//! must match as well. A batch (handshake era only) is not checked.
//! `Mcp-Param-*` headers, which mirror tool arguments the gateway has no
//! schema for, are passed on unchecked, as the spec asks of intermediaries
//! that do not recognize them.

use std::borrow::Cow;

use base64::Engine;
use hyper::header::HeaderMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::mcp::generation::PROTOCOL_VERSION_META;

/// The headers a request is checked against, read from its body.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    method: Option<Cow<'a, str>>,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    name: Option<Value>,
    uri: Option<Value>,
    #[serde(rename = "_meta")]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<Value>,
}

/// Why a request's headers do not match its body: the request's id (raw
/// JSON, `null` when it has none) and the message of the `-32020` error.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Mismatch {
    pub(super) id: String,
    pub(super) message: String,
}

/// Checks the metadata headers of a POST against its body. A body that
/// cannot be read here is left to the proxy, which answers it.
pub(super) fn check(headers: &HeaderMap, body: &[u8]) -> Result<(), Mismatch> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Ok(());
    }
    let Ok(head) = serde_json::from_slice::<Head<'_>>(body) else {
        return Ok(());
    };
    let id = head
        .id
        .and_then(crate::mcp::message::readable_id)
        .unwrap_or_else(|| "null".into());
    let mismatch = |message: String| Mismatch {
        id: id.clone(),
        message: format!("Header mismatch: {message}"),
    };
    let version = head
        .params
        .as_ref()
        .and_then(|p| p.meta.as_ref())
        .and_then(|m| m.version.as_ref())
        .and_then(Value::as_str);
    let stateless = version.is_some();
    let header = |name: &str| -> Result<Option<String>, Mismatch> {
        let all: Vec<_> = headers.get_all(name).iter().collect();
        match all.as_slice() {
            [] => Ok(None),
            [one] => one
                .to_str()
                .map(|v| Some(v.to_owned()))
                .map_err(|_| mismatch(format!("the {name} header is not visible ASCII"))),
            _ => Err(mismatch(format!("more than one {name} header"))),
        }
    };
    if let Some(version) = version {
        match header("mcp-protocol-version")? {
            None => {
                return Err(mismatch(format!(
                    "the MCP-Protocol-Version header is missing (the body's _meta says {version})"
                )))
            }
            Some(v) if v != version => {
                return Err(mismatch(format!(
                    "MCP-Protocol-Version header value '{v}' does not match body value '{version}' ({PROTOCOL_VERSION_META})"
                )))
            }
            Some(_) => {}
        }
    }
    let method = head.method.as_deref();
    match (header("mcp-method")?, method) {
        (None, Some(m)) if stateless => {
            return Err(mismatch(format!(
                "the Mcp-Method header is missing (the body's method is '{m}')"
            )))
        }
        (Some(h), Some(m)) if h != m => {
            return Err(mismatch(format!(
                "Mcp-Method header value '{h}' does not match body value '{m}'"
            )))
        }
        (Some(h), None) => {
            return Err(mismatch(format!(
                "Mcp-Method header value '{h}' on a body that is not a request"
            )))
        }
        _ => {}
    }
    let named = match method {
        Some("tools/call" | "prompts/get") => head.params.as_ref().and_then(|p| p.name.as_ref()),
        Some("resources/read") => head.params.as_ref().and_then(|p| p.uri.as_ref()),
        _ => None,
    };
    let name_header = header("mcp-name")?;
    match (name_header, named.and_then(Value::as_str)) {
        (None, Some(n)) if stateless => Err(mismatch(format!(
            "the Mcp-Name header is missing (the body names '{n}')"
        ))),
        (Some(h), body_name) => {
            let decoded = decode(&h).ok_or_else(|| {
                mismatch(format!(
                    "the Mcp-Name header '{h}' is not valid base64 of UTF-8 text"
                ))
            })?;
            match body_name {
                Some(n) if n == decoded => Ok(()),
                Some(n) => Err(mismatch(format!(
                    "Mcp-Name header value '{decoded}' does not match body value '{n}'"
                ))),
                None if stateless || named.is_some() || method.is_some_and(names) => Err(mismatch(
                    format!("Mcp-Name header value '{decoded}' but the body names nothing"),
                )),
                // A header this method does not define: not ours to judge.
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Whether `method` is one `Mcp-Name` names the target of.
fn names(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// A header value as the spec encodes it: plain, or `=?base64?B64?=` (the
/// base64 of UTF-8 text). `None`: a sentinel that does not decode.
fn decode(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        None => Some(value.to_owned()),
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_weather","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;

    #[test]
    fn a_stateless_request_needs_headers_that_say_what_its_body_says() {
        let good = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "get_weather"),
        ];
        assert_eq!(check(&headers(&good), CALL.as_bytes()), Ok(()));
        // The base64 sentinel decodes to the same name.
        let encoded = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?Z2V0X3dlYXRoZXI=?="),
        ];
        assert_eq!(check(&headers(&encoded), CALL.as_bytes()), Ok(()));
        for (i, (bad, want)) in [
            (
                vec![("mcp-method", "tools/call"), ("mcp-name", "get_weather")],
                "MCP-Protocol-Version header is missing",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2025-11-25"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "get_weather"),
                ],
                "'2025-11-25' does not match body value '2026-07-28'",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-name", "get_weather"),
                ],
                "Mcp-Method header is missing",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/list"),
                    ("mcp-name", "get_weather"),
                ],
                "Mcp-Method header value 'tools/list' does not match body value 'tools/call'",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                ],
                "Mcp-Name header is missing",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "rm_rf"),
                ],
                "Mcp-Name header value 'rm_rf' does not match body value 'get_weather'",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "=?base64?!!?="),
                ],
                "not valid base64",
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "get_weather"),
                    ("mcp-name", "get_weather"),
                ],
                "more than one mcp-name header",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let err = check(&headers(&bad), CALL.as_bytes()).expect_err("a mismatch");
            assert_eq!(err.id, "7", "{i}");
            assert!(
                err.message.starts_with("Header mismatch: "),
                "{i}: {}",
                err.message
            );
            assert!(err.message.contains(want), "{i}: {}", err.message);
        }
    }

    #[test]
    fn a_handshake_era_request_is_checked_only_for_the_headers_it_carries() {
        let old = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
        assert_eq!(check(&HeaderMap::new(), old.as_bytes()), Ok(()));
        assert_eq!(
            check(
                &headers(&[("mcp-method", "tools/call"), ("mcp-name", "echo")]),
                old.as_bytes()
            ),
            Ok(())
        );
        assert!(check(&headers(&[("mcp-name", "other")]), old.as_bytes()).is_err());
        assert!(check(&headers(&[("mcp-method", "ping")]), old.as_bytes()).is_err());
        // A batch, and a body the proxy will refuse, are not checked here.
        assert_eq!(check(&headers(&[("mcp-method", "x")]), b" [1]"), Ok(()));
        assert_eq!(check(&headers(&[("mcp-method", "x")]), b"{nope"), Ok(()));
        // A resource is named by its URI.
        let read = r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "resources/read"),
            ("mcp-name", "file:///a"),
        ]);
        assert_eq!(check(&h, read.as_bytes()), Ok(()));
    }
}
