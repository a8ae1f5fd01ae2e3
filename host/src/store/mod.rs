//! The durable ledger every desktop front-end shares, and the stores that
//! keep it (`SPEC E`, durable state): one SQLite file ([`Store`]), or a
//! Redis (or Valkey) server for gateways on many machines ([`RedisStore`]).
//!
//! Per session (and per sub-agent inside it) the store keeps the core's
//! [`budget::Record`](budgetgate_core::budget::Record) — fixed-size,
//! versioned, checksummed bytes — beside what the hook needs to resume: the
//! call ids seen, the repetition fingerprints with their counts, how far
//! each transcript has been read and the usage already counted per model
//! response. The store never interprets a budget: it keeps bytes and sets.
//!
//! Where the SQLite file is: `--state DIR`, else `BUDGETGATE_STATE_DIR`, else
//! `$XDG_STATE_HOME/budgetgate`, else `~/.local/state/budgetgate`; the file
//! is `ledger.sqlite3` in that folder.
//!
//! The rooms of this folder: `mod.rs` what every store shares (what a
//! decision reads and writes, [`LedgerTx`]; [`StoreError`]; [`Durability`];
//! the one reader of `--ledger`, [`LedgerUrl`], and [`state_dir`]);
//! [`sqlite`] the SQLite store ([`Store`], its transaction [`Tx`] in
//! `sqlite/tx.rs`); [`redis`] the Redis store ([`RedisStore`], its
//! transaction [`RedisTx`] in `redis/tx.rs`); [`memory`] the in-process
//! ledger of the Python package (`memory:`, [`MemoryStore`]); `tests.rs`
//! the unit tests.

use std::path::{Path, PathBuf};

use budgetgate_core::budget::{Ledger, RecordError, RECORD_LEN};
use budgetgate_core::limits::MAX_TOOLS;

pub mod memory;
pub mod redis;
pub mod sqlite;

pub use memory::{MemoryStore, MemoryTx};
pub use redis::{RedisStore, RedisTx, MAX_RETRIES};
pub use sqlite::{Store, Tx, FILE_NAME, SCHEMA_VERSION};

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

/// How a transaction's commit reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// As the store's durability says (`full`: on disk before the
    /// transaction returns).
    Durable,
    /// Not waited for on disk: it survives a crash of the process, and is
    /// made durable by the next durable commit (a power cut before that
    /// may lose it). Only for a record whose loss leaves a state the
    /// ledger already holds safely: a model call's counted response, whose
    /// reservation (stored durably before the call) then stays and is
    /// counted at its charge when it expires, as for a proxy killed
    /// mid-call.
    Lazy,
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
    /// The in-process ledger (`memory:`) refused a write or cannot decide
    /// any more (a decision panicked part way).
    #[error("in-process ledger: {0}")]
    InProcess(String),
    /// A session's stored loop window does not decode.
    #[error("session {session:?}: its stored loop window does not read back ({source}); refusing until an operator runs `budgetgate ledger reset`")]
    LoopWindow {
        /// The session.
        session: String,
        /// What is wrong with the record.
        source: budgetgate_core::engine::loops::WindowRecordError,
    },
    /// A transcript's stored offset (Redis) is not a number.
    #[error("session {session:?}: the stored offset of transcript {path} does not read back ({value:.40})")]
    TranscriptCursor {
        /// The session.
        session: String,
        /// The transcript.
        path: String,
        /// What was stored.
        value: String,
    },
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

/// The in-process ledger's name ([`MemoryStore`]), which only the Python
/// package opens: a command's ledger must outlive its process.
pub const MEMORY_URL: &str = "memory:";

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
        if url.starts_with(MEMORY_URL) {
            return Err(format!(
                "--ledger {url}: the in-process ledger lives inside one process (the Python package's `Gate(ledger=\"memory:\")`) and is gone when it ends; a budgetgate command needs a ledger that outlives it: sqlite:FILE, a state folder or redis://HOST:PORT/DB"
            ));
        }
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
/// (SQLite: [`Tx`]; Redis: [`RedisTx`]). Every method
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
    /// How far the transcript `path` of `session` has been counted, and the
    /// response its last lines left open (the Claude Code hook's state;
    /// the default when never read).
    fn transcript_cursor(&self, session: &str, path: &str) -> Result<TranscriptCursor, StoreError>;
    /// Records how far transcript `path` has been counted.
    fn set_transcript_cursor(
        &self,
        session: &str,
        path: &str,
        cursor: &TranscriptCursor,
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
    /// What the Claude Code hook keeps of tool call `call_id` of `session`:
    /// which response its transcript first showed it in, or that one showed
    /// it in two (a reused id); opaque to the store. `None` when no
    /// transcript showed it yet.
    fn transcript_call(&self, session: &str, call_id: &str) -> Result<Option<String>, StoreError>;
    /// Records what [`Self::transcript_call`] reads.
    fn put_transcript_call(
        &self,
        session: &str,
        call_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError>;
    /// Records that `model`, which has no price, was used in `session`.
    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError>;
    /// The record of the loop window (`[loops]`) of `session` / `agent`
    /// (`""`: the session's own calls), if stored.
    fn loop_window(&self, session: &str, agent: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores the record of the loop window of `session` / `agent`.
    fn put_loop_window(&self, session: &str, agent: &str, record: &[u8]) -> Result<(), StoreError>;
}

/// How far one transcript has been counted: its first byte not yet read,
/// and the hook's record of the response its last lines left open (JSON,
/// opaque to the store; `None` when no response is open, or in a ledger
/// written before the record was kept).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TranscriptCursor {
    /// Bytes counted.
    pub offset: u64,
    /// The open response's record.
    pub open: Option<String>,
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

#[cfg(test)]
mod tests;
