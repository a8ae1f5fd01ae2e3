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

/// The budget file whose tool caps are shown (the ledger keeps the calls
/// counted under each cap, not the cap: it is the budget file's).
#[derive(Debug, Clone, clap::Args)]
pub struct CapsArg {
    /// The budget file the sessions ran under (the hook's or gateway's
    /// `--budget`): each tool cap's figure is shown beside the calls
    /// counted under it, and every capped tool, counted or not.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
}

/// The tool caps to show: `None` when no budget file was named.
type Caps = Option<Vec<(String, u32)>>;

impl CapsArg {
    fn read(&self) -> Result<Caps, String> {
        match &self.budget {
            None => Ok(None),
            Some(path) => budgetgate::gate::budget_file::read_budget_file(path)
                .map(|budget| Some(budget.tool_caps)),
        }
    }
}

/// A tool's calls counted and its cap, for the session's own ledger: the
/// ledger's counts, then (with a budget file) every capped tool not
/// counted yet. A sub-agent's ledger has no caps of its own.
fn cap_rows(ledger: &Ledger, agent: &str, caps: &Caps) -> Vec<(String, u64, Option<u64>)> {
    let caps = caps.as_deref().filter(|_| agent.is_empty());
    let cap_of = |name: &str| {
        caps.and_then(|c| c.iter().find(|(n, _)| n == name))
            .map(|(_, max)| u64::from(*max))
    };
    let mut rows: Vec<(String, u64, Option<u64>)> = ledger
        .counts()
        .iter()
        .map(|c| (c.name().to_owned(), u64::from(c.used()), cap_of(c.name())))
        .collect();
    for (name, max) in caps.unwrap_or_default() {
        if !rows.iter().any(|(n, _, _)| n == name) {
            rows.push((name.clone(), 0, Some(u64::from(*max))));
        }
    }
    rows
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
    /// (null: no limit)}}, "caps": {TOOL: {"used", "max" (null without
    /// --budget, which names the caps)}}, "error" (only
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
  budgetgate ledger list --budget ~/budgetgate-budget.toml   # the tool caps too
  budgetgate ledger list --ledger redis://127.0.0.1:6379/0   # a fleet's ledger")]
    List {
        #[command(flatten)]
        state: StateArg,
        #[command(flatten)]
        caps: CapsArg,
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
  budgetgate ledger show my-session --json
  budgetgate ledger show my-session --budget ~/budgetgate-budget.toml")]
    Show {
        /// The session id (`session_id` of the hook events).
        session: String,
        #[command(flatten)]
        state: StateArg,
        #[command(flatten)]
        caps: CapsArg,
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

fn as_json(entry: &ListedLedger, caps: &Caps) -> Value {
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
            // ledger's: the record keeps only the calls counted; its
            // figure is known with `--budget`.
            let caps: serde_json::Map<String, Value> = cap_rows(ledger, &entry.agent, caps)
                .into_iter()
                .map(|(name, used, max)| (name, json!({"used": used, "max": max})))
                .collect();
            json!({"session": entry.session, "agent": agent, "updated_ms": entry.updated_ms,
                   "limits": limits, "caps": caps})
        }
    }
}

fn table(out: &mut String, entry: &ListedLedger, caps: &Caps) {
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
    // The caps themselves are in the budget file (the tool table): shown
    // when it was named (`--budget`); else the ledger has only the calls
    // counted under them, and no figure is shown where the cap's would be,
    // and no bar.
    for (name, used, max) in cap_rows(ledger, &entry.agent, caps) {
        let max_text = match (max, caps) {
            (Some(max), _) => max.to_string(),
            (None, Some(_)) if entry.agent.is_empty() => "no cap in the budget file".to_owned(),
            (None, Some(_)) => "no cap of its own (a sub-agent's)".to_owned(),
            (None, None) => {
                "cap not kept in the ledger (the budget file's [tools] max_calls; --budget FILE shows it)"
                    .to_owned()
            }
        };
        rows.push((
            format!("{} calls", safe(&name)),
            bar(used, max),
            used.to_string(),
            max_text,
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

fn listing(entries: &[ListedLedger], caps: &Caps, json: bool) -> ExitCode {
    let mut text = String::new();
    for entry in entries {
        if json {
            text += &budgetgate::term::to_safe_json(&as_json(entry, caps)).unwrap_or_default();
            text.push('\n');
        } else {
            table(&mut text, entry, caps);
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
        LedgerCommand::List { state, caps, json } => {
            let caps = match caps.read() {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            match open(state).and_then(|mut s| s.list().map_err(|e| e.to_string())) {
                Ok(entries) => listing(&entries, &caps, *json),
                Err(e) => fail(&e),
            }
        }
        LedgerCommand::Show {
            session,
            state,
            caps,
            json,
        } => {
            let caps = match caps.read() {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
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
            let code = listing(&entries, &caps, *json);
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
