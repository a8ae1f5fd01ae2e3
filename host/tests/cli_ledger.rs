//! `budgetgate ledger list | show | reset --ledger redis://…`: the fleet's
//! shared ledger read and reset by a person, against a real `redis-server`
//! (`SPEC E`: durable state; issue 13).

use std::time::Duration;

use assert_cmd::cargo::cargo_bin_cmd;
use budgetgate::ledger::LedgerTx;
use budgetgate::ledger_redis::RedisStore;
use budgetgate_core::budget::{Ledger, Limit};
use serde_json::Value;

mod common;

fn ledger_cmd(args: &[&str]) -> (Option<i32>, String, String) {
    let out = cargo_bin_cmd!("budgetgate")
        .arg("ledger")
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `SPEC E` (durable state): what gateways stored in Redis is listed with
/// its figures, shown per session with its log, and reset to zero by an
/// operator (logged), through the same commands as the SQLite ledger.
#[test]
fn the_ledger_commands_read_and_reset_a_redis_ledger() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let mut store = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    store
        .decide("fleet-a", |tx| {
            let mut l: Ledger = Ledger::new(1_000);
            l.set_max(Limit::ToolCalls, Some(10));
            l.record(Limit::ToolCalls, 7);
            tx.put_ledger("fleet-a", "", &l, 1_764_590_000_000)?;
            tx.log(1_764_590_000_000, "fleet-a", "call", "echo let through")
        })
        .expect("stored");
    store
        .decide("{odd}%", |tx| {
            tx.put_ledger("{odd}%", "", &Ledger::new(0), 1_764_580_000_000)
        })
        .expect("stored");

    let (code, out, err) = ledger_cmd(&["list", "--json", "--ledger", &redis.url]);
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    // Newest update first; the hash tag's escapes undone.
    assert_eq!(rows[0]["session"], "fleet-a");
    assert_eq!(rows[1]["session"], "{odd}%");
    assert_eq!(rows[0]["limits"]["tool_calls"]["used"], 7);
    assert_eq!(rows[0]["limits"]["tool_calls"]["max"], 10);
    assert_eq!(rows[0]["updated_ms"], 1_764_590_000_000u64);

    let (code, out, err) = ledger_cmd(&["show", "fleet-a", "--ledger", &redis.url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("echo let through"), "{out}");
    let (code, _, err) = ledger_cmd(&["show", "nobody", "--ledger", &redis.url]);
    assert_eq!(code, Some(2));
    assert!(err.contains("nobody") && err.contains(&redis.url), "{err}");

    let (code, out, err) = ledger_cmd(&["reset", "fleet-a", "--yes", "--ledger", &redis.url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 ledger(s) reset"), "{out}");
    let after = store
        .decide("fleet-a", |tx| tx.ledger("fleet-a", ""))
        .expect("read")
        .expect("still there");
    assert_eq!(after.used(Limit::ToolCalls), 0);
    let log = store.log().expect("log");
    assert!(
        log.iter()
            .any(|(_, s, action, _)| s == "fleet-a" && action == "reset"),
        "{log:?}"
    );
}

/// A session the gateways refuse is listed with the reason, and one bad key
/// does not hide the others: a session whose ledger key is of another type,
/// and one with calls but no ledger (deleted by hand), are listed as
/// unreadable (exit 1) beside the sound ones.
#[test]
fn a_redis_listing_names_broken_sessions_and_goes_on() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let mut store = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    for session in ["good", "lost"] {
        store
            .decide(session, |tx| {
                tx.put_ledger(session, "", &Ledger::new(0), 1_764_590_000_000)?;
                tx.put_call(session, "c1", 7, "{}")
            })
            .expect("stored");
    }
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("DEL")
        .arg("bg:{lost}:ledger")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("bg:{wrong}:ledger")
        .arg("str")
        .query(&mut conn)
        .unwrap();
    let (code, out, err) = ledger_cmd(&["list", "--json", "--ledger", &redis.url]);
    assert_eq!(code, Some(1), "{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let row = |s: &str| {
        rows.iter()
            .find(|r| r["session"] == s)
            .unwrap_or_else(|| panic!("{s}: {out}"))
    };
    assert!(row("good")["limits"].is_object());
    assert!(row("lost")["error"]
        .as_str()
        .unwrap()
        .contains("no ledger record"));
    assert!(
        row("wrong")["error"]
            .as_str()
            .unwrap()
            .contains("WRONGTYPE"),
        "{out}"
    );
}

/// Fail closed, and a clear error: an unreachable Redis ledger is exit 2
/// naming the URL; an unknown scheme names what this build reads.
#[test]
fn the_ledger_commands_name_an_unreachable_or_unknown_ledger() {
    let (code, out, err) = ledger_cmd(&["list", "--ledger", "redis://127.0.0.1:1/0"]);
    assert_eq!((code, out.as_str()), (Some(2), ""));
    assert!(err.contains("redis://127.0.0.1:1/0"), "{err}");
    let (code, _, err) = ledger_cmd(&["list", "--ledger", "postgres://x/y"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("redis://HOST:PORT/DB, sqlite:FILE"), "{err}");
    // The option and its value are named once, not `ledger URL: --ledger URL:`.
    assert!(
        err.starts_with("budgetgate ledger: --ledger postgres://x/y: not a ledger"),
        "{err}"
    );
    assert_eq!(err.matches("postgres://x/y").count(), 1, "{err}");
    let (code, _, err) = ledger_cmd(&["list", "--ledger", "sqlite:/nonexistent/ledger.db"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/ledger.db"), "{err}");
    let (code, _, _) = ledger_cmd(&["list", "--ledger", "x", "--state", "y"]);
    assert_eq!(
        code,
        Some(2),
        "--ledger and --state together are a usage error"
    );
}

/// Fail closed without spurious refusals: a decision whose reads were torn
/// by another gateway's write (the session's ledger read as missing, then its
/// calls as present, "lost its ledger") is made again on the new figures,
/// not answered with the error the torn read gave. Found when parallel
/// gateways on one Redis budget refused a call now and then.
#[test]
fn a_decision_torn_by_a_concurrent_write_is_made_again() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let mut a = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    let mut b = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    let mut attempts = 0;
    let decided = a.decide("race", |tx| {
        attempts += 1;
        let ledger = tx.ledger("race", "")?;
        if attempts == 1 {
            b.decide("race", |other| {
                other.put_ledger("race", "", &Ledger::new(0), 1)?;
                other.put_call("race", "c0", 1, "{}")
            })
            .expect("the other gateway's write");
        }
        match ledger {
            Some(ledger) => Ok(ledger),
            None if tx.has_traces("race")? => {
                Err(budgetgate::ledger::StoreError::LostLedger("race".into()))
            }
            None => Ok(Ledger::new(0)),
        }
    });
    assert!(decided.is_ok(), "{decided:?}");
    assert_eq!(attempts, 2, "made again once");
}

/// Issue 29: each session's log is its own key (`bg:{S}:log`, on the
/// session's cluster slot); `ledger show` reads it merged by time with the
/// shared `bg:log` an earlier build wrote.
#[test]
fn ledger_show_merges_the_sessions_own_log_with_the_old_shared_one() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let mut store = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    store
        .decide("fleet-b", |tx| {
            tx.put_ledger("fleet-b", "", &Ledger::new(0), 1_764_590_000_000)?;
            tx.log(1_764_590_000_000, "fleet-b", "call", "the newer entry")
        })
        .expect("stored");
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("bg:log")
        .arg(
            serde_json::json!({"at_ms": 1_764_500_000_000u64, "session": "fleet-b",
                "action": "call", "detail": "the older entry"})
            .to_string(),
        )
        .query(&mut conn)
        .unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg("bg:{fleet-b}:log")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kind, "list");
    let (code, out, err) = ledger_cmd(&["show", "fleet-b", "--ledger", &redis.url]);
    assert_eq!(code, Some(0), "{err}");
    let older = out.find("the older entry").expect(&out);
    let newer = out.find("the newer entry").expect(&out);
    assert!(older < newer, "merged by time: {out}");
}

/// Runs `budgetgate ledger ARGS` under a Python parent that reports the
/// child's peak resident memory: (exit status, stdout, stderr, peak KiB).
fn ledger_cmd_peak(args: &[&str]) -> (Option<i32>, String, String, u64) {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import resource, subprocess, sys\n\
             p = subprocess.run(sys.argv[1:], capture_output=True)\n\
             sys.stdout.buffer.write(p.stdout)\n\
             sys.stderr.buffer.write(p.stderr)\n\
             sys.stderr.write('PEAK %d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
             sys.exit(p.returncode)",
        )
        .arg(env!("CARGO_BIN_EXE_budgetgate"))
        .arg("ledger")
        .args(args)
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (stderr, peak) = stderr.rsplit_once("PEAK ").expect("the peak");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr.to_owned(),
        peak.trim().parse().expect("KiB"),
    )
}

/// JSON lines of a listing, by session.
fn rows_by_session(out: &str) -> std::collections::BTreeMap<String, Value> {
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .map(|v| (v["session"].as_str().expect("a session").to_owned(), v))
        .collect()
}

/// Peak memory of a listing, in KiB: a 50 MB record is never read whole.
const LISTING_PEAK_KIB: u64 = 30 * 1024;

/// Issue 29: one bad row of a SQLite ledger does not take the listing
/// down: a record stored as text (not a blob) and one of 50 MB are each
/// listed with what is wrong (exit 1, as a record that does not decode),
/// the sound sessions beside them; the 50 MB record is never loaded (its
/// length is read first). `ledger show` of a bad session names it (exit
/// 1), of a sound one works (exit 0).
#[test]
fn a_sqlite_listing_names_a_wrong_typed_or_oversized_record_and_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store =
        budgetgate::ledger::Store::open(dir.path(), Duration::from_secs(5)).expect("ledger");
    for session in ["good-1", "good-2"] {
        store
            .decide(|tx: &mut budgetgate::ledger::Tx<'_>| {
                tx.put_ledger(session, "", &Ledger::new(0), 1_764_590_000_000)
            })
            .expect("stored");
    }
    drop(store);
    let file = dir.path().join(budgetgate::ledger::FILE_NAME);
    let conn = rusqlite::Connection::open(&file).expect("sqlite");
    conn.execute_batch(
        "INSERT INTO ledgers VALUES ('typed', '', 'not a blob', 5);
         INSERT INTO ledgers VALUES ('huge', '', zeroblob(52428800), 6);",
    )
    .expect("bad rows");
    drop(conn);
    let ledger = format!("sqlite:{}", file.display());

    let (code, out, err, peak) = ledger_cmd_peak(&["list", "--json", "--ledger", &ledger]);
    assert_eq!(code, Some(1), "{err}");
    let rows = rows_by_session(&out);
    assert!(rows["good-1"]["limits"].is_object(), "{out}");
    assert!(rows["good-2"]["limits"].is_object(), "{out}");
    let typed = rows["typed"]["error"].as_str().expect("an error");
    assert!(typed.contains("text") && typed.contains("blob"), "{typed}");
    let huge = rows["huge"]["error"].as_str().expect("an error");
    assert!(huge.contains("52428800 bytes"), "{huge}");
    assert!(peak < LISTING_PEAK_KIB, "peak {peak} KiB");

    let (code, out, err) = ledger_cmd(&["show", "typed", "--ledger", &ledger]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.contains("unreadable") && out.contains("blob"), "{out}");
    let (code, out, err) = ledger_cmd(&["show", "good-1", "--ledger", &ledger]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("session good-1"), "{out}");
}

/// Issue 29: a 50 MB record in a Redis ledger is listed with its length
/// (exit 1) without being read (`HSTRLEN` first), beside the sound session.
#[test]
fn a_redis_listing_names_an_oversized_record_without_reading_it() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let mut store = RedisStore::open(&redis.url, Duration::from_secs(5)).expect("client");
    store
        .decide("good", |tx| {
            tx.put_ledger("good", "", &Ledger::new(0), 1_764_590_000_000)
        })
        .expect("stored");
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("HSET")
        .arg("bg:{huge}:ledger")
        .arg("")
        .arg(vec![0u8; 52_428_800])
        .query(&mut conn)
        .unwrap();
    let (code, out, err, peak) = ledger_cmd_peak(&["list", "--json", "--ledger", &redis.url]);
    assert_eq!(code, Some(1), "{err}");
    assert!(peak < LISTING_PEAK_KIB, "peak {peak} KiB");
    let rows = rows_by_session(&out);
    assert!(rows["good"]["limits"].is_object(), "{out}");
    let huge = rows["huge"]["error"].as_str().expect("an error");
    assert!(huge.contains("52428800 bytes"), "{huge}");
}
