use super::*;

#[test]
fn the_gated_paths_are_the_three_model_calls_and_nothing_else() {
    assert_eq!(Api::of_path("/v1/messages"), Some(Api::Messages));
    assert_eq!(Api::of_path("/v1/messages/"), Some(Api::Messages));
    assert_eq!(Api::of_path("/v1/chat/completions"), Some(Api::Chat));
    assert_eq!(Api::of_path("/v1/responses"), Some(Api::Responses));
    assert_eq!(Api::of_path("/v1/messages/count_tokens"), None);
    assert_eq!(Api::of_path("/v1/models"), None);
    assert_eq!(Api::of_path("/v1/messagesx"), None);
    // Written another way: the same call once cleaned up.
    for path in [
        "/v1/./messages",
        "/v1/x/../messages",
        "/v1/%2e/messages",
        "/v1//messages",
        "/V1/Messages",
        "/v1/%6d%65ssages",
        "//v1/messages",
        "/v1\\messages",
    ] {
        assert_eq!(Api::loosely(path), Some(Api::Messages), "{path}");
        assert_eq!(Api::of_path(path), None, "{path}");
    }
    assert_eq!(Api::loosely("/v1/./chat/completions"), Some(Api::Chat));
    assert_eq!(Api::loosely("/v1/responses/."), Some(Api::Responses));
    assert_eq!(Api::loosely("/v1/messages/count_tokens"), None);
    assert_eq!(
        Api::loosely("/v1/messages/%"),
        Some(Api::Messages).filter(|_| false)
    );
    assert_eq!(Api::loosely("/v1/models"), None);
    for api in [Api::Messages, Api::Chat, Api::Responses] {
        assert_eq!(Api::of_path(api.path()), Some(api));
    }
    // Under any prefix (the upstream's own, `--upstream https://host/v1`,
    // then the request's: a client's base URL without `/v1`, a gateway's
    // layout), by how the path ends.
    for (path, api) in [
        ("/v1/chat/completions", Api::Chat),
        ("/v1beta/openai/chat/completions", Api::Chat),
        ("/openai/deployments/gpt4/chat/completions", Api::Chat),
        ("/v1/v1/messages", Api::Messages),
        ("/api/v1/responses/", Api::Responses),
    ] {
        assert_eq!(Api::of_path(path), Some(api), "{path}");
    }
    // A prefix written another way is refused as the call is.
    assert_eq!(
        Api::of_path("/openai/deployments/GPT4/chat/completions"),
        None
    );
    assert_eq!(
        Api::loosely("/openai/deployments/GPT4/chat/completions"),
        Some(Api::Chat)
    );
}

#[test]
fn a_request_is_read_for_its_model_bound_and_stream() {
    let body = br#"{"model":"claude-x","max_tokens":1024,"stream":true,"messages":[]}"#;
    let r = read_request(Api::Messages, body).unwrap();
    assert_eq!(r.model, "claude-x");
    assert_eq!(r.max_output, Some(1024));
    assert!(r.stream);
    assert_eq!(r.input_bound, body.len() as u64 + INPUT_OVERHEAD_TOKENS);
    assert_eq!(r.worst_case(), Some(r.input_bound + 1024));

    let chat = br#"{"model":"gpt","max_tokens":5,"max_completion_tokens":7,"stream_options":{"include_usage":true}}"#;
    let r = read_request(Api::Chat, chat).unwrap();
    assert_eq!(
        (r.max_output, r.stream, r.include_usage),
        (Some(7), false, true)
    );
    let r = read_request(Api::Chat, br#"{"model":"gpt","max_tokens":5}"#).unwrap();
    assert_eq!(r.max_output, Some(5));
    let r = read_request(Api::Responses, br#"{"model":"gpt","max_output_tokens":9}"#).unwrap();
    assert_eq!(r.max_output, Some(9));
    assert_eq!(r.worst_case(), Some(r.input_bound + 9));
    let r = read_request(Api::Responses, br#"{"model":"gpt"}"#).unwrap();
    assert_eq!(r.worst_case(), None);
}

#[test]
fn a_request_that_cannot_be_read_names_its_field() {
    let err = |api, body: &[u8]| read_request(api, body).unwrap_err();
    assert!(err(Api::Messages, b"{").contains("cannot be read"));
    assert!(err(Api::Messages, b"[]").contains("a JSON object"));
    // Given twice, or differing from a field the gate reads only in case
    // (a hostile trial's `MAX_TOKENS`, which Go's JSON reader would take).
    assert!(err(Api::Messages, br#"{"model":"m","model":"n"}"#).contains("`model` is given twice"));
    for body in [
        &br#"{"model":"m","max_tokens":10,"MAX_TOKENS":100000}"#[..],
        br#"{"model":"m","Max_Tokens":100000}"#,
        br#"{"Model":"m","model":"m"}"#,
        // The Kelvin sign and the long s, which Go folds to `k` and `s`
        // (a hostile trial).
        "{\"model\":\"m\",\"max_to\u{212A}ens\":100000}".as_bytes(),
        "{\"model\":\"m\",\"max_to\\u212aens\":100000}".as_bytes(),
        "{\"model\":\"m\",\"\u{17F}tream\":true}".as_bytes(),
    ] {
        assert!(
            err(Api::Messages, body).contains("only in case"),
            "{}",
            err(Api::Messages, body)
        );
    }
    assert!(err(Api::Chat, br#"{"model":"g","Max_Completion_Tokens":9}"#).contains("only in case"));
    assert!(read_request(Api::Messages, br#"{"model":"m","Messages":[],"x":1,"x":2}"#).is_ok());
    assert!(err(Api::Messages, br#"{"max_tokens":1}"#).contains("names no `model`"));
    assert!(err(Api::Messages, br#"{"model":""}"#).contains("`model`"));
    assert!(err(Api::Messages, br#"{"model":"m","max_tokens":-1}"#).contains("`max_tokens`"));
    assert!(err(Api::Messages, br#"{"model":"m","stream":"yes"}"#).contains("`stream`"));
    assert!(
        err(Api::Chat, br#"{"model":"m","max_completion_tokens":1.5}"#)
            .contains("`max_completion_tokens`")
    );
}

#[test]
fn every_media_block_adds_its_tokens_to_the_input_bound() {
    let body = br#"{"content":[{"type":"image","source":{}},{"type": "document"},{"type":"input_image"}]}"#;
    assert_eq!(
        input_bound(body),
        body.len() as u64 + INPUT_OVERHEAD_TOKENS + 3 * MEDIA_TOKENS
    );
}

#[test]
fn include_usage_is_added_and_other_stream_options_kept() {
    let out =
        with_include_usage(br#"{"model":"m","stream":true,"stream_options":{"x":1}}"#).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["stream_options"], json!({"x": 1, "include_usage": true}));
    let out = with_include_usage(br#"{"model":"m","stream_options":null}"#).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["stream_options"], json!({"include_usage": true}));
}

#[test]
fn a_whole_answer_reports_its_usage_in_each_api() {
    let messages = br#"{"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2,"cache_creation_input_tokens":1}}"#;
    assert_eq!(
        answer_usage(Api::Messages, messages)
            .unwrap()
            .map(|u| u.total()),
        Some(18)
    );
    let chat = br#"{"usage":{"prompt_tokens":10,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":3}}}"#;
    let u = answer_usage(Api::Chat, chat).unwrap().unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
        (7, 3, 4)
    );
    let responses = br#"{"usage":{"input_tokens":8,"output_tokens":2}}"#;
    assert_eq!(
        answer_usage(Api::Responses, responses)
            .unwrap()
            .map(|u| u.total()),
        Some(10)
    );
    assert_eq!(answer_usage(Api::Messages, b"{}").unwrap(), None);
    assert!(answer_usage(Api::Messages, b"nope").is_err());
}

#[test]
fn a_messages_stream_reports_the_largest_of_each_count() {
    let mut s = StreamUsage::default();
    let start = r#"{"type":"message_start","message":{"usage":{"input_tokens":100,"output_tokens":1,"cache_read_input_tokens":50}}}"#;
    assert_eq!(s.read_event(Api::Messages, start, false), EventUse::Relay);
    s.read_event(
        Api::Messages,
        r#"{"type":"content_block_delta","delta":{}}"#,
        false,
    );
    s.read_event(
        Api::Messages,
        r#"{"type":"message_delta","usage":{"output_tokens":40}}"#,
        false,
    );
    assert!(!s.ended);
    s.read_event(Api::Messages, r#"{"type":"message_stop"}"#, false);
    assert!(s.ended);
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cache_read_input_tokens),
        (100, 40, 50)
    );
}

#[test]
fn a_chat_stream_usage_chunk_is_withheld_only_when_the_proxy_asked_for_it() {
    let chunk = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}"#;
    let mut s = StreamUsage::default();
    assert_eq!(s.read_event(Api::Chat, chunk, true), EventUse::Withhold);
    assert_eq!(s.usage.map(|u| u.total()), Some(12));
    let mut s = StreamUsage::default();
    assert_eq!(s.read_event(Api::Chat, chunk, false), EventUse::Relay);
    // A content chunk is never withheld.
    let content = r#"{"choices":[{"delta":{"content":"hi"}}]}"#;
    assert_eq!(s.read_event(Api::Chat, content, true), EventUse::Relay);
    assert_eq!(s.read_event(Api::Chat, "[DONE]", true), EventUse::Relay);
    assert!(s.ended);
}

#[test]
fn a_responses_stream_reports_at_its_completion() {
    let mut s = StreamUsage::default();
    s.read_event(
        Api::Responses,
        r#"{"type":"response.output_text.delta","delta":"x"}"#,
        false,
    );
    assert_eq!(s.usage, None);
    s.read_event(
        Api::Responses,
        r#"{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":6}}}"#,
        false,
    );
    assert_eq!(s.usage.map(|u| u.total()), Some(11));
    assert!(s.ended);
}

#[test]
fn refusals_take_each_providers_error_shape() {
    let body = refusal_body(Api::Messages, Refused::Budget, "tokens", "spent");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "error": {"type": "billing_error", "message": "spent"}})
    );
    let body = refusal_body(Api::Chat, Refused::Budget, "tokens", "spent");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "tokens");
    assert_eq!(v["error"]["type"], "budget_exceeded");
    assert_eq!(
        [
            Refused::Budget,
            Refused::Invalid,
            Refused::Forbidden,
            Refused::Upstream,
            Refused::Unavailable
        ]
        .map(Refused::status),
        [402, 400, 403, 502, 503]
    );
    let body = refusal_body(Api::Responses, Refused::Invalid, "x", "bad");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

mod history {
    use super::super::history::tool_history;
    use super::super::Api;
    use serde_json::json;

    fn read(api: Api, body: serde_json::Value) -> super::super::history::History {
        tool_history(api, body.to_string().as_bytes()).expect("history")
    }

    #[test]
    fn messages_calls_results_and_errors_are_read_by_id() {
        let h = read(
            Api::Messages,
            json!({"messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "build", "input": {}},
                    {"type": "tool_use", "id": "t2", "name": "bad name!", "input": {}},
                    {"type": "tool_use", "id": "t3", "name": "ls", "input": {"d": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t3", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": true},
                    {"type": "tool_result", "tool_use_id": "nobody", "content": "?"}]}]}),
        );
        // The call no engine could let through (its name) is left out.
        let names: Vec<_> = h.calls.iter().map(|m| m.name.as_str().to_owned()).collect();
        assert_eq!(names, ["build", "ls"]);
        assert_eq!(h.latest, Some(0));
        let build = h.calls[0].outcome.expect("build's result");
        assert!(build.error);
        assert!(!h.calls[1].outcome.expect("ls's result").error);
        // A person's message after the results: nothing to look at.
        let mut body = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]},
            {"role": "user", "content": "stop that"}]});
        assert_eq!(read(Api::Messages, body.clone()).latest, None);
        body["messages"].as_array_mut().expect("messages").pop();
        assert_eq!(read(Api::Messages, body).latest, Some(0));
    }

    #[test]
    fn openai_shapes_group_a_responses_calls_into_turns() {
        let h = read(
            Api::Chat,
            json!({"messages": [
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "function": {"name": "ls", "arguments": "not json"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c2", "function": {"name": "ls", "arguments": "not json"}}]},
                {"role": "tool", "tool_call_id": "c2", "content": "a"}]}),
        );
        assert_eq!(h.calls.len(), 2);
        assert_eq!(h.calls[0].call, h.calls[1].call, "the same text arguments");
        assert_eq!(
            (h.calls[0].turn, h.calls[1].turn, h.latest),
            (0, 1, Some(1))
        );
        let h = read(
            Api::Responses,
            json!({"input": [
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "f1", "name": "a", "arguments": "{}"},
                {"type": "function_call", "call_id": "f2", "name": "b", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "f1", "output": "x"},
                {"type": "function_call_output", "call_id": "f2", "output": "y"},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "f3", "name": "a", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "f3", "output": "x"}]}),
        );
        let turns: Vec<_> = h.calls.iter().map(|m| m.turn).collect();
        assert_eq!((turns, h.latest), (vec![0, 0, 1], Some(1)));
        // Not JSON at all: an error (the proxy refuses).
        assert!(tool_history(Api::Chat, b"{").is_err());
        // A string input (no items) has no calls.
        assert_eq!(read(Api::Responses, json!({"input": "hi"})).latest, None);
    }

    /// The model's text answers are recorded per response in each API: the
    /// same text three times in a row completes `same_answer = 3`; a
    /// response with a tool call, or another text, starts again.
    #[test]
    fn text_answers_are_recorded_per_response() {
        use budgetgate_core::engine::loops::{LoopRules, Pattern};
        let rules = LoopRules {
            same_answer: Some(3),
            ..LoopRules::OFF
        };
        let messages = |answers: &[serde_json::Value]| {
            let mut m = vec![json!({"role": "user", "content": "go"})];
            for a in answers {
                m.push(json!({"role": "assistant", "content": a}));
                m.push(json!({"role": "user", "content": "continue"}));
            }
            json!({ "messages": m })
        };
        let same = json!("I cannot find it.");
        let blocks =
            json!([{"type": "text", "text": "I cannot "}, {"type": "text", "text": "find it."}]);
        let call = json!([{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]);
        // Blocks and a string of the same text are the same answer.
        let h = read(
            Api::Messages,
            messages(&[same.clone(), blocks.clone(), same.clone()]),
        );
        let found = h.answers.check(&rules).expect("three in a row");
        assert_eq!((found.pattern, found.times), (Pattern::SameAnswer, 3));
        assert_eq!(
            read(Api::Messages, messages(&[same.clone(), same.clone()]))
                .answers
                .check(&rules),
            None
        );
        let broken = messages(&[same.clone(), same.clone(), call, same.clone()]);
        assert_eq!(read(Api::Messages, broken).answers.check(&rules), None);
        let other = messages(&[same.clone(), json!("Found it."), same.clone()]);
        assert_eq!(read(Api::Messages, other).answers.check(&rules), None);
        // The request ends with the prompt the answers followed: no new
        // start; with another one: a new start.
        let h = read(
            Api::Messages,
            messages(&[same.clone(), same.clone(), same.clone()]),
        );
        assert!(!h.new_prompt);
        let mut other = messages(&[same.clone(), same.clone(), same.clone()]);
        if let Some(last) = other["messages"].as_array_mut().and_then(|m| m.last_mut()) {
            last["content"] = json!("something else");
        }
        assert!(read(Api::Messages, other).new_prompt);
        // Chat: string content, or parts; a message with tool_calls breaks.
        let chat = |with_call: bool| {
            let mut m = Vec::new();
            for i in 0..3 {
                let mut a =
                    json!({"role": "assistant", "content": [{"type": "text", "text": "no"}]});
                if with_call && i == 1 {
                    a["tool_calls"] =
                        json!([{"id": "c", "function": {"name": "ls", "arguments": "{}"}}]);
                }
                m.push(a);
                m.push(json!({"role": "user", "content": "again"}));
            }
            json!({ "messages": m })
        };
        assert!(read(Api::Chat, chat(false)).answers.check(&rules).is_some());
        assert_eq!(read(Api::Chat, chat(true)).answers.check(&rules), None);
        // Responses: a response is its run of output items.
        let said = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "no"}]});
        let user = json!({"role": "user", "content": "again"});
        let input = vec![
            said.clone(),
            user.clone(),
            said.clone(),
            user.clone(),
            said.clone(),
            user.clone(),
        ];
        assert!(read(Api::Responses, json!({ "input": input }))
            .answers
            .check(&rules)
            .is_some());
        let with_call = vec![
            said.clone(),
            user.clone(),
            said.clone(),
            json!({"type": "function_call", "call_id": "f", "name": "ls", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "f", "output": "x"}),
            said.clone(),
            user,
        ];
        assert_eq!(
            read(Api::Responses, json!({ "input": with_call }))
                .answers
                .check(&rules),
            None
        );
    }

    /// Found by a hostile trial: a repeated key takes its last value (not
    /// the whole object skipped); a call whose name is outside the grammar
    /// still ends the turn the results answer; two assistant messages in a
    /// row are one response; an input is keyed without being built, however
    /// deep.
    #[test]
    fn a_history_is_read_as_a_provider_reads_it() {
        let loop_of = |extra: &str| {
            // Four `status` turns returning `pending`, then `extra`.
            let mut m = String::from(r#"{"model":"m","messages":["#);
            for i in 0..4 {
                m.push_str(&format!(
                    r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"status","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"pending"}}]}},"#
                ));
            }
            m.push_str(extra);
            m.push_str("]}");
            m
        };
        // A repeated key in a message, a block and the body.
        let dup = loop_of(r#"{"role":"user","role":"user","content":"x"}"#)
            .replace(
                r#""content":[{"type":"tool_result","tool_use_id":"t3""#,
                r#""content":"hidden","content":[{"type":"tool_result","tool_use_id":"t3""#,
            )
            .replace(r#",{"role":"user","role":"user","content":"x"}"#, "");
        let h = tool_history(Api::Messages, dup.as_bytes()).expect("read");
        assert_eq!((h.calls.len(), h.latest), (4, Some(3)));
        assert!(h.calls.iter().all(|c| c.outcome.is_some()));
        // A call named outside the grammar after a person's message: its
        // turn is the latest, not the old loop's.
        let later = loop_of(
            r#"{"role":"user","content":"read the file"},{"role":"assistant","content":[{"type":"tool_use","id":"r","name":"files.read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"r","content":"text"}]}"#,
        );
        let h = tool_history(Api::Messages, later.as_bytes()).expect("read");
        assert_eq!(h.calls.len(), 4);
        assert_eq!(h.latest, Some(4));
        // Two assistant messages in a row: one turn.
        let split = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "y", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"},
                                         {"type": "tool_result", "tool_use_id": "b", "content": "2"}]}]});
        let h = read(Api::Messages, split);
        assert_eq!(
            (h.calls[0].turn, h.calls[1].turn, h.latest),
            (0, 0, Some(0))
        );
        // Nested 200 levels (past the JSON reader's 128 for building a
        // value): keyed all the same, without being built.
        let deep = format!(
            r#"{{"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"d","name":"x","input":{}{}}}]}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let h = tool_history(Api::Messages, deep.as_bytes()).expect("read");
        assert_eq!(h.calls.len(), 1);
        // The same input in another key order is another call here; the
        // same text is the same call, in Chat as in Messages.
        let h = read(
            Api::Chat,
            json!({"messages": [
                {"role": "assistant", "tool_calls": [
                    {"id": "1", "function": {"name": "f", "arguments": "{\"a\":1,\"b\":2}"}},
                    {"id": "2", "function": {"name": "f", "arguments": "{\"a\": 1, \"b\": 2}"}},
                    {"id": "3", "function": {"name": "f", "arguments": "{\"b\":2,\"a\":1}"}}]}]}),
        );
        assert_eq!(h.calls[0].call, h.calls[1].call);
        assert_ne!(h.calls[0].call, h.calls[2].call);
    }

    /// A long history is read in bounded memory: the latest calls are
    /// kept, each result found by its id at once, and a reused id answers
    /// the later call.
    #[test]
    fn a_long_history_keeps_its_latest_calls() {
        use super::super::history::KEPT_CALLS;
        let turns = 20_000;
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": format!("t{i}"), "name": "status", "input": {"n": i % 3}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("r{}", i % 3)}]}));
        }
        let h = read(Api::Messages, json!({ "messages": messages }));
        assert_eq!(h.calls.len(), KEPT_CALLS);
        assert_eq!(h.latest, Some(turns - 1));
        assert_eq!(
            h.calls.first().map(|m| m.turn),
            Some(turns - KEPT_CALLS as u32)
        );
        assert!(h.calls.iter().all(|m| m.outcome.is_some()));
        // Every third result is the same as three turns before.
        assert_eq!(h.calls[0].outcome, h.calls[3].outcome);
        assert_ne!(h.calls[0].outcome, h.calls[1].outcome);
        let h = read(
            Api::Chat,
            json!({"messages": [
                {"role": "assistant", "tool_calls": [{"id": "same", "function": {"name": "a", "arguments": "{}"}}]},
                {"role": "assistant", "tool_calls": [{"id": "same", "function": {"name": "b", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "same", "content": "x"}]}),
        );
        assert_eq!(h.calls[0].outcome, None);
        assert!(h.calls[1].outcome.is_some());
    }
}

/// The events of a long answer that cannot report usage or an end are not
/// read as JSON; every one that can, is.
#[test]
fn only_events_that_can_report_are_read_as_json() {
    let cases: [(Api, &str, bool); 12] = [
        (
            Api::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the \"usage\" of it"}}"#,
            false,
        ),
        (
            Api::Messages,
            r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}"#,
            true,
        ),
        (Api::Messages, r#"{"type": "message_stop"}"#, true),
        (Api::Messages, r#"{"type":"ping"}"#, false),
        (
            Api::Chat,
            r#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#,
            false,
        ),
        (
            Api::Chat,
            r#"{"choices":[{"delta":{"content":"hi"}}],"usage" : null}"#,
            false,
        ),
        (
            Api::Chat,
            r#"{"choices":[],"usage":{"prompt_tokens":3}}"#,
            true,
        ),
        (
            Api::Chat,
            r#"{"choices":[{"delta":{"content":"usage"}}],"usage":null}"#,
            false,
        ),
        (
            Api::Responses,
            r#"{"type":"response.output_text.delta","delta":"x"}"#,
            false,
        ),
        (
            Api::Responses,
            r#"{"type":"response.completed","response":{"usage":{}}}"#,
            true,
        ),
        (
            Api::Responses,
            r#"{"type":"response.failed","response":{}}"#,
            true,
        ),
        (
            Api::Responses,
            r#"{"type":"response.incomplete","response":{}}"#,
            true,
        ),
    ];
    for (api, data, reads) in cases {
        assert_eq!(
            super::may_report(api, data.as_bytes()),
            reads,
            "{api:?} {data}"
        );
    }
    // A whole answer's usage: a repeated key takes its last value.
    let twice = br#"{"usage":{"input_tokens":1,"output_tokens":1},"content":[],"usage":{"input_tokens":1000,"output_tokens":50000}}"#;
    let u = answer_usage(Api::Messages, twice).unwrap().expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (1000, 50000));
    // A text that holds a key's words is read, and reports nothing.
    let mut usage = StreamUsage::default();
    let data = r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"usage"},"x":{"usage":{"output_tokens":1}}}"#;
    assert!(super::may_report(Api::Messages, data.as_bytes()));
    assert_eq!(
        usage.read_event(Api::Messages, data, false),
        EventUse::Relay
    );
    assert_eq!(usage.usage, None);
}

#[test]
fn a_reply_bound_is_set_in_place_and_every_other_byte_kept() {
    let set = |api, body: &str, max| {
        String::from_utf8(with_max_output(api, body.as_bytes(), max).unwrap()).unwrap()
    };
    assert_eq!(
        set(
            Api::Messages,
            r#"{"model":"m", "max_tokens" : 4096 ,"messages":[]}"#,
            1000
        ),
        r#"{"model":"m", "max_tokens" : 1000 ,"messages":[]}"#
    );
    // Chat: both of its fields when both are there, `null` too.
    assert_eq!(
        set(
            Api::Chat,
            r#"{"max_tokens":null,"model":"g","max_completion_tokens":77}"#,
            5
        ),
        r#"{"max_tokens":5,"model":"g","max_completion_tokens":5}"#
    );
    // None there: the API's own field added first.
    assert_eq!(
        set(Api::Chat, r#" {"model":"g"}"#, 64),
        r#" {"max_completion_tokens":64,"model":"g"}"#
    );
    assert_eq!(set(Api::Responses, "{ }", 9), r#"{"max_output_tokens":9 }"#);
    // A key written with an escape is the same key, as the provider reads it.
    assert_eq!(
        set(Api::Messages, r#"{"max\u005ftokens":300,"model":"m"}"#, 30),
        r#"{"max\u005ftokens":30,"model":"m"}"#
    );
    // A nested bound is not the request's.
    assert_eq!(
        set(
            Api::Messages,
            r#"{"metadata":{"max_tokens":1},"model":"m"}"#,
            2
        ),
        r#"{"max_tokens":2,"metadata":{"max_tokens":1},"model":"m"}"#
    );
    let added = set(Api::Chat, "{}", u64::MAX);
    assert_eq!(added.len() as u64, 2 + MAX_FIELD_BYTES - 1, "{added}");
    for body in ["[]", "{", "{} x", "not json"] {
        assert_eq!(
            with_max_output(Api::Messages, body.as_bytes(), 1),
            None,
            "{body}"
        );
    }
    // What it writes reads back as the bound.
    let body = set(Api::Chat, r#"{"model":"g","max_tokens":900}"#, 12);
    assert_eq!(
        read_request(Api::Chat, body.as_bytes()).unwrap().max_output,
        Some(12)
    );
}

/// A hostile trial's paths: a matrix parameter, an escaped `;`, NUL or
/// blank, a `.json` ending: each a model call once a server cleans it up,
/// so refused rather than passed through ungated.
#[test]
fn a_model_call_with_a_parameter_suffix_or_blank_is_a_model_call_loosely() {
    for path in [
        "/v1/messages;x",
        "/v1/messages;/",
        "/v1/messages%3b",
        "/v1/messages%00",
        "/v1/messages%20",
        "/v1/messages%09",
        "/v1/messages.json",
    ] {
        assert_eq!(Api::loosely(path), Some(Api::Messages), "{path}");
        assert_eq!(Api::of_path(path), None, "{path}");
    }
    assert_eq!(Api::loosely("/v1/chat/completions;"), Some(Api::Chat));
    assert_eq!(Api::loosely("/v1/messages/count_tokens;x"), None);
}

/// Billed endpoints the proxy cannot gate are named (and refused); the
/// free ones around them are not.
#[test]
fn billed_endpoints_that_cannot_be_gated_are_named() {
    for path in [
        "/v1/messages/batches",
        "/v1/batches",
        "/v1/complete",
        "/v1/completions",
        "/v1/responses/compact",
        "/V1/Messages/Batches/",
        "/v1/completions;x",
        "/v1/threads/runs",
        "/v1/threads/thread_abc/runs",
        "/v1/threads/t/runs/r/submit_tool_outputs",
        "/v1/evals/x/runs",
        "/v1/images/generations",
        "/v1/audio/speech",
        "/v1/realtime/sessions",
        "/v1/fine_tuning/jobs",
        "/openai/v1/completions",
        "/v1beta/openai/responses/compact",
    ] {
        assert!(Api::ungated_billed(path).is_some(), "{path}");
    }
    for path in [
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/messages/batches/msgbatch_1/cancel",
        "/v1/responses/input_tokens",
        "/v1/responses/resp_1/cancel",
        "/v1/models",
        "/v1/embeddings",
        "/v1/chat/completions",
        "/openai/deployments/gpt4/chat/completions",
        "/v1/threads/t/messages",
    ] {
        assert_eq!(Api::ungated_billed(path), None, "{path}");
    }
}

/// Issue 31's hostile trial (F3, F4, F9): asking for the usage chunk
/// rewrote the whole body (numbers respelled, nested duplicate keys
/// merged, a deep or lone-surrogate body left without the option). Now
/// the option is set in place and every other byte kept, whatever the body
/// holds, with at most `USAGE_OPTION_BYTES` more.
#[test]
fn the_usage_option_is_set_in_place_and_every_other_byte_kept() {
    let set = |body: &str| String::from_utf8(with_include_usage(body.as_bytes()).unwrap()).unwrap();
    assert_eq!(
        set(r#"{"model":"g","x":[1e15,1E2,-0],"stream":true}"#),
        r#"{"stream_options":{"include_usage":true},"model":"g","x":[1e15,1E2,-0],"stream":true}"#
    );
    assert_eq!(
        set(r#"{"stream_options":{"a":{"b":1,"b":2}},"s":"hi \ud83d"}"#),
        r#"{"stream_options":{"include_usage":true,"a":{"b":1,"b":2}},"s":"hi \ud83d"}"#
    );
    assert_eq!(
        set(r#"{"stream_options":{"include_usage":false}}"#),
        r#"{"stream_options":{"include_usage":true}}"#
    );
    assert_eq!(
        set(r#"{"stream_options": null ,"m":1}"#),
        r#"{"stream_options": {"include_usage":true} ,"m":1}"#
    );
    assert_eq!(
        set(r#"{"stream_options":{ }}"#),
        r#"{"stream_options":{"include_usage":true }}"#
    );
    assert_eq!(set("{}").len() as u64, 2 + USAGE_OPTION_BYTES - 1);
    // Nesting deeper than a JSON value can be built from.
    let deep = format!(
        r#"{{"model":"g","x":{}1{}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    let out = set(&deep);
    assert!(out.ends_with(&deep[1..]), "every byte of it kept");
    assert!(out.starts_with(r#"{"stream_options":{"include_usage":true},"#));
    for bad in ["[]", "{", "{} x"] {
        assert_eq!(with_include_usage(bad.as_bytes()), None, "{bad}");
    }
}

/// Hostile trial F5, F6: Chat's `n` replies are each up to the bound, and
/// with both bound fields the larger counts (an upstream may read
/// `max_completion_tokens or max_tokens`); a bound of 0 is refused.
#[test]
fn chat_counts_each_of_its_n_replies_and_the_larger_bound() {
    let r = read_request(
        Api::Chat,
        br#"{"model":"g","max_completion_tokens":1000,"n":20}"#,
    )
    .unwrap();
    assert_eq!((r.max_output, r.choices), (Some(1000), 20));
    assert_eq!(r.worst_case(), Some(r.input_bound + 20_000));
    let r = read_request(
        Api::Chat,
        br#"{"model":"g","max_completion_tokens":5,"max_tokens":50000}"#,
    )
    .unwrap();
    assert_eq!(r.max_output, Some(50_000));
    for (api, body) in [
        (
            Api::Chat,
            &br#"{"model":"g","max_completion_tokens":0,"max_tokens":50000}"#[..],
        ),
        (Api::Messages, br#"{"model":"m","max_tokens":0}"#),
        (Api::Chat, br#"{"model":"g","n":0}"#),
    ] {
        let e = read_request(api, body).unwrap_err();
        assert!(e.contains("is 0"), "{e}");
    }
    let r = read_request(Api::Messages, br#"{"model":"m","max_tokens":7,"n":9}"#).unwrap();
    assert_eq!(r.choices, 1, "n is Chat's alone");
}

/// Hostile trial F8: a block type written with an escaped letter is still
/// a media block to the provider: each escaped letter counts as one.
#[test]
fn an_escaped_letter_counts_as_a_media_block_in_the_input_bound() {
    let plain = input_bound(br#"{"type":"document"}"#);
    let escaped = input_bound(br#"{"type":"\u0064ocument"}"#);
    assert!(escaped >= plain, "{escaped} < {plain}");
    assert_eq!(escaped, 24 + INPUT_OVERHEAD_TOKENS + MEDIA_TOKENS);
    // Escapes of what writers do escape (quotes, controls, `<`, non-ASCII)
    // count as bytes only.
    let body = br#"{"t":"\u0022 \u000a \u003c \u00e9 \\u0064"}"#;
    assert_eq!(input_bound(body), body.len() as u64 + INPUT_OVERHEAD_TOKENS);
}
