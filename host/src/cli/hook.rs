//! `budgetgate hook`: its subcommands' arguments, the Claude Code hook's
//! command (an event read from stdin, decided within its deadline, the
//! answer printed once, the exit status that blocks or not), and `hook
//! install` / `uninstall` (the settings file named, the change printed).
//! The hook itself is `budgetgate::hook`, the settings' editing
//! `budgetgate::hook_install`.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use budgetgate::gate::backend::ledger_location;
use budgetgate::gate::budget_file::{read_budget_file, ReplayBudget};
use budgetgate::gate::clock::now_ms;
use budgetgate::hook::{
    decide, Answer, HookError, HookEvent, DEFAULT_DEADLINE_MS, MAX_EVENT_BYTES,
};
use budgetgate::hook_install::{
    absolute, absolute_ledger, change, hook_command_on, proxy_url, shell_quote, with_ours,
    with_proxy, without_ours, without_proxy,
};
use budgetgate::store::{LedgerTx, LedgerUrl, RedisStore, Store};
use budgetgate::term::terminal_safe;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum HookCommand {
    /// Decide one Claude Code hook event (JSON on stdin).
    ///
    /// Reads the new lines of the session's transcript (model calls, tokens,
    /// cost), then for PreToolUse decides the call: within budget, no
    /// decision (Claude Code's own permission rules apply; the gate never
    /// answers "allow"); over a budget, a repeated identical call, a
    /// per-tool cap or a reused tool_use_id, "deny" with a reason the model
    /// can act on; a tool in needs_approval, "ask". UserPromptSubmit, Stop
    /// and SubagentStop end the session ({"continue": false}) once the
    /// budget is spent.
    #[command(after_help = "\
Exit status: 0 decided (the decision, if any, is the JSON on stdout); 2 it
could not decide (bad event, unreadable budget, corrupt ledger, lock or
deadline passed) on PreToolUse and UserPromptSubmit: Claude Code blocks the
call and shows the reason (fail closed); 1 the same on other events, where
blocking would make Claude keep working.

Examples (event.json: one hook event as Claude Code sends it on stdin, e.g.
{\"session_id\":\"s1\",\"transcript_path\":\"/tmp/t.jsonl\",\"cwd\":\"/tmp\",
\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\",
\"tool_input\":{\"command\":\"ls\"},\"tool_use_id\":\"toolu_1\"}):
  budgetgate hook claude-code --budget examples/claude-code-budget.toml < event.json
  budgetgate hook install --project --budget examples/claude-code-budget.toml --dry-run")]
    ClaudeCode(ClaudeCodeArgs),
    /// Add budgetgate's hooks to Claude Code's settings.json.
    #[command(after_help = "\
Keeps every other setting; running it again replaces budgetgate's own
entries (idempotent); the previous file is kept as settings.json.budgetgate-backup.

Exit status: 0 installed (or, with --dry-run, the diff printed); 2 the
settings file cannot be read, parsed or written (nothing changed).

Examples:
  budgetgate hook install --project --budget examples/claude-code-budget.toml
  budgetgate hook install --user --dry-run")]
    Install(InstallArgs),
    /// Remove exactly the hooks `hook install` added.
    #[command(after_help = "\
Leaves every other setting and hook as it is; running it again changes
nothing.

Exit status: 0 removed (or nothing to remove); 2 the settings file cannot be
read, parsed or written (nothing changed).

Examples:
  budgetgate hook uninstall --project
  budgetgate hook uninstall --user --dry-run")]
    Uninstall(UninstallArgs),
}

/// Runs `budgetgate hook SUBCOMMAND`.
pub fn command(command: &HookCommand) -> ExitCode {
    match command {
        HookCommand::ClaudeCode(args) => claude_code(args),
        HookCommand::Install(args) => install(args),
        HookCommand::Uninstall(args) => uninstall(args),
    }
}

/// Arguments of `budgetgate hook claude-code`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClaudeCodeArgs {
    /// Budget file (TOML, docs/TURN-GATE.md and docs/CLAUDE-CODE.md); the
    /// reference's defaults when absent.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// Folder of the ledger (default: BUDGETGATE_STATE_DIR, else
    /// $XDG_STATE_HOME/budgetgate, else ~/.local/state/budgetgate).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The ledger as `budgetgate mcp --ledger` names it: sqlite:FILE, a
    /// state folder, or redis://HOST:PORT/DB (one budget shared with
    /// gateways on other machines).
    #[arg(long, value_name = "URL", conflicts_with = "state")]
    pub ledger: Option<String>,
    /// The command's own deadline in milliseconds (1..=60000): past it, it
    /// refuses.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_DEADLINE_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub deadline_ms: u64,
}

/// Which settings file.
#[derive(Debug, Clone, clap::Args)]
#[group(multiple = false)]
pub struct Scope {
    /// The user's settings, ~/.claude/settings.json (every project).
    #[arg(long)]
    pub user: bool,
    /// This project's settings, .claude/settings.json under the current
    /// folder (the default).
    #[arg(long)]
    pub project: bool,
    /// Another settings file.
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
}

impl Scope {
    fn path(&self) -> Result<PathBuf, String> {
        if let Some(path) = &self.settings {
            return Ok(path.clone());
        }
        if self.user {
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .ok_or("HOME is not set, so ~/.claude/settings.json cannot be found")?;
            return Ok(PathBuf::from(home).join(".claude/settings.json"));
        }
        Ok(PathBuf::from(".claude/settings.json"))
    }
}

/// Arguments of `budgetgate hook install`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    #[command(flatten)]
    scope: Scope,
    /// The budget file the hook reads (stored as an absolute path).
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// The ledger folder the hook uses (stored as an absolute path).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The ledger as `budgetgate mcp --ledger` names it: sqlite:FILE, a
    /// state folder (both stored as absolute paths), or
    /// redis://HOST:PORT/DB.
    #[arg(long, value_name = "URL", conflicts_with = "state")]
    pub ledger: Option<String>,
    /// Also send Claude Code's model calls through `budgetgate proxy` at
    /// URL (`http://127.0.0.1:PORT`): sets `env.ANTHROPIC_BASE_URL` in the
    /// same settings file. The proxy then counts the session's model calls
    /// and tokens, exactly and before each call, and the hook reads them
    /// from the shared ledger instead of the transcript (docs/PROXY.md).
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Print what would change, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `budgetgate hook uninstall`.
#[derive(Debug, Clone, clap::Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    scope: Scope,
    /// Print what would change, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Whether an error on this event must block (exit 2): the events where
/// blocking is the safe direction.
fn blocks(event_name: &str) -> bool {
    matches!(event_name, "PreToolUse" | "UserPromptSubmit")
}

/// Prints the answer once: the main path and the deadline race for it.
struct Once {
    done: Mutex<bool>,
}

impl Once {
    /// Runs `print` unless an answer was already printed; returns whether it ran.
    fn answer(&self, print: impl FnOnce()) -> bool {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        if *done {
            return false;
        }
        print();
        *done = true;
        true
    }
}

fn refuse(detail: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "budgetgate hook: {}; refused (fail closed)",
        terminal_safe(detail)
    );
}

/// `budgetgate hook claude-code`: one event on stdin, the answer on stdout.
/// Exit 0 with the decision (or none) on stdout; on any error, exit 2 for
/// `PreToolUse` and `UserPromptSubmit` (Claude Code blocks and shows the
/// reason) and for an event that cannot be read at all, exit 1 for other
/// events.
pub fn claude_code(args: &ClaudeCodeArgs) -> std::process::ExitCode {
    let started = Instant::now();
    let once = Arc::new(Once {
        done: Mutex::new(false),
    });
    // The exit status of a refusal: blocking (2) until the event is read and
    // known to be one where blocking would make Claude keep working.
    let refusal = Arc::new(AtomicU8::new(2));
    {
        let (once, refusal) = (Arc::clone(&once), Arc::clone(&refusal));
        let deadline = Duration::from_millis(args.deadline_ms);
        // Started before stdin is read: a peer that never closes stdin is
        // refused at the deadline too.
        std::thread::spawn(move || {
            std::thread::sleep(deadline.saturating_sub(started.elapsed()));
            let code = refusal.load(Ordering::SeqCst);
            if once.answer(|| {
                refuse(&format!(
                    "no decision within the deadline of {} ms",
                    deadline.as_millis()
                ))
            }) {
                // The open transaction is rolled back by SQLite.
                std::process::exit(i32::from(code));
            }
        });
    }
    let outcome = (|| -> Result<(String, Answer), HookError> {
        let mut input = String::new();
        std::io::stdin()
            .take(MAX_EVENT_BYTES + 1)
            .read_to_string(&mut input)
            .map_err(|e| HookError::Event(format!("reading stdin: {e}")))?;
        if input.len() as u64 > MAX_EVENT_BYTES {
            return Err(HookError::Event(format!(
                "longer than {} MiB",
                MAX_EVENT_BYTES >> 20
            )));
        }
        let event = HookEvent::parse(&input)?;
        refusal.store(if blocks(&event.name) { 2 } else { 1 }, Ordering::SeqCst);
        let budget = match &args.budget {
            None => ReplayBudget::default(),
            Some(path) => read_budget_file(path).map_err(HookError::BudgetFile)?,
        };
        let wait = Duration::from_millis(args.deadline_ms).saturating_sub(started.elapsed());
        let url = ledger_location(args.ledger.as_deref(), args.state.as_deref())
            .map_err(HookError::Ledger)?;
        // How `budgetgate ledger` finds this ledger, for the command a
        // spent session's stop suggests.
        let shown = match (&args.ledger, &args.state) {
            (Some(url), _) => format!(" --ledger {}", shell_quote(url)),
            (None, Some(dir)) => format!(" --state {}", shell_quote(&dir.to_string_lossy())),
            (None, None) => String::new(),
        };
        let shown = budgetgate::term::terminal_safe(&shown).into_owned();
        let answer = match url {
            LedgerUrl::Redis(url) => {
                let mut store = RedisStore::open(&url, wait)?;
                // Time is the Redis server's, as for the gateways.
                store.decide(&event.session_id, |tx| {
                    let now = tx.clock_ms().unwrap_or_else(now_ms);
                    decide(tx, &event, &budget, now, &shown)
                })?
            }
            LedgerUrl::SqliteFile(file) => {
                let mut store = Store::open_file(&file, wait)?;
                store.decide(|tx| decide(tx, &event, &budget, now_ms(), &shown))?
            }
            LedgerUrl::StateDir(dir) => {
                let mut store = Store::open(&dir, wait)?;
                store.decide(|tx| decide(tx, &event, &budget, now_ms(), &shown))?
            }
        };
        Ok((event.name, answer))
    })();
    let mut code = 0u8;
    once.answer(|| match &outcome {
        Ok((name, answer)) => {
            if let Some(json) = answer.to_json(name) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{json}");
                let _ = out.flush();
            }
        }
        Err(e) => {
            refuse(&e.to_string());
            code = refusal.load(Ordering::SeqCst);
        }
    });
    std::process::ExitCode::from(code)
}

fn finish(result: Result<String, String>, what: &str) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("budgetgate hook {what}: {}", terminal_safe(&e));
            ExitCode::from(2)
        }
    }
}

/// `budgetgate hook install`.
pub fn install(args: &InstallArgs) -> ExitCode {
    let result = (|| {
        let path = args.scope.path()?;
        let program = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let budget = match &args.budget {
            Some(b) => {
                let b = absolute(b)?;
                // Read exactly as the hook will read it.
                read_budget_file(&b)?;
                Some(b)
            }
            None => {
                eprintln!(
                    "budgetgate hook install: no --budget: the reference's defaults apply (15 model calls, 150 000 tokens, 120 s per session), meant for one short run; see examples/claude-code-budget.toml"
                );
                None
            }
        };
        let state = args.state.as_deref().map(absolute).transpose()?;
        let ledger = args.ledger.as_deref().map(absolute_ledger).transpose()?;
        // Checked as the hook will check it (a folder that does not exist
        // is refused then, and every tool call with it): refused now.
        let location =
            budgetgate::gate::backend::ledger_location(ledger.as_deref(), state.as_deref())?;
        // A Redis server that does not answer would have the hook refuse
        // every tool call: asked now (PING), as the gateways ask at start.
        if let budgetgate::store::LedgerUrl::Redis(url) = location {
            budgetgate::gate::backend::open_ledger(
                Some(&url),
                std::time::Duration::from_secs(5),
                budgetgate::store::Durability::Full,
            )?
            .check()
            .map_err(|e| format!("{e}; installed, the hook would refuse every tool call while it does not answer"))?;
        }
        let command = hook_command_on(
            &program,
            budget.as_deref(),
            state.as_deref(),
            ledger.as_deref(),
        );
        let proxy = args.proxy.as_deref().map(proxy_url).transpose()?;
        change(&path, args.dry_run, |before| {
            let after = with_ours(before, &command)?;
            match &proxy {
                Some(url) => with_proxy(&after, url),
                None => Ok(after),
            }
        })
    })();
    finish(result, "install")
}

/// `budgetgate hook uninstall`.
pub fn uninstall(args: &UninstallArgs) -> ExitCode {
    let result = args.scope.path().and_then(|path| {
        change(&path, args.dry_run, |before| {
            Ok(without_proxy(&without_ours(before)))
        })
    });
    finish(result, "uninstall")
}
