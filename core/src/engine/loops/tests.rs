//! Each pattern on both sides of its threshold; what breaks a pattern.

use super::*;
use crate::turn::ArgsFingerprint;

fn fp(name: &str, args: &str) -> CallFingerprint {
    let mut scratch = [0u8; 64];
    ArgsFingerprint::of_json(args.as_bytes(), &mut scratch)
        .map(|a| a.with_name(name))
        .unwrap_or_else(|_| ArgsFingerprint::from_u128(0).with_name(name))
}

fn ok(text: &str) -> Outcome {
    Outcome::of(text.as_bytes(), false)
}

fn err(text: &str) -> Outcome {
    Outcome::of(text.as_bytes(), true)
}

/// A window of `(tool, args, outcome)` calls, oldest first.
fn window(calls: &[(&str, &str, Option<Outcome>)]) -> Window {
    let mut w = Window::new();
    for &(name, args, outcome) in calls {
        let call = fp(name, args);
        w.push(call, ToolName::new(name).expect("name"));
        if let Some(o) = outcome {
            assert!(w.report(call, o));
        }
    }
    w
}

const RULES: LoopRules = LoopRules {
    same_outcome: Some(4),
    same_error: Some(3),
    ping_pong_cycles: Some(3),
    same_answer: None,
};

#[test]
fn the_same_call_with_the_same_result_is_refused_at_its_threshold_and_not_before() {
    let status = ("status", "{}", Some(ok("pending")));
    let three = window(&[status, status]);
    assert_eq!(
        detect(three.steps(), &RULES, fp("status", "{}")),
        None,
        "3rd call passes"
    );
    let four = window(&[status, status, status]);
    let found = detect(four.steps(), &RULES, fp("status", "{}")).expect("4th refused");
    assert_eq!(
        (found.pattern, found.times, found.max),
        (Pattern::SameOutcome, 4, 4)
    );
    // Another call's arguments are another call.
    assert_eq!(
        detect(four.steps(), &RULES, fp("status", "{\"id\":2}")),
        None
    );
}

#[test]
fn a_changed_result_starts_the_count_again() {
    let w = window(&[
        ("status", "{}", Some(ok("pending"))),
        ("status", "{}", Some(ok("pending"))),
        ("status", "{}", Some(ok("running"))),
        ("status", "{}", Some(ok("running"))),
    ]);
    assert_eq!(detect(w.steps(), &RULES, fp("status", "{}")), None);
}

#[test]
fn other_calls_in_between_that_repeat_themselves_do_not_hide_the_same_result() {
    // Polling: the same sleep between the same status.
    let w = window(&[
        ("status", "{}", Some(ok("pending"))),
        ("sleep", "{\"s\":5}", Some(ok(""))),
        ("status", "{}", Some(ok("pending"))),
        ("sleep", "{\"s\":5}", Some(ok(""))),
        ("status", "{}", Some(ok("pending"))),
        ("sleep", "{\"s\":5}", Some(ok(""))),
    ]);
    // Refused: a status/sleep cycle (the first sleep was news, so only two
    // statuses follow it).
    let found = detect(w.steps(), &RULES, fp("status", "{}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::PingPong(2), 3));
    // With a polling loop of three calls the same status is counted across
    // the repeated ones between.
    let step = |n, a, o| (n, a, Some(ok(o)));
    let mut calls = vec![step("ls", "{}", "x")];
    for _ in 0..4 {
        calls.extend([
            step("sleep", "{}", ""),
            step("status", "{}", "pending"),
            step("ls", "{}", "x"),
        ]);
    }
    calls.push(step("sleep", "{}", ""));
    let w = window(&calls);
    let found = detect(w.steps(), &RULES, fp("status", "{}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::SameOutcome, 5));
}

/// Issue 32's measured false positives: the same test run again after each
/// edit, failing the same way while the agent changes the code, is progress
/// being tried, not a loop: a call that returned something new between the
/// runs starts the count again.
#[test]
fn something_new_seen_between_the_same_calls_starts_the_count_again() {
    let test = ("pytest", "{}", Some(ok("1 failed")));
    let edit = |n: &'static str| ("edit", n, Some(ok("edited")));
    let w = window(&[test, edit("{\"n\":1}"), test, edit("{\"n\":2}"), test]);
    assert_eq!(detect(w.steps(), &RULES, fp("pytest", "{}")), None);
    // The same edit again (nothing new): counted.
    let w = window(&[
        test,
        edit("{\"n\":1}"),
        test,
        edit("{\"n\":1}"),
        test,
        edit("{\"n\":1}"),
    ]);
    assert!(detect(w.steps(), &RULES, fp("pytest", "{}")).is_some());
    // A call still running between: it may be news.
    let w = window(&[test, test, test, ("edit", "{}", None)]);
    assert_eq!(detect(w.steps(), &RULES, fp("pytest", "{}")), None);
    // Sleeps of different lengths are each new: not counted (documented).
    let w = window(&[
        ("status", "{}", Some(ok("pending"))),
        ("sleep", "{\"s\":1}", Some(ok(""))),
        ("status", "{}", Some(ok("pending"))),
        ("sleep", "{\"s\":2}", Some(ok(""))),
        ("status", "{}", Some(ok("pending"))),
    ]);
    assert_eq!(detect(w.steps(), &RULES, fp("status", "{}")), None);
}

#[test]
fn a_result_not_seen_yet_is_never_matched() {
    let w = window(&[
        ("status", "{}", Some(ok("pending"))),
        ("status", "{}", Some(ok("pending"))),
        ("status", "{}", Some(ok("pending"))),
        ("status", "{}", None),
    ]);
    assert_eq!(detect(w.steps(), &RULES, fp("status", "{}")), None);
}

#[test]
fn the_same_error_has_its_own_lower_threshold() {
    let fail = ("make", "{}", Some(err("error: missing ;")));
    let one = window(&[fail]);
    assert_eq!(
        detect(one.steps(), &RULES, fp("make", "{}")),
        None,
        "2nd try passes"
    );
    let two = window(&[fail, fail]);
    let found = detect(two.steps(), &RULES, fp("make", "{}")).expect("3rd refused");
    assert_eq!(
        (found.pattern, found.times, found.max),
        (Pattern::SameError, 3, 3)
    );
    // Without same_error, an error counts as any result.
    let only_outcome = LoopRules {
        same_error: None,
        ..RULES
    };
    assert_eq!(detect(two.steps(), &only_outcome, fp("make", "{}")), None);
    let three = window(&[fail, fail, fail]);
    let found = detect(three.steps(), &only_outcome, fp("make", "{}")).expect("refused");
    assert_eq!(found.pattern, Pattern::SameOutcome);
}

#[test]
fn two_calls_in_turn_with_unchanged_results_are_refused_at_the_third_cycle() {
    let a = ("grep", "{\"q\":\"x\"}", Some(ok("no match")));
    let b = ("view", "{\"f\":\"a.rs\"}", Some(ok("fn main() {}")));
    // A B A B A, then B: three whole cycles.
    let w = window(&[a, b, a, b, a]);
    let found = detect(w.steps(), &RULES, fp("view", "{\"f\":\"a.rs\"}")).expect("refused");
    assert_eq!(
        (found.pattern, found.times, found.max),
        (Pattern::PingPong(2), 3, 3)
    );
    assert_eq!(found.others[0].map(|n| n.as_str().len()), Some(4));
    assert_eq!(found.others[0].expect("other").as_str(), "grep");
    // A B A B, then A: two and a half cycles.
    let w = window(&[a, b, a, b]);
    assert_eq!(detect(w.steps(), &RULES, fp("grep", "{\"q\":\"x\"}")), None);
}

#[test]
fn a_changed_result_or_another_call_breaks_the_cycle() {
    let a = ("grep", "{\"q\":\"x\"}", Some(ok("no match")));
    let b = ("view", "{\"f\":\"a.rs\"}", Some(ok("fn main() {}")));
    let b2 = ("view", "{\"f\":\"a.rs\"}", Some(ok("fn main() { edited }")));
    let w = window(&[a, b2, a, b, a]);
    assert_eq!(
        detect(w.steps(), &RULES, fp("view", "{\"f\":\"a.rs\"}")),
        None
    );
    let c = ("edit", "{}", Some(ok("done")));
    let w = window(&[a, b, c, a, b, a]);
    assert_eq!(
        detect(w.steps(), &RULES, fp("view", "{\"f\":\"a.rs\"}")),
        None
    );
}

#[test]
fn three_calls_in_turn_are_a_cycle_too() {
    let a = ("ls", "{}", Some(ok("a b")));
    let b = ("cat", "{\"f\":\"a\"}", Some(ok("1")));
    let c = ("cat", "{\"f\":\"b\"}", Some(ok("2")));
    let w = window(&[a, b, c, a, b, c, a, b]);
    let found = detect(w.steps(), &RULES, fp("cat", "{\"f\":\"b\"}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::PingPong(3), 3));
    let (first, second) = (
        found.others[0].expect("first"),
        found.others[1].expect("second"),
    );
    assert_eq!([first.as_str(), second.as_str()], ["ls", "cat"]);
    let w = window(&[a, b, c, a, b, c, a]);
    assert_eq!(detect(w.steps(), &RULES, fp("cat", "{\"f\":\"a\"}")), None);
}

#[test]
fn the_window_forgets_its_oldest_call_and_reports_the_latest_unreported() {
    let mut w: Window<2> = Window::new();
    let (x, y, z) = (fp("x", "{}"), fp("y", "{}"), fp("z", "{}"));
    w.push(x, ToolName::new("x").expect("x"));
    w.push(y, ToolName::new("y").expect("y"));
    w.push(z, ToolName::new("z").expect("z"));
    assert_eq!(
        w.steps()
            .iter()
            .map(|s| s.call)
            .collect::<heapless::Vec<_, 2>>(),
        [y, z]
    );
    assert!(!w.report(x, ok("gone")), "forgotten");
    assert!(w.report(z, ok("1")));
    assert!(!w.report(z, ok("2")), "reported already");
    assert_eq!(w.steps()[1].outcome, Some(ok("1")));
}

#[test]
fn loops_are_off_without_a_threshold() {
    assert!(!LoopRules::OFF.is_on());
    assert!(RULES.is_on());
    let status = ("status", "{}", Some(ok("pending")));
    let w = window(&[status, status, status, status, status]);
    assert_eq!(detect(w.steps(), &LoopRules::OFF, fp("status", "{}")), None);
}

#[test]
fn an_outcomes_digest_is_64_bit_fnv_1a_of_its_content() {
    // The published FNV-1a test vectors.
    assert_eq!(Outcome::of(b"", false).digest, 0xcbf2_9ce4_8422_2325);
    assert_eq!(Outcome::of(b"a", false).digest, 0xaf63_dc4c_8601_ec8c);
    assert_eq!(Outcome::of(b"foobar", true).digest, 0x8594_4171_f739_67e8);
    assert!(Outcome::of(b"x", true).error && !Outcome::of(b"x", false).error);
}

#[test]
fn a_kept_name_reads_and_shows_as_the_name() {
    let name = NameCopy::new("grep");
    assert_eq!(name.as_str(), "grep");
    assert_eq!(format!("{name:?}"), "\"grep\"");
    let long = "x".repeat(70);
    assert_eq!(NameCopy::new(&long).as_str().len(), 64);
}

#[test]
fn a_cycle_needs_two_different_calls_and_room_for_its_cycles() {
    let only_cycles = LoopRules {
        same_outcome: None,
        same_error: None,
        ping_pong_cycles: Some(2),
        same_answer: None,
    };
    // One call over and over is not a cycle of calls (same_outcome's job).
    let a = ("status", "{}", Some(ok("pending")));
    let w = window(&[a, a, a, a, a]);
    assert_eq!(detect(w.steps(), &only_cycles, fp("status", "{}")), None);
    // Too short a history for two whole cycles: none, and no panic.
    let b = ("view", "{}", Some(ok("text")));
    for history in [&[][..], &[a][..], &[a, b][..]] {
        let w = window(history);
        assert_eq!(
            detect(w.steps(), &only_cycles, fp("status", "{}")),
            None,
            "{}",
            history.len()
        );
        assert_eq!(
            detect(w.steps(), &only_cycles, fp("view", "{}")),
            None,
            "{}",
            history.len()
        );
    }
    // A B A, then B: two whole cycles, the threshold.
    let w = window(&[a, b, a]);
    let found = detect(w.steps(), &only_cycles, fp("view", "{}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::PingPong(2), 2));
    // Three calls A B C A B, then C.
    let c = ("ls", "{}", Some(ok("a b")));
    let w = window(&[a, b, c, a, b]);
    let found = detect(w.steps(), &only_cycles, fp("ls", "{}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::PingPong(3), 2));
    let (first, second) = (found.others[0].expect("a"), found.others[1].expect("b"));
    assert_eq!([first.as_str(), second.as_str()], ["status", "view"]);
}

/// A window written and read back is the same window: outcomes (none, a
/// result, an error), names of every length, a full window.
#[test]
fn window_record_round_trips() {
    let long = "n".repeat(64);
    let w = window(&[
        ("grep", r#"{"q":"a"}"#, Some(ok("x"))),
        ("view", r#"{"p":1}"#, Some(err("boom"))),
        (&long, "{}", None),
    ]);
    let mut buf = [0u8; Window::<32>::RECORD_MAX];
    let n = w.write_record(&mut buf).expect("fits");
    assert_eq!(Window::<32>::read_record(&buf[..n]), Ok(w));

    let mut full: Window = Window::new();
    for i in 0..40 {
        let args = format!(r#"{{"i":{i}}}"#);
        full.push(fp(&long, &args), ToolName::new(&long).expect("name"));
        assert!(full.report(fp(&long, &args), err(&args)));
    }
    let n = full
        .write_record(&mut buf)
        .expect("a full window fits RECORD_MAX");
    assert_eq!(n, Window::<32>::RECORD_MAX, "every field at its largest");
    assert_eq!(Window::<32>::read_record(&buf[..n]), Ok(full));

    let empty: Window = Window::new();
    let n = empty.write_record(&mut buf).expect("fits");
    assert_eq!(n, 6);
    assert_eq!(Window::<32>::read_record(&buf[..n]), Ok(empty));
}

/// A buffer one byte short is refused, never written past.
#[test]
fn window_record_too_short_a_buffer_is_refused() {
    let w = window(&[("grep", "{}", Some(ok("x")))]);
    let mut buf = [0u8; 64];
    let n = w.write_record(&mut buf).expect("fits");
    let mut short = [0u8; 64];
    assert!(matches!(
        w.write_record(&mut short[..n - 1]),
        Err(WindowRecordError::Length(_))
    ));
    assert!(w.write_record(&mut short[..n]).is_ok());
}

/// Torn, edited, foreign and overlong records are refused with their reason.
#[test]
fn window_record_refuses_bad_bytes() {
    let w = window(&[("grep", "{}", Some(ok("x"))), ("view", "{}", None)]);
    let mut buf = [0u8; 256];
    let n = w.write_record(&mut buf).expect("fits");
    let good = &buf[..n];
    let read = Window::<32>::read_record;
    // Every truncation.
    for cut in 0..n {
        assert!(read(&good[..cut]).is_err(), "cut at {cut}");
    }
    // Any flipped byte of the body: the checksum.
    for at in 1..n - 4 {
        let mut bad = good.to_vec();
        bad[at] ^= 0x40;
        assert_eq!(read(&bad), Err(WindowRecordError::Checksum), "byte {at}");
    }
    let mut bad = good.to_vec();
    bad[0] = 9;
    assert_eq!(read(&bad), Err(WindowRecordError::Version(9)));
    // Re-checksummed edits: a bad outcome tag, a bad name, too many calls.
    let resum = |mut b: Vec<u8>| {
        let body = b.len() - 4;
        let crc = crate::bytes::CRC.checksum(&b[..body]).to_le_bytes();
        b[body..].copy_from_slice(&crc);
        b
    };
    let tag_at = 2 + 16 + 1 + 4;
    let mut bad = good.to_vec();
    bad[tag_at] = 3;
    assert_eq!(read(&resum(bad)), Err(WindowRecordError::Field("outcome")));
    let mut bad = good.to_vec();
    bad[2 + 16 + 1] = b' ';
    assert_eq!(
        read(&resum(bad)),
        Err(WindowRecordError::Field("tool name"))
    );
    let mut bad = good.to_vec();
    bad[1] = 1;
    assert_eq!(
        read(&resum(bad)),
        Err(WindowRecordError::Length(n)),
        "bytes after the calls it counts"
    );
    // More calls than the window holds.
    let mut big = [0u8; Window::<32>::RECORD_MAX];
    let mut three: Window<3> = Window::new();
    for a in ["1", "2", "3"] {
        three.push(fp("t", a), ToolName::new("t").expect("name"));
    }
    let n = three.write_record(&mut big).expect("fits");
    assert_eq!(
        Window::<2>::read_record(&big[..n]),
        Err(WindowRecordError::Field("calls"))
    );
    assert!(Window::<3>::read_record(&big[..n]).is_ok());
}

/// An older copy of the call whose result never came (it did not run: the
/// server answered with an error, a person refused it) ends the run there;
/// it does not switch the pattern off for the rest of the window.
#[test]
fn an_older_copy_without_a_result_ends_the_run_without_hiding_it() {
    let same = ("build", "{}", Some(err("error: x")));
    let w = window(&[("build", "{}", None), same, same]);
    let found = detect(w.steps(), &RULES, fp("build", "{}")).expect("refused");
    assert_eq!((found.pattern, found.times), (Pattern::SameError, 3));
    let w = window(&[same, ("build", "{}", None), same]);
    assert_eq!(detect(w.steps(), &RULES, fp("build", "{}")), None);
}

/// A call forgotten (it did not run) leaves no step behind: the patterns
/// around it are found as if it had never been let through.
#[test]
fn a_forgotten_call_leaves_no_step() {
    let same = ("status", "{}", Some(ok("pending")));
    let mut w = window(&[same, same, same]);
    w.push(fp("edit", "{}"), ToolName::new("edit").expect("name"));
    assert_eq!(detect(w.steps(), &RULES, fp("status", "{}")), None);
    assert!(w.forget(fp("edit", "{}")));
    assert!(!w.forget(fp("edit", "{}")), "only once");
    assert!(!w.forget(fp("status", "{}")), "never a call with a result");
    assert!(detect(w.steps(), &RULES, fp("status", "{}")).is_some());
    let mut other: Window = Window::new();
    w.swap(&mut other);
    assert!(w.steps().is_empty() && other.steps().len() == 3);
}

/// A history of `(turn, tool, args, outcome)` calls, oldest first.
fn history(calls: &[(u32, &str, &str, Option<Outcome>)]) -> std::vec::Vec<Made> {
    calls
        .iter()
        .map(|&(turn, name, args, outcome)| Made {
            call: fp(name, args),
            name: ToolName::new(name).expect("name"),
            outcome,
            turn,
        })
        .collect()
}

#[test]
fn a_history_completes_a_pattern_at_the_call_that_reaches_the_threshold() {
    let three = history(&[
        (0, "status", "{}", Some(ok("pending"))),
        (1, "status", "{}", Some(ok("pending"))),
        (2, "status", "{}", Some(ok("pending"))),
        (3, "status", "{}", Some(ok("pending"))),
    ]);
    // same_outcome 4: the fourth call (turn 3) completed it, not the third.
    assert_eq!(completed(&three, &RULES, 2), None);
    let (found, name) = completed(&three, &RULES, 3).expect("the fourth call completes it");
    assert_eq!(
        (found.pattern, found.times, found.max),
        (Pattern::SameOutcome, 4, 4)
    );
    assert_eq!(name.as_str(), "status");
    // A changed result anywhere in the run starts the count again.
    let changed = history(&[
        (0, "status", "{}", Some(ok("pending"))),
        (1, "status", "{}", Some(ok("10%"))),
        (2, "status", "{}", Some(ok("10%"))),
        (3, "status", "{}", Some(ok("10%"))),
    ]);
    assert_eq!(completed(&changed, &RULES, 3), None);
    // The fourth call would have been refused, but what it returned was
    // new: progress after all.
    let moved = history(&[
        (0, "status", "{}", Some(ok("pending"))),
        (1, "status", "{}", Some(ok("pending"))),
        (2, "status", "{}", Some(ok("pending"))),
        (3, "status", "{}", Some(ok("done"))),
    ]);
    assert_eq!(completed(&moved, &RULES, 3), None);
    // Errors: same_error 3.
    let failing = history(&[
        (0, "build", "{}", Some(err("boom"))),
        (1, "build", "{}", Some(err("boom"))),
        (2, "build", "{}", Some(err("boom"))),
    ]);
    assert_eq!(completed(&failing, &RULES, 1), None);
    assert_eq!(
        completed(&failing, &RULES, 2).map(|(f, _)| (f.pattern, f.times)),
        Some((Pattern::SameError, 3))
    );
    // No [loops]: nothing looked for.
    assert_eq!(completed(&three, &LoopRules::OFF, 3), None);
}

#[test]
fn a_turns_calls_are_decided_before_any_of_their_results_is_known() {
    let rules = LoopRules {
        same_outcome: Some(2),
        same_error: None,
        ping_pong_cycles: None,
        same_answer: None,
    };
    // Two identical calls made in one response: live, the second was
    // decided while the first's result was not known, so nothing matched.
    let parallel = history(&[
        (0, "status", "{}", Some(ok("pending"))),
        (0, "status", "{}", Some(ok("pending"))),
    ]);
    assert_eq!(completed(&parallel, &rules, 0), None);
    // Made one after the other, the second completes same_outcome 2.
    let serial = history(&[
        (0, "status", "{}", Some(ok("pending"))),
        (1, "status", "{}", Some(ok("pending"))),
    ]);
    assert!(completed(&serial, &rules, 1).is_some());
    // Calls of a turn after `latest` are not looked at.
    assert_eq!(completed(&serial, &rules, 0), None);
    // A call with no result in the history matches nothing.
    let unseen = history(&[
        (0, "status", "{}", None),
        (1, "status", "{}", Some(ok("x"))),
    ]);
    assert_eq!(completed(&unseen, &rules, 1), None);
}

#[test]
fn a_result_of_a_call_pushed_out_of_the_window_is_given_to_no_other_call() {
    let rules = LoopRules {
        same_outcome: Some(2),
        ..LoopRules::OFF
    };
    let results: std::vec::Vec<std::string::String> = (0..LOOP_WINDOW + 1)
        .map(|i| {
            if i == 0 {
                "pending".into()
            } else {
                std::format!("v{i}")
            }
        })
        .collect();
    // One turn of 33 `status` calls: the first, pushed out, returned
    // `pending`, the rest new values; then one more `status` → `pending`.
    let mut calls: std::vec::Vec<(u32, &str, &str, Option<Outcome>)> = results
        .iter()
        .map(|r| (0, "status", "{}", Some(ok(r))))
        .collect();
    calls.push((1, "status", "{}", Some(ok("pending"))));
    assert_eq!(completed(&history(&calls), &rules, 1), None);
}

#[test]
fn a_history_completes_an_alternation() {
    let rules = LoopRules {
        same_outcome: None,
        same_error: None,
        ping_pong_cycles: Some(2),
        same_answer: None,
    };
    let calls = history(&[
        (0, "grep", "{\"q\":\"x\"}", Some(ok("none"))),
        (1, "view", "{\"f\":\"a\"}", Some(ok("text"))),
        (2, "grep", "{\"q\":\"x\"}", Some(ok("none"))),
        (3, "view", "{\"f\":\"a\"}", Some(ok("text"))),
    ]);
    assert_eq!(completed(&calls, &rules, 2), None);
    let (found, name) = completed(&calls, &rules, 3).expect("the second cycle");
    assert_eq!(found.pattern, Pattern::PingPong(2));
    assert_eq!(name.as_str(), "view");
}

#[test]
fn the_same_answer_given_max_times_in_a_row_refuses_the_next_model_call() {
    let rules = LoopRules {
        same_answer: Some(3),
        ..LoopRules::OFF
    };
    assert!(rules.is_on());
    let mut a = Answers::new();
    assert_eq!(a.check(&rules), None);
    a.record(Some(7));
    a.record(Some(7));
    // Two: below the threshold.
    assert_eq!(a.check(&rules), None);
    a.record(Some(7));
    let found = a.check(&rules).expect("the third identical answer");
    assert_eq!(
        (found.pattern, found.times, found.max),
        (Pattern::SameAnswer, 3, 3)
    );
    assert_eq!(found.pattern.key(), "same_answer");
    // A fourth counts on.
    a.record(Some(7));
    assert_eq!(a.check(&rules).map(|f| f.times), Some(4));
    // Not looked for without its key.
    assert_eq!(a.check(&LoopRules::OFF), None);
    // A different answer starts the count again.
    a.record(Some(8));
    assert_eq!(a.check(&rules), None);
    a.record(Some(8));
    a.record(Some(8));
    assert!(a.check(&rules).is_some());
    // A response with a tool call ends the run.
    a.record(None);
    assert_eq!(a, Answers::new());
    a.record(Some(8));
    a.record(Some(8));
    assert_eq!(a.check(&rules), None);
}
