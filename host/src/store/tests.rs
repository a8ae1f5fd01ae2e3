//! The stores' unit tests (`SPEC E`, durable state).

use super::*;
use rusqlite::Connection;
use std::time::Duration;

/// One reader of `--ledger` for every command that takes it.
#[test]
fn a_ledger_url_is_redis_a_sqlite_file_or_a_state_folder() {
    let parse = |u| LedgerUrl::parse(Some(u), None);
    assert_eq!(
        parse("redis://127.0.0.1:6379/0"),
        Ok(LedgerUrl::Redis("redis://127.0.0.1:6379/0".into()))
    );
    assert_eq!(
        parse("rediss://h/1"),
        Ok(LedgerUrl::Redis("rediss://h/1".into()))
    );
    assert_eq!(
        parse("sqlite:/tmp/l.db"),
        Ok(LedgerUrl::SqliteFile("/tmp/l.db".into()))
    );
    assert_eq!(parse("/var/x"), Ok(LedgerUrl::StateDir("/var/x".into())));
    let e = parse("postgres://h/db").unwrap_err();
    assert!(
        e.contains("postgres://h/db") && e.contains("sqlite:FILE"),
        "{e}"
    );
    assert_eq!(
        LedgerUrl::parse(None, Some(Path::new("/s"))),
        Ok(LedgerUrl::StateDir("/s".into()))
    );
    // The in-process ledger is the Python package's alone: a command
    // refuses it (never a folder named "memory:").
    for url in ["memory:", "memory:shared"] {
        let e = parse(url).unwrap_err();
        assert!(
            e.contains(&format!("--ledger {url}:")) && e.contains("sqlite:FILE"),
            "{e}"
        );
    }
}

/// Issue 29: a listing refuses a record longer than `MAX_RECORD_LEN`
/// unread, so no longer record may be one a build reads: the longest
/// is a version-1 record of exactly that length.
#[test]
fn no_record_longer_than_the_largest_is_read() {
    let shaped = |len: usize, version: u8| {
        let mut bytes = vec![0u8; len];
        bytes[..3].copy_from_slice(b"BGL");
        bytes[3] = version;
        Ledger::<MAX_TOOLS>::from_record(&bytes)
    };
    // Of its version's length: refused for its checksum, not its length.
    assert!(matches!(
        shaped(MAX_RECORD_LEN, 1),
        Err(RecordError::Checksum)
    ));
    assert!(matches!(shaped(RECORD_LEN, 2), Err(RecordError::Checksum)));
    for len in [MAX_RECORD_LEN + 1, 2 * MAX_RECORD_LEN] {
        for version in [1, 2] {
            assert!(matches!(
                shaped(len, version),
                Err(RecordError::Length(n)) if n == len
            ));
        }
    }
}

/// Issue 13 (latency): a new ledger file has 1 KiB pages (fewer bytes
/// written to the WAL per decision); a file made before keeps its page
/// size and is read and written as ever.
#[test]
fn a_new_ledger_has_small_pages_and_an_old_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let page_size = |store: &Store| -> i64 {
        store
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    };
    let new = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
    assert_eq!(page_size(&new), 1024);
    // A ledger made with SQLite's default pages (an earlier build's).
    let old = dir.path().join("old.sqlite3");
    {
        let conn = Connection::open(&old).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    }
    let mut store = Store::open_file(&old, Duration::from_secs(1)).unwrap();
    assert_eq!(page_size(&store), 4096);
    store
        .decide(|t: &mut Tx<'_>| t.log(1, "s", "a", "b"))
        .unwrap();
    assert_eq!(page_size(&store), 4096);
}

/// Issue 13 (`--durability`): a store opened `Normal` commits with
/// `synchronous = NORMAL` (1), one opened `Full` (the default of
/// `open` and `open_file`) with `FULL` (2); both in WAL.
#[test]
fn the_durability_is_the_connections_synchronous_setting() {
    let dir = tempfile::tempdir().unwrap();
    let setting = |store: &Store| -> (i64, String) {
        let sync = store
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        let journal = store
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        (sync, journal)
    };
    let wait = Duration::from_secs(5);
    let normal = Store::open_with(dir.path(), wait, Durability::Normal).unwrap();
    assert_eq!(setting(&normal), (1, "wal".into()));
    let full = Store::open(dir.path(), wait).unwrap();
    assert_eq!(setting(&full), (2, "wal".into()));
    let file = dir.path().join(FILE_NAME);
    assert_eq!(setting(&Store::open_file(&file, wait).unwrap()).0, 2);
    assert_eq!(
        setting(&Store::open_file_with(&file, wait, Durability::Normal).unwrap()).0,
        1
    );
}

/// Issue 31 (the proxy's latency with `full`): a lazy commit
/// ([`Commit::Lazy`], a model call's counted response) is made at
/// `synchronous = NORMAL` on a `Full` connection, which is `FULL` again
/// after it, whether the decision committed or failed; a durable one, and
/// any on a `Normal` connection, keep the connection's own.
#[test]
fn a_lazy_commit_alone_skips_the_sync_and_the_connection_keeps_its_durability() {
    let dir = tempfile::tempdir().unwrap();
    let wait = Duration::from_secs(5);
    let sync_of = |t: &mut Tx<'_>| -> Result<i64, StoreError> {
        Ok(t.tx
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap())
    };
    let mut full = Store::open(dir.path(), wait).unwrap();
    let during = full
        .decide_with(Commit::Lazy, |t| {
            LedgerTx::log(&*t, 1, "s", "model", "lazy")?;
            sync_of(t)
        })
        .unwrap();
    assert_eq!(during, 1, "made at NORMAL");
    let after = full.decide_with(Commit::Durable, sync_of).unwrap();
    assert_eq!(after, 2, "FULL again for the next decision");
    let failed: Result<(), StoreError> = full.decide_with(Commit::Lazy, |t| {
        LedgerTx::log(&*t, 2, "s", "model", "rolled back")?;
        Err(StoreError::Schema {
            path: "x".into(),
            found: 0,
        })
    });
    assert!(failed.is_err());
    assert_eq!(full.decide(sync_of).unwrap(), 2);
    let logged: Vec<String> = {
        let mut stmt = full.conn.prepare("SELECT detail FROM log").unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(
        logged,
        ["lazy"],
        "committed once; the failed one changed nothing"
    );
    let mut normal = Store::open_with(dir.path(), wait, Durability::Normal).unwrap();
    assert_eq!(normal.decide_with(Commit::Lazy, sync_of).unwrap(), 1);
    assert_eq!(normal.decide_with(Commit::Durable, sync_of).unwrap(), 1);
}
