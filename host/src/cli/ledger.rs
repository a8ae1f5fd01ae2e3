//! `budgetgate ledger list | show | reset`: the durable ledger, for a person
//! (`docs/CLAUDE-CODE.md`).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use budgetgate_core::budget::{Ledger, Limit};
use serde_json::{json, Value};

use budgetgate::store::{LedgerUrl, ListedLedger, RedisStore, Store, StoreError};

/// Where the ledger is.
#[derive(Debug, Clone, clap::Args)]
pub struct StateArg {
    /// Folder of the ledger (default: BUDGETGATE_STATE_DIR, else
    /// $XDG_STATE_HOME/budgetgate, else ~/.local/state/budgetgate).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The ledger as `budgetgate mcp --ledger` names it: sqlite:FILE, a
    /// state folder, or redis://HOST:PORT/DB (a fleet's shared budget).
    #[arg(long, value_name = "URL", conflicts_with = "state")]
    pub ledger: Option<String>,
}

/// An opened ledger: the SQLite file or a Redis server.
enum Opened {
    Sqlite(Store),
    Redis(RedisStore),
}

impl Opened {
    /// Opens what `state` names; looking never creates: a mistyped folder or
    /// file is an error, not an empty ledger. `Err` is the one-line reason
    /// (a `--ledger` this build does not read names the option itself).
    fn open(state: &StateArg) -> Result<Self, String> {
        let wait = Duration::from_secs(10);
        let url = LedgerUrl::parse(state.ledger.as_deref(), state.state.as_deref())?;
        let file = match url {
            LedgerUrl::Redis(url) => {
                return RedisStore::open(&url, wait)
                    .map(Self::Redis)
                    .map_err(|e| e.to_string())
            }
            LedgerUrl::SqliteFile(file) => file,
            LedgerUrl::StateDir(dir) => dir.join(budgetgate::store::FILE_NAME),
        };
        if !file.is_file() {
            return Err(StoreError::NotFound {
                path: file.display().to_string(),
            }
            .to_string());
        }
        Store::open_file(&file, wait)
            .map(Self::Sqlite)
            .map_err(|e| e.to_string())
    }

    fn list(&mut self) -> Result<Vec<ListedLedger>, StoreError> {
        match self {
            Self::Sqlite(s) => s.list(),
            Self::Redis(r) => r.list(),
        }
    }

    fn log(&mut self) -> Result<Vec<(u64, String, String, String)>, StoreError> {
        match self {
            Self::Sqlite(s) => s.log(),
            Self::Redis(r) => r.log(),
        }
    }

    fn reset(&mut self, session: &str, now_ms: u64, who: &str) -> Result<usize, StoreError> {
        match self {
            Self::Sqlite(s) => s.reset(session, now_ms, who),
            Self::Redis(r) => r.reset(session, now_ms, who),
        }
    }

    fn path(&self) -> String {
        match self {
            Self::Sqlite(s) => s.path().to_string(),
            Self::Redis(r) => r.url().to_owned(),
        }
    }
}

/// The `ledger` subcommands (the flattened `state` fields are `--state`).
#[derive(Debug, Clone, clap::Subcommand)]
#[allow(missing_docs)]
pub enum LedgerCommand {
    /// Every session (and sub-agent) with its budgets, used / max per limit.
    ///
    /// With --json, one JSON object per line: {"session", "agent" (null for
    /// the session itself), "updated_ms", "limits": {KEY: {"used",
    /// "reserved" (held by calls in flight or awaiting approval), "max"
    /// (null: no limit)}}, "caps": {TOOL: {"used", "max"}}, "error" (only
    /// when the stored record cannot be read)}; KEY is model_calls, tokens,
    /// time_ms, cost_micro_usd, tool_calls.
    #[command(after_help = "\
Exit status: 0 listed; 2 the ledger cannot be opened; 1 a stored record cannot
be read: it does not decode, is stored as another type, or is longer than any
record (not loaded); each such session is listed with its error, the others
beside it.

Examples:
  budgetgate ledger list
  budgetgate ledger list --json | jq .session
  budgetgate ledger list --ledger redis://127.0.0.1:6379/0   # a fleet's ledger")]
    List {
        #[command(flatten)]
        state: StateArg,
        /// One JSON object per ledger and line.
        #[arg(long)]
        json: bool,
    },
    /// One session: its ledgers and the ledger's log for it.
    #[command(after_help = "\
Exit status: 0 shown; 1 a stored record of the session cannot be read (shown
with its error); 2 no such session or no ledger.

Examples:
  budgetgate ledger show 0f5c3a9e-5d1c-4a8e-9a43-6c1f0e1d2b7a
  budgetgate ledger show my-session --json")]
    Show {
        /// The session id (`session_id` of the hook events).
        session: String,
        #[command(flatten)]
        state: StateArg,
        /// JSON Lines, as `list --json`.
        #[arg(long)]
        json: bool,
    },
    /// Forget a session's usage: an operator's action, asked for
    /// confirmation (or --yes) and written in the ledger's own log. The hook
    /// never does this. What was read of the session's transcripts stays
    /// read (not counted again), and its call ids stay seen.
    #[command(after_help = "\
Exit status: 0 reset; 2 not confirmed, no such session, or no ledger.

Examples:
  budgetgate ledger reset my-session          # asks you to type the id
  budgetgate ledger reset my-session --yes    # for scripts
  budgetgate ledger reset my-session --yes --ledger redis://ledger.internal:6379/0")]
    Reset {
        /// The session id.
        session: String,
        #[command(flatten)]
        state: StateArg,
        /// Do not ask (for scripts).
        #[arg(long)]
        yes: bool,
    },
}

fn bar(used: u64, max: Option<u64>) -> String {
    const WIDTH: u64 = 20;
    match max {
        None => format!("{:<20}", ""),
        Some(0) => "█".repeat(WIDTH as usize),
        Some(max) => {
            let filled = (used.min(max) * WIDTH).div_ceil(max).min(WIDTH);
            format!(
                "{}{}",
                "█".repeat(filled as usize),
                "░".repeat((WIDTH - filled) as usize)
            )
        }
    }
}

fn figure(limit: Limit, value: u64) -> String {
    match limit {
        Limit::CostMicros => format!("${:.4}", value as f64 / 1e6),
        Limit::Millis => format!("{:.1} s", value as f64 / 1e3),
        _ => value.to_string(),
    }
}

fn as_json(entry: &ListedLedger) -> Value {
    let agent = if entry.agent.is_empty() {
        Value::Null
    } else {
        Value::from(entry.agent.as_str())
    };
    match &entry.ledger {
        Err(e) => json!({"session": entry.session, "agent": agent,
            "updated_ms": entry.updated_ms, "error": e.to_string()}),
        Ok(ledger) => {
            let limits: serde_json::Map<String, Value> = Limit::ALL
                .iter()
                .map(|&l| {
                    (
                        l.key().to_owned(),
                        json!({"used": ledger.used(l), "reserved": ledger.reserved(l),
                               "max": ledger.max(l)}),
                    )
                })
                .collect();
            // A cap is the budget file's (the tool table), not the
            // ledger's: the record keeps only the calls counted.
            let caps: serde_json::Map<String, Value> = ledger
                .counts()
                .iter()
                .map(|c| {
                    (
                        c.name().to_owned(),
                        json!({"used": c.used(), "max": Value::Null}),
                    )
                })
                .collect();
            json!({"session": entry.session, "agent": agent, "updated_ms": entry.updated_ms,
                   "limits": limits, "caps": caps})
        }
    }
}

fn table(out: &mut String, entry: &ListedLedger) {
    use std::fmt::Write as _;
    let safe = budgetgate::term::terminal_safe;
    let who = if entry.agent.is_empty() {
        format!("session {}", safe(&entry.session))
    } else {
        format!(
            "  sub-agent {} of {}",
            safe(&entry.agent),
            safe(&entry.session)
        )
    };
    let _ = writeln!(out, "{who}");
    let ledger: &Ledger = match &entry.ledger {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(
                out,
                "    unreadable: {e} (every gated call of this session is refused)"
            );
            return;
        }
    };
    // One row per limit in use and per tool cap: a label (in the unit the
    // figures are shown in), a bar, used / most; the labels padded to the
    // longest, so the bars line up.
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    for limit in Limit::ALL {
        let (used, max) = (ledger.used(limit), ledger.max(limit));
        let reserved = ledger.reserved(limit);
        if max.is_none() && used == 0 && reserved == 0 {
            continue;
        }
        // What calls in flight hold is shown beside what was used: it
        // counts against the limit as much (`docs/MCP.md`).
        let shown = if reserved > 0 {
            format!(
                "{} (+{} reserved)",
                figure(limit, used),
                figure(limit, reserved)
            )
        } else {
            figure(limit, used)
        };
        rows.push((
            label(limit).to_owned(),
            bar(used.saturating_add(reserved), max),
            shown,
            max.map_or("no limit".into(), |m| figure(limit, m)),
        ));
    }
    // The caps themselves are in the budget file (the tool table), which
    // this command does not read; the ledger keeps the calls counted under
    // them. No figure is shown where the cap's would be, and no bar.
    for count in ledger.counts() {
        rows.push((
            format!("{} calls", safe(count.name())),
            bar(u64::from(count.used()), None),
            count.used().to_string(),
            "cap not kept in the ledger (the budget file's [tools] max_calls)".to_owned(),
        ));
    }
    let width = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0)
        .max(15);
    for (label, bar, used, max) in rows {
        let _ = writeln!(out, "    {label:<width$} {bar} {used:>12} / {max}");
    }
}

/// A limit's row label in the table: its key, but for the two shown in
/// other units than the ledger counts (seconds, dollars).
fn label(limit: Limit) -> &'static str {
    match limit {
        Limit::Millis => "time",
        Limit::CostMicros => "cost",
        other => other.key(),
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(ms: &u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn print(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(&format!("writing the output: {e}")),
    }
}

fn fail(detail: &str) -> ExitCode {
    eprintln!(
        "budgetgate ledger: {}",
        budgetgate::term::terminal_safe(detail)
    );
    ExitCode::from(2)
}

fn listing(entries: &[ListedLedger], json: bool) -> ExitCode {
    let mut text = String::new();
    for entry in entries {
        if json {
            text += &budgetgate::term::to_safe_json(&as_json(entry)).unwrap_or_default();
            text.push('\n');
        } else {
            table(&mut text, entry);
        }
    }
    if !json && entries.is_empty() {
        text += "no sessions in the ledger\n";
    }
    let code = print(&text);
    if code == ExitCode::SUCCESS && entries.iter().any(|e| e.ledger.is_err()) {
        return ExitCode::from(1);
    }
    code
}

/// Runs a `ledger` subcommand.
pub fn command(command: &LedgerCommand) -> ExitCode {
    let open = Opened::open;
    match command {
        LedgerCommand::List { state, json } => {
            match open(state).and_then(|mut s| s.list().map_err(|e| e.to_string())) {
                Ok(entries) => listing(&entries, *json),
                Err(e) => fail(&e),
            }
        }
        LedgerCommand::Show {
            session,
            state,
            json,
        } => {
            let mut store = match open(state) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            let entries: Vec<ListedLedger> = match store.list() {
                Ok(all) => all.into_iter().filter(|e| &e.session == session).collect(),
                Err(e) => return fail(&e.to_string()),
            };
            if entries.is_empty() {
                return fail(&format!("no session {session:?} in {}", store.path()));
            }
            let code = listing(&entries, *json);
            if !*json {
                if let Ok(log) = store.log() {
                    let mut text = String::from("    log:\n");
                    for (at, _, action, detail) in log.iter().filter(|(_, s, _, _)| s == session) {
                        text += &format!(
                            "      {} {} {}\n",
                            utc(at),
                            budgetgate::term::terminal_safe(action),
                            budgetgate::term::terminal_safe(detail)
                        );
                    }
                    print(&text);
                }
            }
            code
        }
        LedgerCommand::Reset {
            session,
            state,
            yes,
        } => {
            let mut store = match open(state) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            if !*yes {
                if !std::io::stdin().is_terminal() {
                    return fail("reset asks for confirmation on a terminal; give --yes to reset without asking");
                }
                eprint!(
                    "Forget every use of session {session:?}? Type the session id to confirm: "
                );
                let mut answer = String::new();
                let _ = std::io::stdin().lock().read_line(&mut answer);
                if answer.trim() != session {
                    return fail("not confirmed; nothing changed");
                }
            }
            let who = std::env::var("USER").unwrap_or_else(|_| "an operator".into());
            match store.reset(
                session,
                budgetgate::gate::clock::now_ms(),
                &format!("{who} (budgetgate ledger reset)"),
            ) {
                Ok(0) => fail(&format!("no session {session:?} in {}", store.path())),
                Ok(n) => print(&format!("session {session}: {n} ledger(s) reset; logged\n")),
                Err(e) => fail(&e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_times_are_shown_as_utc_dates() {
        assert_eq!(super::utc(&0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc(&1_796_122_800_123), "2026-12-01 11:00:00 UTC");
        assert_eq!(super::utc(&951_782_400_000), "2000-02-29 00:00:00 UTC");
    }
}
