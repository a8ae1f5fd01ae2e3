//! The durable ledger every desktop front-end shares: one SQLite file
//! (`SPEC E`, durable state).
//!
//! Per session (and per sub-agent inside it) the store keeps the core's
//! [`budget::Record`](budgetgate_core::budget::Record) — fixed-size,
//! versioned, checksummed bytes — beside what the hook needs to resume: the
//! call ids seen, the repetition fingerprints with their counts, how far
//! each transcript has been read and the usage already counted per model
//! response. The store never interprets a budget: it keeps bytes and sets.
//!
//! Concurrency and crashes are SQLite's: every decision is one
//! `BEGIN IMMEDIATE` transaction (writers queue on the database lock, so two
//! hook processes never decide on the same figures), the journal is WAL with
//! `synchronous = FULL` (the gateway's `--durability normal` chooses
//! `NORMAL`: [`Durability`]), and a process killed mid-decision leaves the
//! transaction rolled back: the ledger of before that decision. A record that
//! does not decode (another version, a bad checksum) is an error, and the
//! caller refuses; it is never replaced by an empty ledger.
//!
//! Where the file is: `--state DIR`, else `BUDGETGATE_STATE_DIR`, else
//! `$XDG_STATE_HOME/budgetgate`, else `~/.local/state/budgetgate`; the file
//! is `ledger.sqlite3` in that folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use budgetgate_core::budget::{Ledger, RecordError, RECORD_LEN};
use budgetgate_core::limits::MAX_TOOLS;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection, OptionalExtension};

/// The schema's version, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 2;

/// The ledger file's name inside the state folder.
pub const FILE_NAME: &str = "ledger.sqlite3";

/// The longest stored record any build reads (a version-1 record, whose
/// tool slots also kept a cap): a listing refuses a longer one by its
/// length, without loading it.
pub const MAX_RECORD_LEN: usize = RECORD_LEN + MAX_TOOLS * 4;

/// Why a stored record of `len` bytes is not read: longer than any record.
pub fn oversized_record(len: u64) -> String {
    format!("its record is {len} bytes, longer than any ledger record ({MAX_RECORD_LEN} bytes at most); not read")
}

/// How durable a committed decision is (SQLite's `synchronous` with the WAL
/// journal; `docs/MCP.md`, "Durability").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Durability {
    /// Every decision is on disk (fsync) before it is answered: it
    /// survives a crash of the process and a power cut (SQLite
    /// `synchronous = FULL`).
    #[default]
    Full,
    /// A decision survives a crash of the process, not a power cut or a
    /// crash of the system, which may lose the last decisions and give
    /// their budget back; about four times faster per gated call on a disk
    /// (SQLite `synchronous = NORMAL`).
    Normal,
}

impl Durability {
    /// SQLite's `synchronous` value for it.
    pub const fn synchronous(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Why the store could not answer; the caller refuses (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written, or its lock was
    /// not had before the deadline.
    #[error("ledger {path}: {source}")]
    Sqlite {
        /// The file.
        path: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A stored record does not decode.
    #[error("ledger {path}: session {session:?}: {source}")]
    Record {
        /// The file.
        path: String,
        /// The session.
        session: String,
        /// What is wrong with the record.
        source: RecordError,
    },
    /// The Redis ledger could not be reached, read or written.
    #[error("ledger {url}: {detail}")]
    Redis {
        /// The server's URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// A key of a session in the Redis ledger holds another type than the
    /// ledger keeps there (another client wrote it): the transaction is
    /// not made, so that none of it is (fail closed for the session).
    #[error("ledger {url}: key {key} holds a {found}, not the {expected} budgetgate keeps there (written by another client?); nothing was written, and the session's gated calls are refused until the key is repaired")]
    RedisType {
        /// The server's URL.
        url: String,
        /// The key.
        key: String,
        /// Its type, as Redis `TYPE` names it.
        found: String,
        /// The type the ledger keeps there.
        expected: String,
    },
    /// The Redis ledger of a session vanished or was replaced under this
    /// gateway: its epoch key is missing, or another than the one seen.
    #[error("ledger {url}: the Redis ledger of session {session:?} vanished or was replaced under this gateway (its epoch key {key} {what}): the server restarted without persistence, or the database was flushed, so budget already used could come back; every gated call of the session is refused (fail closed): check the server (appendonly yes), then restart the gateway")]
    RedisVanished {
        /// The server's URL.
        url: String,
        /// The session.
        session: String,
        /// The epoch key (`bg:{SESSION}:epoch`).
        key: String,
        /// What was found of it (`is missing`, `holds another …`).
        what: &'static str,
    },
    /// The file has another schema version.
    #[error("ledger {path}: schema version {found}; this build reads version {SCHEMA_VERSION}")]
    Schema {
        /// The file.
        path: String,
        /// The version found.
        found: i64,
    },
    /// A session has transcript offsets, counted responses or call ids but
    /// no ledger: its ledger was removed, which is corruption.
    #[error("session {0:?} has lost its ledger record (its other state is still there); refusing until an operator runs `budgetgate ledger reset`")]
    LostLedger(String),
    /// A stored answer of a call does not read back.
    #[error("a stored answer does not read back: {0}")]
    Answer(String),
    /// A command that only looks (`ledger list`, `show`, `reset`) was
    /// pointed at a ledger file that does not exist: it never creates one.
    #[error("ledger {path}: no such file (no hook or gateway has run with this ledger)")]
    NotFound {
        /// The file looked for.
        path: String,
    },
    /// The state folder could not be made.
    #[error("state folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The state folder: `explicit`, else `BUDGETGATE_STATE_DIR`, else
/// `$XDG_STATE_HOME/budgetgate`, else `$HOME/.local/state/budgetgate`.
pub fn state_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_owned();
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = env("BUDGETGATE_STATE_DIR") {
        return dir.into();
    }
    if let Some(dir) = env("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("budgetgate");
    }
    let home = env("HOME").map(PathBuf::from).unwrap_or_else(|| ".".into());
    home.join(".local/state/budgetgate")
}

/// Where a ledger is, as `--ledger URL` names it (the one reader of that
/// option, for the gateways and `budgetgate ledger`): `redis://…` (or
/// `rediss://…` where the client supports it), `sqlite:FILE`, or a state
/// folder; no URL is the default state folder ([`state_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerUrl {
    /// A Redis (or Valkey) server.
    Redis(String),
    /// A SQLite file (`sqlite:FILE`).
    SqliteFile(PathBuf),
    /// A state folder holding [`FILE_NAME`].
    StateDir(PathBuf),
}

impl LedgerUrl {
    /// Reads `url` (`None`: the state folder `state`, else the default).
    /// A URL of another scheme is an error that names it and the forms.
    pub fn parse(url: Option<&str>, state: Option<&Path>) -> Result<Self, String> {
        let Some(url) = url else {
            return Ok(Self::StateDir(state_dir(state)));
        };
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            return Ok(Self::Redis(url.to_owned()));
        }
        match url.strip_prefix("sqlite:") {
            Some(file) => Ok(Self::SqliteFile(PathBuf::from(file))),
            None if url.contains("://") => Err(format!(
                "--ledger {url}: not a ledger this build reads (redis://HOST:PORT/DB, sqlite:FILE or a state folder)"
            )),
            None => Ok(Self::StateDir(PathBuf::from(url))),
        }
    }
}

/// One open ledger file.
pub struct Store {
    conn: Connection,
    path: String,
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
        let mut store = Self { conn, path };
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
                    .map_err(&sql)
                }
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
            for table in ["repeats", "unpriced", "reservations", "rate_calls"] {
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

/// What a listing says of a session that has state (call ids, transcripts
/// read) but no ledger record: deleted by hand, or by a tool.
pub const LOST_LEDGER: &str = "no ledger record, though the session has state (the record was deleted): every gated call is refused until `budgetgate ledger reset SESSION`";

/// One stored ledger as listed.
#[derive(Debug)]
pub struct ListedLedger {
    /// The session id.
    pub session: String,
    /// The sub-agent id, empty for the session itself.
    pub agent: String,
    /// The ledger, or why it cannot be read: its record does not decode,
    /// is stored as another type or is longer than any record, or the
    /// session has state but lost its ledger ([`LOST_LEDGER`]).
    /// Every gated call of such a session is refused.
    pub ledger: Result<Ledger, String>,
    /// When it was last written, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
}

/// What a decision reads and writes in one transaction, whatever keeps it
/// (SQLite: [`Tx`]; Redis: [`crate::ledger_redis::RedisTx`]). Every method
/// is one session's state; the store never interprets budgets.
pub trait LedgerTx {
    /// The ledger of `session` / `agent` (`""`: the session), if stored.
    fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError>;
    /// Stores the ledger of `session` / `agent`.
    fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// The fingerprint and stored answer of `call_id`, if decided before.
    fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError>;
    /// Remembers `call_id` with its call's fingerprint and its answer.
    fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError>;
    /// Whether `session` has state beside its ledger (see [`Tx::has_traces`]).
    fn has_traces(&self, session: &str) -> Result<bool, StoreError>;
    /// Raises the count of `fingerprint` by one and returns it.
    fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError>;
    /// A model used without a price in cost mode, if any.
    fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError>;
    /// Appends to the ledger's own log.
    fn log(&self, at_ms: u64, session: &str, action: &str, detail: &str) -> Result<(), StoreError>;
    /// Stores reservation `key` of one call of `tool`, expiring at `expires_ms`.
    fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError>;
    /// Removes reservation `key` and returns its tool, if still held.
    fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError>;
    /// Removes the reservations expired by `now_ms` and returns their tools.
    fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError>;
    /// Remembers a call let through at `at_ms`; forgets those older than `keep_ms`.
    fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError>;
    /// Calls let through after `since_ms`, and the oldest's instant.
    fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError>;
    /// The store's own clock, in milliseconds since the Unix epoch, read
    /// once for this transaction, when the store has one (Redis: the
    /// server's `TIME`): gateways on many machines then decide and write on
    /// one clock, whatever their own clocks say. `None` (SQLite, on one
    /// machine): the caller's clock is the time.
    fn clock_ms(&self) -> Option<u64> {
        None
    }
    /// How far the transcript `path` of `session` has been counted (bytes;
    /// 0 when never read). The Claude Code hook's state.
    fn transcript_offset(&self, session: &str, path: &str) -> Result<u64, StoreError>;
    /// Records that transcript `path` has been counted up to `offset`.
    fn set_transcript_offset(
        &self,
        session: &str,
        path: &str,
        offset: u64,
    ) -> Result<(), StoreError>;
    /// The usage counted so far for model response `key`, if it was seen.
    fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError>;
    /// Stores the usage counted for model response `key` (of `agent`'s
    /// `model`).
    fn put_response(
        &self,
        session: &str,
        key: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError>;
    /// Records that `model`, which has no price, was used in `session`.
    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError>;
}

impl LedgerTx for Tx<'_> {
    fn transcript_offset(&self, session: &str, path: &str) -> Result<u64, StoreError> {
        Tx::offset(self, session, path)
    }
    fn set_transcript_offset(
        &self,
        session: &str,
        path: &str,
        offset: u64,
    ) -> Result<(), StoreError> {
        Tx::set_offset(self, session, path, offset)
    }
    fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError> {
        Tx::response(self, session, key)
    }
    fn put_response(
        &self,
        session: &str,
        key: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        Tx::put_response(self, session, key, agent, model, usage)
    }
    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        Tx::add_unpriced(self, session, model)
    }
    fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        Tx::ledger(self, session, agent)
    }
    fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        Tx::put_ledger(self, session, agent, ledger, now_ms)
    }
    fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        Tx::call(self, session, call_id)
    }
    fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        Tx::put_call(self, session, call_id, fingerprint, answer)
    }
    fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        Tx::has_traces(self, session)
    }
    fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        Tx::raise_repeat(self, session, fingerprint)
    }
    fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        Tx::unpriced(self, session)
    }
    fn log(&self, at_ms: u64, session: &str, action: &str, detail: &str) -> Result<(), StoreError> {
        Tx::log(self, at_ms, session, action, detail)
    }
    fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        Tx::put_reservation(self, session, key, tool, expires_ms)
    }
    fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError> {
        Tx::take_reservation(self, session, key)
    }
    fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        Tx::take_expired_reservations(self, session, now_ms)
    }
    fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        Tx::add_rate_call(self, session, at_ms, keep_ms)
    }
    fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        Tx::rate_calls_after(self, session, since_ms)
    }
}

/// A decision's transaction: read and write one session's state.
pub struct Tx<'a> {
    tx: Open<'a>,
    path: String,
}

/// A `BEGIN IMMEDIATE` transaction open on a connection, rolled back when
/// dropped uncommitted (an error, a panic). Its `BEGIN`, `COMMIT` and
/// `ROLLBACK` are statements cached on the connection like every other:
/// `rusqlite::Transaction` prepares them anew each time, which was about a
/// tenth of a gated call's instructions in the gateway (`docs/BENCHMARKS.md`).
struct Open<'a> {
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

/// Usage already counted for one model response (by request or message id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountedUsage {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Cache reads.
    pub cache_read: u64,
    /// Cache writes.
    pub cache_write: u64,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Tx<'_> {
    /// Runs `sql` with a statement cached on the connection: a gateway
    /// decides many calls on one connection, and preparing each statement
    /// anew was most of a decision's time.
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
        self.tx.prepare_cached(sql)?.execute(params)
    }

    /// [`Self::exec`] for a query of one row.
    fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.tx.prepare_cached(sql)?.query_row(params, f)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + use<'_> {
        let path = self.path.clone();
        move |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        }
    }

    /// The ledger of `session` / `agent` (`""` for the session itself), if
    /// one is stored. A record that does not decode is an error.
    pub fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        let record: Option<Vec<u8>> = self
            .row(
                "SELECT record FROM ledgers WHERE session = ?1 AND agent = ?2",
                params![session, agent],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        record
            .map(|bytes| {
                Ledger::from_record(&bytes).map_err(|source| StoreError::Record {
                    path: self.path.clone(),
                    session: session.to_owned(),
                    source,
                })
            })
            .transpose()
    }

    /// Stores the ledger of `session` / `agent`.
    pub fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO ledgers (session, agent, record, updated_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, agent) DO UPDATE SET record = ?3, updated_ms = ?4",
            params![
                session,
                agent,
                ledger.to_record().as_bytes(),
                to_i64(now_ms)
            ],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// The fingerprint and the stored answer of `call_id` in `session`, if
    /// it was decided before.
    pub fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        self.row(
            "SELECT fingerprint, answer FROM call_ids WHERE session = ?1 AND call_id = ?2",
            params![session, call_id],
            |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()
        .map_err(self.sql())
        .map(|found| {
            found.map(|(fp, answer)| {
                let mut bytes = [0u8; 16];
                if let Some(src) = fp.get(..16) {
                    bytes.copy_from_slice(src);
                }
                (u128::from_le_bytes(bytes), answer)
            })
        })
    }

    /// Remembers `call_id` for `session` with the call's fingerprint and the
    /// answer given (so the same call seen again gets the same answer).
    pub fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO call_ids (session, call_id, fingerprint, answer) VALUES (?1, ?2, ?3, ?4)",
            params![session, call_id, &fingerprint.to_le_bytes()[..], answer],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// Whether `session` has any state beside its ledger (transcript
    /// offsets, counted responses, call ids): a session with such state
    /// but no ledger has lost its ledger, which is corruption, not a new
    /// session.
    pub fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        self.row(
            "SELECT EXISTS (SELECT 1 FROM transcripts WHERE session = ?1)
                 OR EXISTS (SELECT 1 FROM responses WHERE session = ?1)
                 OR EXISTS (SELECT 1 FROM call_ids WHERE session = ?1)",
            [session],
            |r| r.get(0),
        )
        .map_err(self.sql())
    }

    /// Raises the count of `fingerprint` in `session` by one and returns it.
    pub fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        let key = fingerprint.to_le_bytes();
        let count: i64 = self
            .row(
                "INSERT INTO repeats (session, fingerprint, count) VALUES (?1, ?2, 1)
                 ON CONFLICT (session, fingerprint) DO UPDATE SET count = count + 1
                 RETURNING count",
                params![session, &key[..]],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        Ok(to_u64(count))
    }

    /// How far `path` has been read for `session`, in bytes.
    pub fn offset(&self, session: &str, path: &str) -> Result<u64, StoreError> {
        let offset: Option<i64> = self
            .row(
                "SELECT offset FROM transcripts WHERE session = ?1 AND path = ?2",
                params![session, path],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(offset.map_or(0, to_u64))
    }

    /// Records that `path` has been read up to `offset`.
    pub fn set_offset(&self, session: &str, path: &str, offset: u64) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO transcripts (session, path, offset) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session, path) DO UPDATE SET offset = ?3",
            params![session, path, to_i64(offset)],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// The usage counted so far for response `key`, if it was seen.
    pub fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError> {
        self.row(
            "SELECT input, output, cache_read, cache_write FROM responses
                 WHERE session = ?1 AND key = ?2",
            params![session, key],
            |r| {
                Ok(CountedUsage {
                    input: to_u64(r.get(0)?),
                    output: to_u64(r.get(1)?),
                    cache_read: to_u64(r.get(2)?),
                    cache_write: to_u64(r.get(3)?),
                })
            },
        )
        .optional()
        .map_err(self.sql())
    }

    /// Stores the usage counted for response `key`.
    pub fn put_response(
        &self,
        session: &str,
        key: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        self.exec(
                "INSERT INTO responses (session, key, agent, model, input, output, cache_read, cache_write)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (session, key) DO UPDATE SET
                   input = ?5, output = ?6, cache_read = ?7, cache_write = ?8",
                params![
                    session,
                    key,
                    agent,
                    model,
                    to_i64(usage.input),
                    to_i64(usage.output),
                    to_i64(usage.cache_read),
                    to_i64(usage.cache_write)
                ],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Remembers that `model` was used without a price in cost mode.
    pub fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        self.exec(
            "INSERT OR IGNORE INTO unpriced (session, model) VALUES (?1, ?2)",
            params![session, model],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// A model used without a price in `session`, if any.
    pub fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        self.row(
            "SELECT model FROM unpriced WHERE session = ?1 ORDER BY model LIMIT 1",
            [session],
            |r| r.get(0),
        )
        .optional()
        .map_err(self.sql())
    }

    /// Stores a reservation of one call of `tool` in `session`, named `key`
    /// (unique in the session), that expires at `expires_ms`.
    pub fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO reservations (session, key, tool, expires_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, key) DO UPDATE SET tool = ?3, expires_ms = ?4",
            params![session, key, tool, to_i64(expires_ms)],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// Removes the reservation `key` of `session` and returns its tool, if it
    /// is still held (`None`: ended already, or expired and rolled back).
    pub fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError> {
        let tool: Option<String> = self
            .row(
                "DELETE FROM reservations WHERE session = ?1 AND key = ?2 RETURNING tool",
                params![session, key],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(tool)
    }

    /// Removes every reservation of `session` that expired at or before
    /// `now_ms` and returns their tools (the caller rolls them back).
    pub fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .tx
            .prepare_cached(
                "DELETE FROM reservations WHERE session = ?1 AND expires_ms <= ?2 RETURNING tool",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![session, to_i64(now_ms)], |r| r.get(0))
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Remembers that a call of `session` was let through at `at_ms`, and
    /// forgets those older than `keep_ms` before it.
    pub fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        self.exec(
            "DELETE FROM rate_calls WHERE session = ?1 AND at_ms < ?2",
            params![session, to_i64(at_ms.saturating_sub(keep_ms))],
        )
        .map_err(self.sql())?;
        self.exec(
            "INSERT INTO rate_calls (session, at_ms) VALUES (?1, ?2)",
            params![session, to_i64(at_ms)],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// How many calls of `session` were let through after `since_ms`, and
    /// the instant of the oldest of them.
    pub fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let (count, oldest): (i64, Option<i64>) = self
            .row(
                "SELECT COUNT(*), MIN(at_ms) FROM rate_calls WHERE session = ?1 AND at_ms > ?2",
                params![session, to_i64(since_ms)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(self.sql())?;
        Ok((to_u64(count), oldest.map(to_u64)))
    }

    /// Appends to the ledger's own log.
    pub fn log(
        &self,
        at_ms: u64,
        session: &str,
        action: &str,
        detail: &str,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO log (at_ms, session, action, detail) VALUES (?1, ?2, ?3, ?4)",
            params![to_i64(at_ms), session, action, detail],
        )
        .map_err(self.sql())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
