//! Claude Code's transcripts (session logs) as every front-end reads them
//! (`SPEC E`: one rule book): one line reader (`claude_line.rs`), what a
//! line says of its response ([`mod@line`]), and which lines are one model
//! response ([`OpenResponse`]). The Claude Code hook reads a live session's
//! transcript a few lines at a time ([`crate::hook`], through
//! [`line::fields`]); `replay` reads a whole log
//! (`replay/read/claude_code.rs`). Both read and decide here.
//!
//! Claude Code writes one response over several lines (a line per content
//! block, each repeating the response's `message.id`, `requestId` and
//! usage so far), with the results of its tool calls between them. A line
//! continues the response open on its thread when it has the same
//! `message.id` and the same `requestId`, and no user line came between
//! them other than results of this response's calls; without a
//! `requestId`, no user line at all may come between (stream-json output,
//! which has none, excepted). Anything else is another model call: when in
//! doubt a line is counted as a new response (over-counting is safe,
//! under-counting is not).

use serde::{Deserialize, Serialize};

pub(crate) mod claude_line;
pub mod line;

/// Most call ids of one open response kept to tell its results apart (a
/// response with more is still read; a user line answering a call past
/// these is then taken as a user message: the next line is a new response,
/// the safe side).
pub const MAX_OPEN_CALLS: usize = 4096;

/// The response later lines of one thread may continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenResponse {
    /// Its `message.id`.
    pub message_id: String,
    /// Its line's `requestId`, if it has one.
    pub request_id: Option<String>,
    /// A user line came after its last line.
    pub user_since: bool,
    /// A user line came that is not only results of its calls.
    pub broken: bool,
    /// Stream-json output: no `requestId`, so a user line of only this
    /// response's results between its lines does not end it.
    pub stream_json: bool,
}

impl OpenResponse {
    /// A response just read, with these ids.
    pub fn new(message_id: &str, request_id: Option<&str>, stream_json: bool) -> Self {
        Self {
            message_id: message_id.to_owned(),
            request_id: request_id.map(str::to_owned),
            user_since: false,
            broken: false,
            stream_json,
        }
    }

    /// Whether an assistant line with these ids continues this response
    /// (see the module docs).
    pub fn continued_by(&self, message_id: &str, request_id: Option<&str>) -> bool {
        self.message_id == message_id
            && self.request_id.as_deref() == request_id
            && !self.broken
            && (request_id.is_some() || self.stream_json || !self.user_since)
    }

    /// A user line came on this response's thread; `only_results` tells
    /// whether it holds only results of this response's calls
    /// ([`only_results_of`]).
    pub fn user_line(&mut self, only_results: bool) {
        self.user_since = true;
        if !only_results {
            self.broken = true;
        }
    }

    /// Whether a user line can still change this response's fate: once
    /// broken, no later line continues it.
    pub fn watches_user_lines(&self) -> bool {
        !self.broken
    }
}

/// Whether a user line's `message.content` holds only `tool_result` blocks
/// answering calls for which `is_call` holds. `blocks` gives, per block,
/// its `tool_use_id` when the block is a `tool_result` with one (`None`
/// for any other block); `None` when the content is not an array. An
/// empty array is not only results.
pub fn only_results_of<'a>(
    blocks: Option<impl IntoIterator<Item = Option<&'a str>>>,
    is_call: impl Fn(&str) -> bool,
) -> bool {
    let Some(blocks) = blocks else {
        return false;
    };
    let mut any = false;
    for block in blocks {
        match block {
            Some(id) if is_call(id) => any = true,
            _ => return false,
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_continues_a_response_only_with_both_ids_and_no_user_message_between() {
        let mut open = OpenResponse::new("m1", Some("r1"), false);
        assert!(open.continued_by("m1", Some("r1")));
        assert!(!open.continued_by("m1", Some("r2")));
        assert!(!open.continued_by("m1", None));
        assert!(!open.continued_by("m2", Some("r1")));
        // Its results between its lines do not end it.
        open.user_line(true);
        assert!(open.continued_by("m1", Some("r1")));
        // A user message does, for good.
        open.user_line(false);
        assert!(!open.continued_by("m1", Some("r1")));
        assert!(!open.watches_user_lines());
        open.user_line(true);
        assert!(!open.continued_by("m1", Some("r1")));
    }

    #[test]
    fn without_a_request_id_any_user_line_ends_a_response_but_in_stream_json() {
        let mut log = OpenResponse::new("m1", None, false);
        assert!(log.continued_by("m1", None));
        log.user_line(true);
        assert!(!log.continued_by("m1", None));
        let mut stream = OpenResponse::new("m1", None, true);
        stream.user_line(true);
        assert!(stream.continued_by("m1", None));
        stream.user_line(false);
        assert!(!stream.continued_by("m1", None));
    }

    #[test]
    fn only_results_of_the_responses_calls_are_only_results() {
        let calls = |id: &str| id == "t1" || id == "t2";
        assert!(only_results_of(Some([Some("t1")]), calls));
        assert!(only_results_of(Some([Some("t2"), Some("t1")]), calls));
        assert!(!only_results_of(Some([Some("t1"), Some("t3")]), calls));
        assert!(!only_results_of(Some([Some("t1"), None]), calls));
        assert!(!only_results_of(Some([] as [Option<&str>; 0]), calls));
        assert!(!only_results_of(None::<[Option<&str>; 0]>, calls));
    }
}
