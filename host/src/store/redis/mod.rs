//! The ledger in Redis (or Valkey), for gateways on many machines sharing
//! one budget (`budgetgate mcp --ledger redis://HOST:PORT/DB`; `SPEC E`).
//!
//! The same state as the SQLite ledger ([`crate::store::sqlite`]), per session
//! under keys with a hash tag (`bg:{SESSION}:…`, so a cluster keeps a
//! session on one node): `ledger` (hash: agent → the core's record),
//! `calls` (hash: call id → its fingerprint and stored answer), `repeats`
//! (hash: fingerprint → count), `resv` (hash: reservation → `expires_ms
//! tool`), `rate` (sorted set of the instants of calls let through),
//! `unpriced` (set), `updated` (hash: agent → when its ledger was last
//! written, ms since the Unix epoch) and `log` (list of JSON objects
//! `{at_ms, session, action, detail}`: the session's log, on its slot) and
//! `epoch` (string: a random value written with the session's first
//! write) and `loops` (hash: agent, `""` for the session's own calls → its
//! loop window, the core's record, `[loops]`). Earlier builds kept one shared list `bg:log`: it is still read
//! (and merged by time) by [`RedisStore::log`], never written.
//!
//! A decision is one optimistic transaction: the session's keys are
//! `WATCH`ed, the server's clock read (`TIME`: the time of the whole
//! decision, so gateways whose clocks differ decide on one time) and each
//! key's type checked, the keys read, the decision made in Rust with the
//! core's ledger, and its writes sent in one `MULTI` … `EXEC`. If another
//! gateway wrote any of those keys meanwhile, `EXEC` does nothing and the
//! decision is made again on the new figures, so concurrent gateways never
//! exceed a budget. The transaction is all or nothing: Redis applies the
//! other commands of an `EXEC` when one fails, so a key of another type
//! than the ledger keeps there (another client's) is found before `MULTI`
//! and refused ([`StoreError::RedisType`]) with nothing written; an error
//! reply inside `EXEC` is reported all the same. A server that cannot be
//! reached or answers an error is a [`StoreError`]: the caller refuses
//! (fail closed).
//!
//! A ledger that vanishes under a running gateway (a server restarted
//! without persistence, `FLUSHDB`) would give every session its budget
//! back: each [`RedisStore`] remembers the epoch it saw of each session,
//! and a transaction that finds it missing or another refuses
//! ([`StoreError::RedisVanished`]) with nothing written, until the gateway
//! is restarted. A reset keeps the epoch. The gateway warns at start when
//! the server does not have `appendonly yes`
//! ([`RedisStore::persistence_warning`]).

use std::cell::RefCell;
use std::time::Duration;

use budgetgate_core::budget::Ledger;
use redis::{Commands, Connection, Pipeline};

use super::{oversized_record, LedgerTx, ListedLedger, StoreError, MAX_RECORD_LEN};

mod tx;

/// Most times a decision is made again after a concurrent write.
pub const MAX_RETRIES: usize = 200;

/// A Redis ledger.
pub struct RedisStore {
    client: redis::Client,
    url: String,
    conn: Option<Connection>,
    timeout: Duration,
    /// The epoch (`bg:{SESSION}:epoch`) seen of each session (a gateway
    /// has one): a ledger found later without it, or with another,
    /// vanished under this store.
    epochs: Vec<(String, String)>,
}

impl RedisStore {
    /// A store on `url` (`redis://HOST:PORT/DB`); nothing is connected
    /// until the first decision. Each command waits at most `timeout`.
    pub fn open(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|e| StoreError::Redis {
            url: url.to_owned(),
            detail: e.to_string(),
        })?;
        Ok(Self {
            client,
            url: url.to_owned(),
            conn: None,
            timeout,
            epochs: Vec::new(),
        })
    }

    fn fail(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Redis {
            url: self.url.clone(),
            detail: e.to_string(),
        }
    }

    /// Runs `decide` on `session`'s state in one optimistic transaction,
    /// made again while another writer got in between (at most
    /// [`MAX_RETRIES`] times). Nothing is written when it returns `Err`.
    pub fn decide<T, E: From<StoreError>>(
        &mut self,
        session: &str,
        mut decide: impl FnMut(&RedisTx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.connection()?;
        let url = self.url.clone();
        let fail = |e: redis::RedisError| StoreError::Redis {
            url: url.clone(),
            detail: e.to_string(),
        };
        let keys = keys(session);
        let epoch_key = key(session, "epoch");
        for _ in 0..MAX_RETRIES {
            let Some(conn) = self.conn.as_mut() else {
                break;
            };
            // The keys watched, then the server's clock (the time of the
            // whole decision), the type of each key and the session's
            // epoch, in one round trip (a GET of another type answers an
            // error, kept in its place: the type check says it).
            let mut look = redis::pipe();
            look.cmd("WATCH").arg(&keys[..]).ignore().cmd("TIME");
            for k in &keys {
                look.cmd("TYPE").arg(k);
            }
            look.cmd("GET").arg(&epoch_key).ignore_errors();
            let looked: Result<Vec<redis::Value>, _> = look.query(conn);
            let looked = match looked {
                Ok(v) => v,
                Err(e) => {
                    self.conn = None;
                    return Err(fail(e).into());
                }
            };
            let (clock_ms, types, epoch) = match read_look(looked, keys.len()) {
                Ok(read) => read,
                Err(detail) => {
                    self.conn = None;
                    return Err(StoreError::Redis {
                        url: url.clone(),
                        detail,
                    }
                    .into());
                }
            };
            // A key of another type (another client's) would fail its
            // command inside EXEC while the others apply: a transaction
            // half made. Checked under WATCH: a change after this aborts
            // EXEC. Nothing is written; the session is refused.
            let wrong = keys
                .iter()
                .zip(KEYS)
                .zip(&types)
                .find(|((_, (_, expected)), found)| *found != "none" && found != expected);
            if let Some(((name, (_, expected)), found)) = wrong {
                unwatch(&mut self.conn);
                return Err(StoreError::RedisType {
                    url: url.clone(),
                    key: name.clone(),
                    found: found.clone(),
                    expected: (*expected).to_owned(),
                }
                .into());
            }
            // The epoch: written with the session's first write, and then
            // always there. Missing or another than the one this store saw:
            // the ledger vanished (a server restarted without persistence,
            // FLUSHDB) or was replaced, and budget used could come back.
            let epoch: Option<String> = match redis::from_redis_value(epoch) {
                Ok(epoch) => epoch,
                Err(e) => {
                    self.conn = None;
                    return Err(StoreError::Redis {
                        url: url.clone(),
                        detail: format!("GET {epoch_key} answered {e}"),
                    }
                    .into());
                }
            };
            let seen = self.epochs.iter().find(|(s, _)| s == session);
            let new_epoch = match (seen.map(|(_, e)| e), epoch) {
                (Some(seen), found) if found.as_ref() != Some(seen) => {
                    unwatch(&mut self.conn);
                    return Err(StoreError::RedisVanished {
                        url: url.clone(),
                        session: session.to_owned(),
                        key: epoch_key,
                        what: if found.is_some() {
                            "holds another epoch than the one this gateway saw"
                        } else {
                            "is missing"
                        },
                    }
                    .into());
                }
                (Some(_), _) => None,
                (None, Some(found)) => {
                    self.epochs.push((session.to_owned(), found));
                    None
                }
                (None, None) => Some(fresh_epoch()),
            };
            let tx = RedisTx {
                conn: RefCell::new(conn),
                writes: RefCell::new(redis::pipe()),
                url: &url,
                taken: RefCell::new(Vec::new()),
                written: RefCell::new(std::collections::HashMap::new()),
                clock_ms,
            };
            let out = match decide(&tx) {
                Ok(out) => out,
                Err(e) => {
                    // The reads under WATCH are not one snapshot: another
                    // gateway may have written between two of them (a
                    // session's ledger read as missing, then its calls as
                    // present). An empty MULTI/EXEC tells: nil when a watched
                    // key changed, and the error then came from a torn read,
                    // so the decision is made again; otherwise it stands.
                    let conn = tx.conn.into_inner();
                    let exec = redis::cmd("MULTI")
                        .query::<()>(conn)
                        .and_then(|()| redis::cmd("EXEC").query::<Option<redis::Value>>(conn));
                    match exec {
                        Ok(None) => continue,
                        Ok(Some(_)) => return Err(e),
                        Err(io) => {
                            self.conn = None;
                            return Err(fail(io).into());
                        }
                    }
                }
            };
            let RedisTx { conn, writes, .. } = tx;
            let conn = conn.into_inner();
            let mut writes = writes.into_inner();
            // The session's first write: its epoch with it.
            let new_epoch = new_epoch.filter(|_| !writes.is_empty());
            if let Some(epoch) = &new_epoch {
                writes.set(&epoch_key, epoch).ignore();
            }
            writes.atomic();
            // EXEC answers nil when a watched key changed: decide again. An
            // error reply for one of its commands (the client reports it as
            // an error) would mean the others were applied: the types are
            // checked above so that it cannot happen; should it, it is said.
            let done: Option<redis::Value> = match writes.query(conn) {
                Ok(v) => v,
                Err(e) => {
                    self.conn = None;
                    let detail = if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                        e.to_string()
                    } else {
                        format!("EXEC answered an error inside the transaction of session {session:?} ({e}); its other writes may have been applied")
                    };
                    return Err(StoreError::Redis {
                        url: url.clone(),
                        detail,
                    }
                    .into());
                }
            };
            match done {
                None => {}
                Some(redis::Value::Array(replies))
                    if replies
                        .iter()
                        .any(|r| matches!(r, redis::Value::ServerError(_))) =>
                {
                    return Err(StoreError::Redis {
                        url: url.clone(),
                        detail: format!("EXEC answered an error inside the transaction of session {session:?}; its other writes may have been applied"),
                    }
                    .into());
                }
                Some(_) => {
                    if let Some(epoch) = new_epoch {
                        self.epochs.push((session.to_owned(), epoch));
                    }
                    return Ok(out);
                }
            }
        }
        Err(StoreError::Redis {
            url,
            detail: format!("no decision after {MAX_RETRIES} concurrent writes"),
        }
        .into())
    }
}

impl RedisStore {
    fn connection(&mut self) -> Result<&mut Connection, StoreError> {
        let url = self.url.clone();
        self.connect().map_err(|e| StoreError::Redis {
            url,
            detail: e.to_string(),
        })
    }

    /// The connection, made (each command waiting at most the timeout)
    /// when there is none.
    fn connect(&mut self) -> Result<&mut Connection, redis::RedisError> {
        if self.conn.is_none() {
            let conn = self.client.get_connection_with_timeout(self.timeout)?;
            conn.set_read_timeout(Some(self.timeout))?;
            conn.set_write_timeout(Some(self.timeout))?;
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no connection").into())
    }

    /// The server's address, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Checks once that the server answers (`PING`), as a front-end does
    /// at start: `Err` says that it cannot be reached, or what it answered
    /// instead (a server that asks for a password, say). Later decisions
    /// connect again and refuse while it is gone (fail closed).
    pub fn ping(&mut self) -> Result<(), StoreError> {
        let answer = self
            .connect()
            .and_then(|conn| redis::cmd("PING").query::<String>(conn));
        answer.map(drop).map_err(|e| {
            self.conn = None;
            if e.is_timeout() {
                // Connected, and then silent (the client's greeting or
                // the PING unanswered): something listens there that is
                // not a Redis server answering, or one that is stuck.
                self.fail(format!(
                    "the server took the connection but did not answer within {} s",
                    self.timeout.as_secs_f64()
                ))
            } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                self.fail(format!("the Redis server cannot be reached ({e})"))
            } else {
                self.fail(format!("the Redis server answered with an error ({e})"))
            }
        })
    }

    /// What a gateway says at start about the server's persistence, if
    /// anything: a server without `appendonly yes` loses the ledger when it
    /// restarts (every session's budget would come back; a running gateway
    /// refuses a session whose ledger vanished, one started afterwards
    /// cannot tell), and a server that refuses `CONFIG GET appendonly`
    /// (managed services often do) could not be checked. `Ok(None)`: it
    /// has `appendonly yes`. `Err`: the server cannot be reached, so
    /// nothing is known of its persistence (the caller says that instead).
    pub fn persistence_warning(&mut self) -> Result<Option<String>, StoreError> {
        let url = self.url.clone();
        let config: Result<Vec<String>, redis::RedisError> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query(self.connection()?);
        let lost = "a restart loses the ledger, and with it the budget every session has used (docs/MCP.md, \"Redis\")";
        match config.as_deref() {
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                let e = self.fail(e);
                self.conn = None;
                Err(e)
            }
            Ok([name, value]) if name == "appendonly" => Ok((value != "yes").then(|| {
                format!("the Redis server at {url} has appendonly {value}: {lost}; set appendonly yes")
            })),
            Ok(other) => Ok(Some(format!(
                "the Redis server at {url}: whether it persists the ledger could not be checked (CONFIG GET appendonly answered {other:?}); without appendonly yes {lost}"
            ))),
            Err(e) => Ok(Some(format!(
                "the Redis server at {url}: whether it persists the ledger could not be checked (CONFIG GET appendonly: {e}); without appendonly yes {lost}"
            ))),
        }
    }

    /// Every stored ledger, as [`crate::store::Store::list`] gives them:
    /// sessions found by `SCAN` over `bg:{*}:ledger` and `bg:{*}:calls`,
    /// newest update first. A session whose keys cannot be read as a ledger
    /// (a key of another type, a record that does not decode or is longer
    /// than any record: its length is read first, `HSTRLEN`, and such a
    /// record never loaded) is listed with the reason, as is one with calls but no ledger
    /// ([`crate::store::LOST_LEDGER`]); the listing goes on.
    pub fn list(&mut self) -> Result<Vec<ListedLedger>, StoreError> {
        let url = self.url.clone();
        let fail = |e: redis::RedisError| StoreError::Redis {
            url: url.clone(),
            detail: e.to_string(),
        };
        let conn = self.connection()?;
        let mut sessions = std::collections::BTreeSet::new();
        for pattern in ["bg:{*}:ledger", "bg:{*}:calls"] {
            let names: Vec<String> = conn
                .scan_match::<_, String>(pattern)
                .map_err(&fail)?
                .collect::<Result<_, _>>()
                .map_err(&fail)?;
            sessions.extend(names.iter().filter_map(|n| session_of(n)));
        }
        let mut out = Vec::new();
        for session in sessions {
            let ledger_key = key(&session, "ledger");
            // Each record's length first: one longer than any record is
            // listed as such, never loaded.
            let agents: Result<Vec<String>, _> = conn.hkeys(&ledger_key);
            let records = agents.and_then(|agents| {
                agents
                    .into_iter()
                    .map(|agent| {
                        let len: u64 = redis::cmd("HSTRLEN")
                            .arg(&ledger_key)
                            .arg(&agent)
                            .query(conn)?;
                        if len > MAX_RECORD_LEN as u64 {
                            return Ok((agent, Err(oversized_record(len))));
                        }
                        let record: Option<Vec<u8>> = conn.hget(&ledger_key, &agent)?;
                        let ledger = Ledger::from_record(&record.unwrap_or_default())
                            .map_err(|e| e.to_string());
                        Ok((agent, ledger))
                    })
                    .collect::<Result<Vec<_>, redis::RedisError>>()
            });
            let updated: Vec<(String, u64)> =
                conn.hgetall(key(&session, "updated")).unwrap_or_default();
            let records = match records {
                Ok(records) => records,
                Err(e) => {
                    out.push(ListedLedger {
                        session,
                        agent: String::new(),
                        ledger: Err(format!("its ledger key cannot be read: {e}")),
                        updated_ms: 0,
                    });
                    continue;
                }
            };
            let has_calls: bool = conn.exists(key(&session, "calls")).unwrap_or(true);
            if has_calls && !records.iter().any(|(agent, _)| agent.is_empty()) {
                out.push(ListedLedger {
                    session: session.clone(),
                    agent: String::new(),
                    ledger: Err(crate::store::LOST_LEDGER.to_owned()),
                    updated_ms: 0,
                });
            }
            for (agent, ledger) in records {
                let updated_ms = updated
                    .iter()
                    .find(|(a, _)| *a == agent)
                    .map_or(0, |(_, at)| *at);
                out.push(ListedLedger {
                    ledger,
                    session: session.clone(),
                    agent,
                    updated_ms,
                });
            }
        }
        out.sort_by(|a, b| {
            b.updated_ms
                .cmp(&a.updated_ms)
                .then_with(|| a.session.cmp(&b.session))
                .then_with(|| a.agent.cmp(&b.agent))
        });
        Ok(out)
    }

    /// The log, oldest first: (at_ms, session, action, detail): every
    /// session's own log (`bg:{*}:log`, found by `SCAN`) and the shared
    /// `bg:log` of earlier builds, merged by time. A line that is not such
    /// an object, and a log key that cannot be read as a list, are shown as
    /// an `unreadable` entry.
    pub fn log(&mut self) -> Result<Vec<(u64, String, String, String)>, StoreError> {
        let url = self.url.clone();
        let fail = |e: redis::RedisError| StoreError::Redis {
            url: url.clone(),
            detail: e.to_string(),
        };
        let conn = self.connection()?;
        let mut names: Vec<String> = conn
            .scan_match::<_, String>("bg:{*}:log")
            .map_err(&fail)?
            .collect::<Result<_, _>>()
            .map_err(&fail)?;
        names.sort();
        names.push("bg:log".to_owned());
        let mut entries = Vec::new();
        for name in names {
            let lines: Result<Vec<Vec<u8>>, _> = conn.lrange(&name, 0, -1);
            match lines {
                Ok(lines) => entries.extend(
                    lines
                        .iter()
                        .map(|line| log_entry(&String::from_utf8_lossy(line))),
                ),
                Err(e) => entries.push((
                    0,
                    session_of(&name).unwrap_or_default(),
                    "unreadable".into(),
                    format!("the log key {name} cannot be read: {e}"),
                )),
            }
        }
        // Stable: each key's entries stay in the order they were appended.
        entries.sort_by_key(|e| e.0);
        Ok(entries)
    }

    /// Forgives what `session` has used, as [`crate::store::Store::reset`]
    /// does, in one transaction: each of its ledgers starts again from zero
    /// at the server's time (`now_ms`, the caller's clock, is not used: a
    /// Redis ledger's time is its server's); repetitions, rate windows,
    /// reservations, unpriced models and the loop window are cleared; call
    /// ids stay seen. Logged. Returns how many ledgers were reset (0: no
    /// such session).
    pub fn reset(&mut self, session: &str, now_ms: u64, who: &str) -> Result<usize, StoreError> {
        self.decide(session, |tx| {
            // The server's clock, as the gateways' decisions use it.
            let now_ms = LedgerTx::clock_ms(tx).unwrap_or(now_ms);
            let agents: Vec<String> = tx.read(|c| c.hkeys(key(session, "ledger")))?;
            let mut agents = agents;
            // A session that lost its ledger gets a fresh one.
            if agents.is_empty() && tx.has_traces(session)? {
                agents.push(String::new());
            }
            let fresh: Ledger = Ledger::new(now_ms);
            for agent in &agents {
                tx.put_ledger(session, agent, &fresh, now_ms)?;
            }
            tx.write(|p| {
                for what in ["repeats", "unpriced", "resv", "rate", "loops"] {
                    p.del(key(session, what)).ignore();
                }
            });
            if !agents.is_empty() {
                tx.log(
                    now_ms,
                    session,
                    "reset",
                    &format!("{} ledger(s) reset to zero by {who}", agents.len()),
                )?;
            }
            Ok::<_, StoreError>(agents.len())
        })
    }
}

/// One line of a log: (at_ms, session, action, detail), or an
/// `unreadable` entry showing the line.
fn log_entry(line: &str) -> (u64, String, String, String) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    match (
        v.get("at_ms").and_then(serde_json::Value::as_u64),
        text("session"),
        text("action"),
    ) {
        (Some(at), Some(session), Some(action)) => {
            (at, session, action, text("detail").unwrap_or_default())
        }
        _ => (
            0,
            String::new(),
            "unreadable".into(),
            line.chars().take(200).collect(),
        ),
    }
}

/// The server's clock (ms), each of `n` keys' type and the reply to `GET`
/// the epoch, from the replies to `WATCH` (ignored), `TIME`, one `TYPE`
/// per key and the `GET`; `Err`: what is wrong with a reply.
fn read_look(
    replies: Vec<redis::Value>,
    n: usize,
) -> Result<(u64, Vec<String>, redis::Value), String> {
    let mut replies = replies.into_iter();
    let time = replies.next().ok_or("no reply to TIME")?;
    let (secs, micros): (u64, u64) =
        redis::from_redis_value(time).map_err(|e| format!("TIME answered {e}"))?;
    let types = replies
        .by_ref()
        .take(n)
        .map(|t| redis::from_redis_value::<String>(t).map_err(|e| format!("TYPE answered {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if types.len() != n {
        return Err(format!("{} replies to TYPE, not {n}", types.len()));
    }
    let epoch = replies.next().ok_or("no reply to GET the epoch")?;
    Ok((
        secs.saturating_mul(1000).saturating_add(micros / 1000),
        types,
        epoch,
    ))
}

/// A new epoch: 128 random bits in hex (the standard library's hasher
/// keys come from the system's random source), told apart from any other
/// store's.
fn fresh_epoch() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(unique());
        h.write_u64(salt);
        h.finish()
    };
    format!("{:016x}{:016x}", half(0), half(1))
}

/// The session a `bg:{TAG}:WHAT` key is of (the tag unescaped).
fn session_of(name: &str) -> Option<String> {
    let tag = name.strip_prefix("bg:{")?.rsplit_once("}:")?.0;
    Some(
        tag.replace("%7D", "}")
            .replace("%7B", "{")
            .replace("%25", "%"),
    )
}

fn key(session: &str, what: &str) -> String {
    // `{` and `}` in a session would break the hash tag: they are escaped.
    let tag = session
        .replace('%', "%25")
        .replace('{', "%7B")
        .replace('}', "%7D");
    format!("bg:{{{tag}}}:{what}")
}

/// A session's keys (`bg:{SESSION}:WHAT`) with the Redis type each holds
/// when it exists (as `TYPE` names it).
const KEYS: [(&str, &str); 13] = [
    ("ledger", "hash"),
    ("offsets", "hash"),
    ("responses", "hash"),
    ("calls", "hash"),
    ("repeats", "hash"),
    ("resv", "hash"),
    ("rate", "zset"),
    ("unpriced", "set"),
    ("updated", "hash"),
    ("log", "list"),
    ("epoch", "string"),
    ("loops", "hash"),
    ("tcalls", "hash"),
];

fn keys(session: &str) -> Vec<String> {
    KEYS.iter().map(|(w, _)| key(session, w)).collect()
}

/// Ends a transaction that writes nothing: forgets the `WATCH`es (the
/// connection is dropped if even that fails).
fn unwatch(conn: &mut Option<Connection>) {
    if let Some(c) = conn.as_mut() {
        if redis::cmd("UNWATCH").query::<()>(c).is_err() {
            *conn = None;
        }
    }
}

/// One decision's view of a session in Redis: reads go to the server at
/// once (under `WATCH`), writes wait for `EXEC`.
pub struct RedisTx<'a> {
    conn: RefCell<&'a mut Connection>,
    writes: RefCell<Pipeline>,
    url: &'a str,
    /// Reservations (hash, field) this transaction has taken: their
    /// deletion waits in `writes` until `EXEC`, so a later read in the same
    /// transaction would still find them, and give back or count them a
    /// second time (a commit and the next decision share a transaction).
    taken: RefCell<Vec<(String, String)>>,
    /// Hash fields (hash, field) this transaction has set, with their
    /// values: their writes wait in `writes` until `EXEC`, so a later read
    /// in the same transaction reads them here (a transcript's lines of
    /// one response read in one decision).
    written: RefCell<std::collections::HashMap<(String, String), String>>,
    /// The server's clock when the transaction began (`TIME`, after
    /// `WATCH`), in milliseconds since the Unix epoch.
    clock_ms: u64,
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
