//! Where a session's ledger is kept, as every front-end on a store opens
//! it (`--ledger`: a SQLite file, a state folder, a Redis server), and the
//! one transaction a decision is made in.

use std::path::Path;
use std::time::Duration;

use budgetgate_core::tools::ToolTable;

use super::budget_file::{ReplayBudget, BUDGET_TOOLS};
use super::{GateError, Ledgers};
use crate::store::{
    Commit, Durability, LedgerTx, LedgerUrl, MemoryStore, Store, StoreError, MEMORY_URL,
};

/// Where the ledger is kept.
pub enum Backend {
    /// The SQLite file the hook uses.
    Sqlite(Store),
    /// A Redis (or Valkey) server, for gateways on many machines.
    Redis(crate::store::RedisStore),
    /// The in-process ledger (`memory:`), for tests and single-process
    /// agents of the Python package.
    Memory(MemoryStore),
}

impl Backend {
    /// Runs `f` in one transaction of `session` (made again, for Redis,
    /// while another writer got in between) with the session's ledgers,
    /// loaded with `budget`'s maxima and `tools` (its tool table) and
    /// stored after `f`. The time of the transaction, given to `f` (its
    /// last argument), is the store's clock when it has one (Redis: the
    /// server's, so front-ends whose clocks differ decide on one time),
    /// else `now`. `commit`: whether its commit is waited for on disk
    /// ([`Commit::Lazy`] only for a SQLite ledger of `--durability full`;
    /// Redis's durability is the server's). `Err` is the one-line reason
    /// (the front-end refuses).
    pub fn transaction<T>(
        &mut self,
        commit: Commit,
        session: &str,
        budget: &ReplayBudget,
        tools: &ToolTable<BUDGET_TOOLS>,
        now: u64,
        f: &mut impl FnMut(
            &dyn LedgerTx,
            &mut Ledgers<'_>,
            &ReplayBudget,
            &str,
            u64,
        ) -> Result<T, GateError>,
    ) -> Result<T, String> {
        let mut decide = |tx: &dyn LedgerTx| {
            let now = tx.clock_ms().unwrap_or(now);
            let mut ledgers = Ledgers::load(tx, session, budget, tools, now)?;
            let out = f(tx, &mut ledgers, budget, session, now)?;
            ledgers.store(tx, session, now)?;
            Ok(out)
        };
        match self {
            Backend::Sqlite(store) => store.decide_with(commit, |tx| decide(&*tx)),
            Backend::Redis(store) => store.decide(session, |tx| decide(tx)),
            Backend::Memory(store) => store.decide(|tx| decide(tx)),
        }
        .map_err(|e: GateError| e.to_string())
    }

    /// Checks once, at a front-end's start, that the ledger answers: a
    /// Redis server that cannot be reached is refused then (`Err` names
    /// the URL), not at every call after. A SQLite ledger was opened by
    /// [`open_ledger`] already; the in-process one always answers.
    pub fn check(&mut self) -> Result<(), String> {
        match self {
            Backend::Redis(store) => store.ping().map_err(|e| match e {
                StoreError::Redis { url, detail } => format!("--ledger {url}: {detail}"),
                other => other.to_string(),
            }),
            Backend::Sqlite(_) | Backend::Memory(_) => Ok(()),
        }
    }

    /// Another handle on this very ledger when it lives in this process
    /// (`memory:`: a second open would be a second, empty ledger); `None`
    /// for a ledger any process can open again.
    pub fn share(&self) -> Option<Backend> {
        match self {
            Backend::Memory(store) => Some(Backend::Memory(store.clone())),
            Backend::Sqlite(_) | Backend::Redis(_) => None,
        }
    }
}

/// Where the ledger named by `--ledger` `url` (or, for the hook, the
/// state folder `state` of `--state`) is, as every front-end that writes
/// a ledger reads it: [`LedgerUrl::parse`], and the refusal of a SQLite
/// file or state folder named in a folder that does not exist (`Err`
/// names the option, its value and that folder): a mistyped path never
/// starts an empty budget. The state folder itself may be new; so may the
/// default one (neither named), with the folders it is in.
pub fn ledger_location(url: Option<&str>, state: Option<&Path>) -> Result<LedgerUrl, String> {
    let parsed = LedgerUrl::parse(url, state)?;
    let named = match (url, state) {
        (Some(url), _) => format!("--ledger {url}"),
        (None, Some(dir)) => format!("--state {}", dir.display()),
        (None, None) => return Ok(parsed),
    };
    match &parsed {
        LedgerUrl::Redis(_) => {}
        LedgerUrl::SqliteFile(path) | LedgerUrl::StateDir(path) => {
            if let Some(dir) = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
            {
                return Err(if dir.exists() {
                    format!("{named}: {} is not a folder", dir.display())
                } else {
                    format!(
                        "{named}: the folder {} does not exist (create it first: a mistyped path would start an empty budget)",
                        dir.display()
                    )
                });
            }
            if matches!(parsed, LedgerUrl::StateDir(_)) && path.exists() && !path.is_dir() {
                return Err(format!(
                    "{named}: {} is not a folder (a state folder is named so; sqlite:FILE names a ledger file)",
                    path.display()
                ));
            }
        }
    }
    Ok(parsed)
}

/// Opens the ledger named by `--ledger`: `redis://…` (or `rediss://…`
/// where the client supports it), `sqlite:FILE`, or a state folder, in a
/// folder that exists ([`ledger_location`]); a SQLite ledger with
/// `durability`. A Redis ledger with any durability but the default is
/// refused: how durable Redis is, is the server's setting.
pub fn open_ledger(
    url: Option<&str>,
    wait: Duration,
    durability: Durability,
) -> Result<Backend, String> {
    let shown = |e: StoreError| e.to_string();
    match ledger_location(url, None)? {
        LedgerUrl::Redis(url) => {
            if durability != Durability::Full {
                return Err(format!(
                    "--durability {}: applies to a SQLite ledger; a Redis ledger ({url}) is as durable as the server's appendfsync setting",
                    durability.synchronous().to_lowercase()
                ));
            }
            crate::store::RedisStore::open(&url, wait)
                .map(Backend::Redis)
                .map_err(shown)
        }
        LedgerUrl::SqliteFile(file) => Store::open_file_with(&file, wait, durability)
            .map(Backend::Sqlite)
            .map_err(shown),
        LedgerUrl::StateDir(dir) => Store::open_with(&dir, wait, durability)
            .map(Backend::Sqlite)
            .map_err(shown),
    }
}

/// Opens a ledger for a gate that lives in one long process (the Python
/// package): as [`open_ledger`], and also `memory:`, a new in-process
/// ledger (whose durability is moot: it is never written anywhere).
pub fn open_ledger_in_process(
    url: &str,
    wait: Duration,
    durability: Durability,
) -> Result<Backend, String> {
    if url == MEMORY_URL {
        return Ok(Backend::Memory(MemoryStore::new()));
    }
    open_ledger(Some(url), wait, durability)
}
