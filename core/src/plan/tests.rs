//! Tests of plans, their usage and the bounded workflow (`SPEC B`).

use super::read::Compact;
use super::*;

/// `SPEC B1`, `SPEC B2`: a row's figures read back as written, and
/// every stop reason and error is spelled as the contract and the docs
/// spell it (the words `plan --json` prints). Found by cargo-mutants
/// (the whole-core run, shard 1/4): the accessors and words could
/// answer anything.
#[test]
fn rows_read_back_and_reasons_and_errors_are_spelled() {
    let plan: Plan = Plan::parse(
        br#"[{"id":"a","parent":null,"tokens":7,"output":3},
                 {"id":"b","parent":"a","tokens":0,"output":10000}]"#,
    )
    .unwrap();
    let rows = plan.rows();
    assert_eq!(
        (rows[0].tokens(), rows[0].output(), rows[0].parent()),
        (7, 3, None)
    );
    assert_eq!(
        (rows[1].tokens(), rows[1].output(), rows[1].parent()),
        (0, 10000, Some(0))
    );
    assert_eq!(StopReason::Complete.as_str(), "complete");
    for key in LimitKey::ALL {
        assert_eq!(StopReason::Limit(key).as_str(), key.key());
    }
    assert_eq!(
        PlanError::NotAList.to_string(),
        "a plan must be a JSON array of rows"
    );
    assert_eq!(
        PlanError::TooManyRows.to_string(),
        "a plan has at most 32 rows"
    );
    assert_eq!(
        LimitsError::NotAnObject.to_string(),
        "limits must be a JSON object"
    );
    assert_eq!(
        LimitsError::MissingKey(LimitKey::Steps).to_string(),
        "missing limit `steps`"
    );
    assert_eq!(
        LimitsError::OutOfRange(LimitKey::Steps).to_string(),
        "limit `steps` must be an integer 0..=32"
    );
}

fn seed_plan() -> Plan {
    Plan::parse(br#"[{"id":"a","parent":null,"tokens":2,"output":1},{"id":"b","parent":"a","tokens":3,"output":2}]"#)
        .unwrap()
}

fn limits(steps: u32, tokens: u32, output: u32, depth: u32, fanout: u32) -> Limits {
    Limits::new(steps, tokens, output, depth, fanout).unwrap()
}

#[test]
fn seed_example_usage() {
    let u = seed_plan().usage();
    assert_eq!(
        u,
        Usage {
            steps: 2,
            tokens: 5,
            output: 3,
            max_depth: 2,
            max_fanout: 1
        }
    );
    assert_eq!(Plan::<32>::new().usage(), Usage::default());
}

#[test]
fn seed_example_workflows() {
    let plan = seed_plan();
    let w = plan.bounded_workflow(&limits(4, 4, 10, 4, 4));
    assert_eq!(
        (w.accepted, w.stopped, w.reason),
        (1, Some(1), StopReason::Limit(LimitKey::Tokens))
    );
    assert_eq!(w.usage.tokens, 2);
    let w = plan.bounded_workflow(&limits(4, 5, 10, 4, 4));
    assert_eq!(
        (w.accepted, w.stopped, w.reason),
        (2, None, StopReason::Complete)
    );
    assert_eq!(w.usage.tokens, 5);
    let z = Plan::<32>::parse(br#"[{"id":"z","parent":null,"tokens":0,"output":0}]"#).unwrap();
    let w = z.bounded_workflow(&limits(0, 0, 0, 0, 0));
    assert_eq!(
        (w.accepted, w.reason),
        (0, StopReason::Limit(LimitKey::Steps))
    );
    let empty = Plan::<32>::new().bounded_workflow(&limits(0, 0, 0, 0, 0));
    assert_eq!(empty.reason, StopReason::Complete);
}

/// `SPEC B2`: each limit stops the workflow on its own, before the
/// first step whose would-be total passes it (equality allowed):
/// output accumulates over the accepted steps. Found by cargo-mutants
/// (the whole-core run, shard 1/4): only the tokens and steps limits
/// were checked alone here.
#[test]
fn each_limit_alone_stops_before_the_step_that_passes_it() {
    let plan = seed_plan(); // output 1 then 2, depth 1 then 2
    let w = plan.bounded_workflow(&limits(4, 100, 2, 4, 4));
    assert_eq!(
        (w.accepted, w.stopped, w.reason, w.usage.output),
        (1, Some(1), StopReason::Limit(LimitKey::Output), 1)
    );
    let w = plan.bounded_workflow(&limits(4, 100, 3, 4, 4));
    assert_eq!(
        (w.accepted, w.reason, w.usage.output),
        (2, StopReason::Complete, 3)
    );
    let w = plan.bounded_workflow(&limits(4, 100, 10, 1, 4));
    assert_eq!(
        (w.accepted, w.reason),
        (1, StopReason::Limit(LimitKey::Depth))
    );
    let fan = Plan::<32>::parse(
        br#"[{"id":"a","parent":null,"tokens":0,"output":0},{"id":"b","parent":null,"tokens":0,"output":0}]"#,
    )
    .unwrap();
    let w = fan.bounded_workflow(&limits(4, 0, 0, 4, 1));
    assert_eq!(
        (w.accepted, w.reason),
        (1, StopReason::Limit(LimitKey::Fanout))
    );
}

#[test]
fn stop_order_when_several_limits_break() {
    let plan = seed_plan();
    // Row b breaks tokens, output, depth at once: tokens is reported.
    let w = plan.bounded_workflow(&limits(4, 4, 1, 1, 4));
    assert_eq!(w.reason, StopReason::Limit(LimitKey::Tokens));
    let w = plan.bounded_workflow(&limits(1, 4, 1, 1, 4));
    assert_eq!(w.reason, StopReason::Limit(LimitKey::Steps));
}

#[test]
fn roots_share_one_virtual_parent() {
    let plan = Plan::<32>::parse(
        br#"[{"id":"a","parent":null,"tokens":0,"output":0},{"id":"b","parent":null,"tokens":0,"output":0}]"#,
    )
    .unwrap();
    assert_eq!(plan.usage().max_fanout, 2);
    assert_eq!(
        plan.bounded_workflow(&limits(5, 5, 5, 5, 1)).reason,
        StopReason::Limit(LimitKey::Fanout)
    );
    assert_eq!(
        plan.bounded_workflow(&limits(5, 5, 5, 5, 2)).reason,
        StopReason::Complete
    );
}

#[test]
fn row_rules() {
    let row = |body: &str| Plan::<32>::parse(format!("[{body}]").as_bytes());
    let rule = |r| Err(PlanError::Row { row: 0, rule: r });
    assert_eq!(
        row(r#"{"id":"a","parent":null,"tokens":1.0,"output":0}"#),
        rule(RowRule::Cost(RowField::Tokens))
    );
    assert_eq!(
        row(r#"{"id":"a","parent":null,"tokens":true,"output":0}"#),
        rule(RowRule::Cost(RowField::Tokens))
    );
    assert_eq!(
        row(r#"{"id":"a","parent":null,"tokens":0,"output":10001}"#),
        rule(RowRule::Cost(RowField::Output))
    );
    assert!(row(r#"{"id":"a","parent":null,"tokens":10000,"output":0}"#).is_ok());
    assert_eq!(
        row(r#"{"id":"a","parent":"a","tokens":0,"output":0}"#),
        rule(RowRule::UnknownParent)
    );
    assert_eq!(
        row(r#"{"id":"a","tokens":0,"output":0}"#),
        rule(RowRule::MissingKey(RowField::Parent))
    );
    assert_eq!(
        row(r#"{"id":"a","parent":null,"tokens":0,"output":0,"x":1}"#),
        rule(RowRule::UnexpectedKey)
    );
    assert!(row(&format!(
        r#"{{"id":"{}","parent":null,"tokens":0,"output":0}}"#,
        "a".repeat(32)
    ))
    .is_ok());
    assert!(matches!(
        row(&format!(
            r#"{{"id":"{}","parent":null,"tokens":0,"output":0}}"#,
            "a".repeat(33)
        )),
        Err(PlanError::Row {
            rule: RowRule::InvalidId(RowField::Id, _),
            ..
        })
    ));
    assert_eq!(
        row(r#"{"id":"a","id":"b","parent":null,"tokens":0,"output":0}"#),
        Err(PlanError::Json(JsonError::DuplicateKey))
    );
    assert_eq!(Plan::<32>::parse(b"{}"), Err(PlanError::NotAList));
}

#[test]
fn thirty_two_rows_fit_and_thirty_three_do_not() {
    let rows = |n: usize| {
        let body: std::vec::Vec<_> = (0..n)
            .map(|i| format!(r#"{{"id":"s{i}","parent":null,"tokens":0,"output":0}}"#))
            .collect();
        format!("[{}]", body.join(","))
    };
    assert_eq!(
        Plan::<32>::parse(rows(32).as_bytes()).map(|p| p.rows().len()),
        Ok(32)
    );
    assert_eq!(
        Plan::<32>::parse(rows(33).as_bytes()),
        Err(PlanError::TooManyRows)
    );
}

#[test]
fn escaped_keys_and_ids_are_read_like_plain_ones() {
    let limits = Limits::parse(
        br#"{"\u0073teps":1,"\u0074okens":2,"\u006Futput":3,"\u0064epth":4,"\u0066anout":5}"#,
    );
    assert_eq!(limits, Limits::new(1, 2, 3, 4, 5));
    let rows: std::vec::Vec<_> = (0..32)
        .map(|i| {
            let id = format!("{}{i:02}", r"\u0061".repeat(30));
            let parent = if i == 0 {
                "null".into()
            } else {
                format!(r#""{}{:02}""#, r"\u0061".repeat(30), i - 1)
            };
            format!(
                r#"{{"\u0069d":"{id}","\u0070arent":{parent},"\u0074okens":1,"\u006futput":1}}"#
            )
        })
        .collect();
    let plan = Plan::<32>::parse(format!("[{}]", rows.join(",")).as_bytes()).unwrap();
    assert_eq!(plan.usage().max_depth, 32);
}

/// `SPEC A1` (duplicate keys are refused): the one-pass readers decline
/// a repeated key, whichever it is, and the general reader refuses it.
#[test]
fn the_compact_readers_decline_a_repeated_key() {
    let row = r#""id":"a","parent":null,"tokens":1,"output":2"#;
    for extra in [
        r#""id":"b""#,
        r#""parent":null"#,
        r#""tokens":3"#,
        r#""output":4"#,
    ] {
        let doc = format!("[{{{row},{extra}}}]");
        let text = core::str::from_utf8(doc.as_bytes()).unwrap();
        assert!(
            Compact {
                bytes: doc.as_bytes(),
                text,
                at: 0
            }
            .plan::<32>()
            .is_none(),
            "{doc}"
        );
        assert_eq!(
            Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
            PlanError::Json(JsonError::DuplicateKey),
            "{doc}"
        );
    }
    let limits = r#""steps":1,"tokens":2,"output":3,"depth":4,"fanout":5"#;
    for extra in [r#""steps":1"#, r#""fanout":5"#] {
        let doc = format!("{{{limits},{extra}}}");
        let text = core::str::from_utf8(doc.as_bytes()).unwrap();
        assert!(
            Compact {
                bytes: doc.as_bytes(),
                text,
                at: 0
            }
            .limits()
            .is_none(),
            "{doc}"
        );
        assert_eq!(
            Limits::parse(doc.as_bytes()),
            Err(LimitsError::Json(JsonError::DuplicateKey)),
            "{doc}"
        );
    }
}

/// `SPEC B1`: `try_push` checks every row rule, as `parse` does.
#[test]
fn try_push_checks_each_row_rule() {
    let mut plan: Plan = Plan::new();
    plan.try_push("a", None, 1, 1).unwrap();
    let rule = |e: PlanError| match e {
        PlanError::Row { rule, .. } => rule,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        rule(plan.try_push("a", None, 1, 1).unwrap_err()),
        RowRule::DuplicateId
    );
    assert_eq!(
        rule(plan.try_push("b", Some("zz"), 1, 1).unwrap_err()),
        RowRule::UnknownParent
    );
    assert!(matches!(
        rule(plan.try_push("B", None, 1, 1).unwrap_err()),
        RowRule::InvalidId(RowField::Id, Some(_))
    ));
    assert!(matches!(
        rule(plan.try_push("b", Some("A"), 1, 1).unwrap_err()),
        RowRule::InvalidId(RowField::Parent, Some(_))
    ));
    assert_eq!(
        rule(
            plan.try_push("b", Some("a"), MAX_ROW_COST + 1, 1)
                .unwrap_err()
        ),
        RowRule::Cost(RowField::Tokens)
    );
    assert_eq!(plan.rows().len(), 1, "nothing was added by a refused row");
    plan.try_push("b", Some("a"), MAX_ROW_COST, 0).unwrap();
    assert_eq!(plan.usage().max_depth, 2);
}

/// `SPEC B1`: costs of ten digits or more (beyond `u32`, or just
/// beyond the cost bound) are refused by the rule, never wrapped.
#[test]
fn a_cost_of_many_digits_is_refused_as_a_cost() {
    for cost in ["10001", "999999999", "4294967296", "12345678901234567890"] {
        let doc = format!(r#"[{{"id":"a","parent":null,"tokens":{cost},"output":1}}]"#);
        assert_eq!(
            Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
            PlanError::Row {
                row: 0,
                rule: RowRule::Cost(RowField::Tokens)
            },
            "{cost}"
        );
    }
}

/// `SPEC B1`: an escaped string too long for the reader's first buffer
/// is read again with the large one, so it is judged by the plan's own
/// rules (an id over 64 characters), not refused as a JSON limit; one
/// too long for both is the JSON limit.
#[test]
fn a_long_escaped_id_is_judged_as_an_id() {
    let long = r"\u0061".repeat(300);
    let doc = format!(r#"[{{"id":"{long}","parent":null,"tokens":1,"output":1}}]"#);
    let err = Plan::<32>::parse(doc.as_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            PlanError::Row {
                row: 0,
                rule: RowRule::InvalidId(RowField::Id, Some(_))
            }
        ),
        "{err:?}"
    );
    // The large buffer holds 2 816 decoded bytes (32 rows of 88), no more.
    let longest = r"\u0061".repeat(2_816);
    let doc = format!(r#"[{{"id":"{longest}","parent":null,"tokens":1,"output":1}}]"#);
    assert!(matches!(
        Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
        PlanError::Row {
            row: 0,
            rule: RowRule::InvalidId(RowField::Id, Some(_))
        }
    ));
    let longer = r"\u0061".repeat(2_817);
    let doc = format!(r#"[{{"id":"{longer}","parent":null,"tokens":1,"output":1}}]"#);
    assert_eq!(
        Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
        PlanError::Json(JsonError::StringTooLong)
    );
}

/// `SPEC B1`: the one-pass reader of the common spelling answers only
/// valid plans, and exactly as the general reader does: on every plan of
/// the reference vectors (plain and spaced out), and on 60 000 mutants of
/// them (a byte replaced, deleted or inserted), whenever it answers, the
/// general reader gives the same plan.
#[test]
fn the_compact_reader_agrees_with_the_general_one() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/plan.jsonl"
    ))
    .unwrap();
    let mut plans: std::vec::Vec<std::vec::Vec<u8>> = std::vec::Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(p) = v["request"]["args"].get("plan") {
            plans.push(serde_json::to_vec(p).unwrap());
            plans.push(serde_json::to_vec_pretty(p).unwrap());
        }
    }
    assert!(plans.len() > 50);
    let general = |doc: &[u8]| Plan::<32>::parse_in(doc, &mut [0u8; 4096]);
    let compact = |doc: &[u8]| {
        let text = core::str::from_utf8(doc).ok()?;
        Compact {
            bytes: doc,
            text,
            at: 0,
        }
        .plan::<32>()
    };
    let (mut answered, mut seed) = (0usize, 0x2545_f491_4f6c_dd1du64);
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const BYTES: &[u8] = b"{}[]:,\" \\0123456789-.eEnulabcdfrst\x00\x7f\xc3";
    for doc in &plans {
        // Every valid plan in the common spelling is answered here.
        match (compact(doc), general(doc)) {
            (Some(plan), g) => {
                assert_eq!(Ok(plan), g, "{}", String::from_utf8_lossy(doc));
                answered += 1;
            }
            (None, Ok(_)) => panic!("a valid plan declined: {}", String::from_utf8_lossy(doc)),
            (None, Err(_)) => {}
        }
        for _ in 0..500 {
            let mut m = doc.clone();
            let at = (next() as usize) % (m.len() + 1);
            let b = BYTES[(next() as usize) % BYTES.len()];
            match next() % 3 {
                0 if at < m.len() => m[at] = b,
                1 if at < m.len() => {
                    m.remove(at);
                }
                _ => m.insert(at, b),
            }
            if let Some(plan) = compact(&m) {
                assert_eq!(Ok(plan), general(&m), "{}", String::from_utf8_lossy(&m));
            }
        }
    }
    assert!(
        answered > plans.len() / 2,
        "the compact reader answered {answered}"
    );
}

/// `SPEC B2`: the one-pass reader of limits answers only valid limits,
/// exactly as the general reader does, on every limits object of the
/// vectors (plain and spaced out) and on 40 000 mutants of them.
#[test]
fn the_compact_limits_reader_agrees_with_the_general_one() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/plan.jsonl"
    ))
    .unwrap();
    let mut docs: std::vec::Vec<std::vec::Vec<u8>> = std::vec::Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(l) = v["request"]["args"].get("limits") {
            docs.push(serde_json::to_vec(l).unwrap());
            docs.push(serde_json::to_vec_pretty(l).unwrap());
        }
    }
    assert!(docs.len() > 20);
    let compact = |doc: &[u8]| {
        let text = core::str::from_utf8(doc).ok()?;
        Compact {
            bytes: doc,
            text,
            at: 0,
        }
        .limits()
    };
    let (mut answered, mut seed) = (0usize, 0x9e37_79b9_7f4a_7c15u64);
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const BYTES: &[u8] = b"{}:,\" \\0123456789-.esptoufd\x00";
    let per_doc = 40_000 / docs.len();
    for doc in &docs {
        if let Some(l) = compact(doc) {
            assert_eq!(Ok(l), Limits::parse_general(doc));
            answered += 1;
        }
        for _ in 0..per_doc {
            let mut m = doc.clone();
            let at = (next() as usize) % (m.len() + 1);
            let b = BYTES[(next() as usize) % BYTES.len()];
            match next() % 3 {
                0 if at < m.len() => m[at] = b,
                1 if at < m.len() => {
                    m.remove(at);
                }
                _ => m.insert(at, b),
            }
            if let Some(l) = compact(&m) {
                assert_eq!(
                    Ok(l),
                    Limits::parse_general(&m),
                    "{}",
                    String::from_utf8_lossy(&m)
                );
            }
        }
    }
    assert!(
        answered > docs.len() / 2,
        "answered {answered} of {}",
        docs.len()
    );
}

#[test]
fn limit_boundaries() {
    assert!(Limits::new(32, 320_000, 320_000, 32, 32).is_ok());
    assert_eq!(
        Limits::new(33, 0, 0, 0, 0),
        Err(LimitsError::OutOfRange(LimitKey::Steps))
    );
    assert_eq!(
        Limits::new(0, 320_001, 0, 0, 0),
        Err(LimitsError::OutOfRange(LimitKey::Tokens))
    );
    assert_eq!(
        Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1}"#),
        Err(LimitsError::MissingKey(LimitKey::Fanout))
    );
    assert_eq!(
        Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1,"fanout":-1}"#),
        Err(LimitsError::OutOfRange(LimitKey::Fanout))
    );
    assert_eq!(
        Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1,"fanout":false}"#),
        Err(LimitsError::OutOfRange(LimitKey::Fanout))
    );
}
