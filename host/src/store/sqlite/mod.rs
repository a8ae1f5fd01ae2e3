//! The SQLite store: one ledger file ([`Store`]), every decision one
//! `BEGIN IMMEDIATE` transaction ([`Tx`], its reads and writes in
//! `tx.rs`).
//!
//! Concurrency and crashes are SQLite's: every decision is one
//! `BEGIN IMMEDIATE` transaction (writers queue on the database lock, so two
//! hook processes never decide on the same figures), the journal is WAL with
//! `synchronous = FULL` (the gateway's `--durability normal` chooses
//! `NORMAL`: [`Durability`]), and a process killed mid-decision leaves the
//! transaction rolled back: the ledger of before that decision. A record that
//! does not decode (another version, a bad checksum) is an error, and the
//! caller refuses; it is never replaced by an empty ledger.

use std::path::Path;
use std::time::Duration;

use budgetgate_core::budget::Ledger;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection};

use super::{
    oversized_record, Commit, Durability, ListedLedger, StoreError, LOST_LEDGER, MAX_RECORD_LEN,
};

mod tx;

/// The schema's version, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 4;

/// The ledger file's name inside the state folder.
pub const FILE_NAME: &str = "ledger.sqlite3";

/// One open ledger file.
pub struct Store {
    pub(super) conn: Connection,
    path: String,
    durability: Durability,
    /// The connection's `synchronous` is not its durability's (a lazy
    /// commit could not set it back): set back before the next decision,
    /// which is refused while it cannot be.
    sync_off: bool,
}

impl Store {
    /// Opens (creating if needed) the ledger in `dir`; waits at most `wait`
    /// for another process's lock on every statement. Fully durable
    /// ([`Durability::Full`]).
    pub fn open(dir: &Path, wait: Duration) -> Result<Self, StoreError> {
        Self::open_with(dir, wait, Durability::Full)
    }

    /// [`Store::open`] with the durability of this connection's commits.
    pub fn open_with(
        dir: &Path,
        wait: Duration,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Folder {
            path: dir.display().to_string(),
            source,
        })?;
        Self::open_file_with(&dir.join(FILE_NAME), wait, durability)
    }

    /// Opens (creating if needed) the ledger file `file` itself (its folder
    /// must exist); waits at most `wait` for another process's lock. Fully
    /// durable ([`Durability::Full`]).
    pub fn open_file(file: &Path, wait: Duration) -> Result<Self, StoreError> {
        Self::open_file_with(file, wait, Durability::Full)
    }

    /// [`Store::open_file`] with the durability of this connection's
    /// commits. The setting is the connection's own: processes sharing one
    /// file may differ, and a `Full` commit also makes every earlier commit
    /// in the WAL durable.
    pub fn open_file_with(
        file: &Path,
        wait: Duration,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let path = file.display().to_string();
        let sql = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(file).map_err(sql)?;
        conn.busy_timeout(wait).map_err(sql)?;
        // Every statement a decision runs stays prepared (the hook's and
        // the gateway's together are about 30).
        conn.set_prepared_statement_cache_capacity(64);
        // Small pages for a new file (no effect on an existing one): a
        // decision changes a few rows in small tables, and each page it
        // touches is written whole to the WAL at commit.
        conn.pragma_update(None, "page_size", 1024).map_err(sql)?;
        // WAL: readers never block the writer; FULL: a committed decision
        // survives a power cut, not only a crash (NORMAL: a crash only).
        // Several processes opening a new file at once race to switch it to
        // WAL, and the loser is told "busy" at once (the busy timeout does
        // not cover it): retried until the wait is over.
        let started = std::time::Instant::now();
        loop {
            match conn.pragma_update(None, "journal_mode", "WAL") {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy && started.elapsed() < wait =>
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(sql(e)),
            }
        }
        conn.pragma_update(None, "synchronous", durability.synchronous())
            .map_err(sql)?;
        let mut store = Self {
            conn,
            path,
            durability,
            sync_off: false,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        /// Version 3 adds each session's loop window (`[loops]`).
        const MIGRATE_2_TO_3: &str = "CREATE TABLE loop_windows (
                session TEXT NOT NULL, agent TEXT NOT NULL, record BLOB NOT NULL,
                PRIMARY KEY (session, agent));
             PRAGMA user_version = 3;";
        /// Version 4 keeps, with each transcript's offset, the response its
        /// last lines left open (`crate::transcript`), and the response
        /// each tool call was first shown in.
        const MIGRATE_3_TO_4: &str = "ALTER TABLE transcripts ADD COLUMN open TEXT;
             CREATE TABLE transcript_calls (
                session TEXT NOT NULL, call_id TEXT NOT NULL, message_id TEXT NOT NULL,
                PRIMARY KEY (session, call_id));
             PRAGMA user_version = 4;";
        self.decide(|t: &mut Tx<'_>| {
            let sql = t.sql();
            let found: i64 =
                t.tx.query_row("PRAGMA user_version", [], |r| r.get(0))
                    .map_err(&sql)?;
            match found {
                0 => {
                    t.tx.execute_batch(
                        "CREATE TABLE ledgers (
                        session TEXT NOT NULL, agent TEXT NOT NULL,
                        record BLOB NOT NULL, updated_ms INTEGER NOT NULL,
                        PRIMARY KEY (session, agent));
                     CREATE TABLE call_ids (
                        session TEXT NOT NULL, call_id TEXT NOT NULL,
                        fingerprint BLOB NOT NULL, answer TEXT NOT NULL,
                        PRIMARY KEY (session, call_id));
                     CREATE TABLE repeats (
                        session TEXT NOT NULL, fingerprint BLOB NOT NULL, count INTEGER NOT NULL,
                        PRIMARY KEY (session, fingerprint));
                     CREATE TABLE transcripts (
                        session TEXT NOT NULL, path TEXT NOT NULL, offset INTEGER NOT NULL,
                        PRIMARY KEY (session, path));
                     CREATE TABLE responses (
                        session TEXT NOT NULL, key TEXT NOT NULL, agent TEXT NOT NULL,
                        model TEXT NOT NULL,
                        input INTEGER NOT NULL, output INTEGER NOT NULL,
                        cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL,
                        PRIMARY KEY (session, key));
                     CREATE TABLE unpriced (
                        session TEXT NOT NULL, model TEXT NOT NULL,
                        PRIMARY KEY (session, model));
                     CREATE TABLE log (
                        at_ms INTEGER NOT NULL, session TEXT NOT NULL,
                        action TEXT NOT NULL, detail TEXT NOT NULL);
                     CREATE TABLE reservations (
                        session TEXT NOT NULL, key TEXT NOT NULL, tool TEXT NOT NULL,
                        expires_ms INTEGER NOT NULL,
                        PRIMARY KEY (session, key));
                     CREATE TABLE rate_calls (
                        session TEXT NOT NULL, at_ms INTEGER NOT NULL);
                     CREATE INDEX rate_calls_at ON rate_calls (session, at_ms);
                     PRAGMA user_version = 2;",
                    )
                    .map_err(&sql)?;
                    t.tx.execute_batch(MIGRATE_2_TO_3).map_err(&sql)?;
                    t.tx.execute_batch(MIGRATE_3_TO_4).map_err(&sql)
                }
                // Version 2 (before loop detection) and 3 (before open
                // responses were kept): their tables are kept as they are;
                // what is new is added.
                2 => {
                    t.tx.execute_batch(MIGRATE_2_TO_3).map_err(&sql)?;
                    t.tx.execute_batch(MIGRATE_3_TO_4).map_err(&sql)
                }
                3 => t.tx.execute_batch(MIGRATE_3_TO_4).map_err(&sql),
                SCHEMA_VERSION => Ok(()),
                other => Err(StoreError::Schema {
                    path: t.path.clone(),
                    found: other,
                }),
            }
        })
    }

    /// Runs `decide` in one `BEGIN IMMEDIATE` transaction: committed when it
    /// returns `Ok`, rolled back (nothing changed) when it returns `Err` or
    /// the process dies first.
    pub fn decide<T, E: From<StoreError>>(
        &mut self,
        decide: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        if self.sync_off {
            self.set_synchronous(self.durability)?;
            self.sync_off = false;
        }
        self.run(decide)
    }

    /// The transaction of [`Self::decide`], at the connection's
    /// `synchronous` as it is.
    fn run<T, E: From<StoreError>>(
        &mut self,
        decide: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = Open::begin(&self.conn).map_err(sql)?;
        let mut handle = Tx {
            tx,
            path: path.clone(),
        };
        let out = decide(&mut handle)?;
        handle.tx.commit().map_err(sql)?;
        Ok(out)
    }

    /// [`Self::decide`] with a commit that is not waited for on disk
    /// ([`Commit::Lazy`]): on a [`Durability::Full`] connection this one
    /// commit is made as with `Normal` (it survives a crash of the process;
    /// a power cut before the next durable commit may lose it), and the
    /// next durable commit makes it durable with itself (the WAL is synced
    /// whole).
    pub fn decide_with<T, E: From<StoreError>>(
        &mut self,
        commit: Commit,
        decide: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        if commit == Commit::Durable || self.durability != Durability::Full {
            return self.decide(decide);
        }
        self.set_synchronous(Durability::Normal)?;
        self.sync_off = true;
        let out = self.run(decide);
        // Back to the connection's own, whatever the decision did; failing
        // that, before the next decision (refused while it cannot be).
        if self.set_synchronous(self.durability).is_ok() {
            self.sync_off = false;
        }
        out
    }

    fn set_synchronous(&self, durability: Durability) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "synchronous", durability.synchronous())
            .map_err(self.sql())
    }

    /// Every stored ledger: (session, agent, ledger or why it cannot be
    /// read, updated_ms), sessions in order of last update, newest first.
    /// A row that cannot be read is listed with the reason (a record that
    /// does not decode, is not a blob, or is longer than any record: its
    /// length is read first, and such a record never loaded), and the
    /// listing goes on.
    pub fn list(&self) -> Result<Vec<ListedLedger>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT session, agent, typeof(record), length(record),
                        CASE WHEN typeof(record) = 'blob' AND length(record) <= ?1
                             THEN record END,
                        updated_ms
                 FROM ledgers ORDER BY updated_ms DESC, session, agent",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([to_i64(MAX_RECORD_LEN as u64)], |r| {
                Ok((
                    r.get::<_, SqlValue>(0)?,
                    r.get::<_, SqlValue>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<Vec<u8>>>(4)?,
                    r.get::<_, SqlValue>(5)?,
                ))
            })
            .map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            let (session, agent, kind, len, record, updated_ms) = row.map_err(self.sql())?;
            let (session, bad_session) = listed_text(session, "session id");
            let (agent, bad_agent) = listed_text(agent, "agent id");
            let ledger = match (bad_session.or(bad_agent), record) {
                (Some(bad), _) => Err(bad),
                (None, _) if kind != "blob" => {
                    Err(format!("its record is stored as {kind}, not a blob"))
                }
                (None, Some(record)) => Ledger::from_record(&record).map_err(|e| e.to_string()),
                (None, None) => Err(oversized_record(len.map_or(0, to_u64))),
            };
            out.push(ListedLedger {
                ledger,
                session,
                agent,
                updated_ms: match updated_ms {
                    SqlValue::Integer(ms) => to_u64(ms),
                    _ => 0,
                },
            });
        }
        // Sessions whose ledger was lost: refused until reset, so listed.
        let mut lost = self
            .conn
            .prepare(
                "SELECT DISTINCT session FROM (
                     SELECT session FROM transcripts UNION SELECT session FROM responses
                     UNION SELECT session FROM call_ids)
                 WHERE session NOT IN (SELECT session FROM ledgers WHERE agent = '')
                 ORDER BY session",
            )
            .map_err(self.sql())?;
        let sessions = lost
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.sql())?;
        for session in sessions {
            out.push(ListedLedger {
                session: session.map_err(self.sql())?,
                agent: String::new(),
                ledger: Err(LOST_LEDGER.to_owned()),
                updated_ms: 0,
            });
        }
        Ok(out)
    }

    /// Forgives what `session` has used (an operator's reset): every ledger
    /// of the session (its own and its sub-agents') starts again from zero
    /// at `now_ms`, and its repetition counts, rate windows and reservations
    /// are cleared; what was already read of its transcripts stays read, so
    /// it is not counted again, and its call ids stay seen. Logged in the
    /// ledger's own log. Returns how many ledgers were reset (0: no such
    /// session).
    pub fn reset(&mut self, session: &str, now_ms: u64, who: &str) -> Result<usize, StoreError> {
        self.decide(|tx: &mut Tx<'_>| {
            let sql = tx.sql();
            let fresh: Ledger = Ledger::new(now_ms);
            let mut n = tx
                .tx
                .execute(
                    "UPDATE ledgers SET record = ?2, updated_ms = ?3 WHERE session = ?1",
                    params![session, fresh.to_record().as_bytes(), to_i64(now_ms)],
                )
                .map_err(&sql)?;
            // A session that lost its ledger gets a fresh one.
            if n == 0 && tx.has_traces(session)? {
                tx.put_ledger(session, "", &fresh, now_ms)?;
                n = 1;
            }
            for table in [
                "repeats",
                "unpriced",
                "reservations",
                "rate_calls",
                "loop_windows",
            ] {
                tx.tx
                    .execute(
                        &format!("DELETE FROM {table} WHERE session = ?1"),
                        [session],
                    )
                    .map_err(&sql)?;
            }
            if n > 0 {
                tx.log(
                    now_ms,
                    session,
                    "reset",
                    &format!("{n} ledger(s) reset to zero by {who}"),
                )?;
            }
            Ok::<_, StoreError>(n)
        })
    }

    /// The log, oldest first: (at_ms, session, action, detail).
    pub fn log(&self) -> Result<Vec<(u64, String, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT at_ms, session, action, detail FROM log ORDER BY rowid")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                ))
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }
}

/// A text column of a listed row as text, and what is wrong with it when
/// it is stored as another type (`what`: the column, for the message).
fn listed_text(value: SqlValue, what: &str) -> (String, Option<String>) {
    let (shown, kind) = match value {
        SqlValue::Text(text) => return (text, None),
        SqlValue::Blob(bytes) => (String::from_utf8_lossy(&bytes).into_owned(), "blob"),
        SqlValue::Integer(n) => (n.to_string(), "integer"),
        SqlValue::Real(x) => (x.to_string(), "real"),
        SqlValue::Null => (String::new(), "null"),
    };
    (
        shown,
        Some(format!("its {what} is stored as {kind}, not text")),
    )
}

/// A decision's transaction: read and write one session's state.
pub struct Tx<'a> {
    pub(in crate::store) tx: Open<'a>,
    path: String,
}

/// A `BEGIN IMMEDIATE` transaction open on a connection, rolled back when
/// dropped uncommitted (an error, a panic). Its `BEGIN`, `COMMIT` and
/// `ROLLBACK` are statements cached on the connection like every other:
/// `rusqlite::Transaction` prepares them anew each time, which was about a
/// tenth of a gated call's instructions in the gateway (`docs/BENCHMARKS.md`).
pub(in crate::store) struct Open<'a> {
    conn: &'a Connection,
    committed: bool,
}

impl<'a> Open<'a> {
    fn begin(conn: &'a Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self {
            conn,
            committed: false,
        })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for Open<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        // Nothing of an uncommitted decision is kept; should even this
        // fail, SQLite rolls back a transaction left open when the
        // connection closes.
        if !self.committed && !self.conn.is_autocommit() {
            let _ = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
        }
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
