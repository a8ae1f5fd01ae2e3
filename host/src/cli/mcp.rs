//! `budgetgate mcp`: its arguments, the set-up both transports share (the
//! budget read, the ledger opened, the session checked), the stdio
//! gateway's server process (started in a process group of its own, given
//! its deadline, killed), the Streamable HTTP gateway's listener and
//! runtime, and the exit statuses. The gateway itself is
//! `budgetgate::mcp` (`host/src/mcp/`).

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use budgetgate::gate::budget_file::{read_budget_file, ReplayBudget};
use budgetgate::gate::clock::now_ms as now;
use budgetgate::mcp::http::{self, listen_addr, upstream_url, Gateway, PATH};
use budgetgate::mcp::{default_session, open_ledger, serve, Backend, Ending, LedgerGate, Proxy};
use budgetgate::store::Durability;
use budgetgate::term::terminal_safe;

/// Exit status when the MCP server exited or crashed first.
pub const EXIT_SERVER_GONE: u8 = 3;

/// Arguments of `budgetgate mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Budget file (TOML, docs/TURN-GATE.md and docs/MCP.md); the
    /// reference's defaults when absent.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// The ledger: `sqlite:FILE`, a state folder (its ledger.sqlite3), or
    /// `redis://HOST:PORT/DB` for gateways on many machines. The folder the
    /// file or state folder is in must exist.
    /// Default: the hook's (BUDGETGATE_STATE_DIR, else
    /// $XDG_STATE_HOME/budgetgate, else ~/.local/state/budgetgate).
    /// `--state DIR`, as the hook names its folder, is the same.
    #[arg(long, value_name = "URL", visible_alias = "state")]
    pub ledger: Option<String>,
    /// The session whose budget the calls draw from (default: `mcp-` with
    /// the command's file name and a hash of the whole command line).
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// How durable each decision is in a SQLite ledger (docs/MCP.md,
    /// "Durability"); a Redis ledger's is the server's own (`appendfsync`).
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = Durability::Full)]
    pub durability: Durability,
    /// Where to ask approval when the client cannot (it declared no
    /// `elicitation` capability): `auto` asks the person at the gateway's
    /// controlling terminal (/dev/tty, not stdin) when there is one; `never`
    /// refuses such calls.
    #[arg(long, value_enum, value_name = "WHERE", default_value_t = TerminalUse::Auto)]
    pub terminal: TerminalUse,
    /// Seconds the client (or the person at the terminal) has to answer an
    /// approval request.
    #[arg(long, value_name = "S", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub approval_timeout: u64,
    /// Seconds after which a call in flight that was never answered gives
    /// its reservation back (a crashed gateway's calls).
    #[arg(long, value_name = "S", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub reservation_ttl: u64,
    /// Milliseconds the server has to exit once the client closed stdin;
    /// then it is killed.
    #[arg(long, value_name = "MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub shutdown_ms: u64,
    /// Serve MCP's Streamable HTTP transport at `http://ADDR/mcp` instead
    /// of stdio, in front of `--upstream` (ADDR: `PORT` or `HOST:PORT`; the
    /// host is 127.0.0.1 unless named; port 0 picks a free one, printed on
    /// stderr).
    #[arg(
        long,
        value_name = "ADDR",
        requires = "upstream",
        conflicts_with = "command"
    )]
    pub listen: Option<String>,
    /// The upstream MCP server's Streamable HTTP endpoint
    /// (`http://HOST:PORT/PATH` or `https://…`: TLS with the system's
    /// roots, certificate and host name verified), with `--listen`.
    #[arg(
        long,
        value_name = "URL",
        requires = "listen",
        conflicts_with = "command"
    )]
    pub upstream: Option<String>,
    /// A PEM file of CA certificates trusted beside the system's, for an
    /// HTTPS upstream with a private CA.
    #[arg(long, value_name = "FILE", requires = "upstream")]
    pub upstream_ca: Option<PathBuf>,
    /// Seconds the upstream has to start answering a request (its response
    /// headers); then the request is answered with a JSON-RPC error.
    #[arg(long, value_name = "S", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub upstream_timeout: u64,
    /// The MCP server's command and its arguments, best after `--` (without
    /// it, everything from the first word that is not one of the gateway's
    /// options is the command's); exactly one of a command or `--upstream`.
    #[arg(
        required_unless_present_any = ["upstream", "listen"],
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

/// Whether approval may be asked at the gateway's terminal (`--terminal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TerminalUse {
    /// At the controlling terminal, when there is one.
    Auto,
    /// Never: a call the client cannot be asked about is refused.
    Never,
}

/// What both transports share: the gate on the ledger, and the budget's
/// result bound (bytes of compact JSON).
pub struct Setup {
    /// The gate, on the session's ledger.
    pub gate: LedgerGate,
    /// `max_result_bytes` of the budget.
    pub max_result_bytes: u64,
}

/// Reads the budget, opens the ledger and checks the session of `args`
/// (`default_session` when `--session` is absent); `Err` is the one-line
/// reason the gateway does not start (exit 2, fail closed).
pub fn setup(args: &McpArgs, default_session: String) -> Result<Setup, String> {
    let budget = match &args.budget {
        None => ReplayBudget::default(),
        Some(path) => read_budget_file(path)?,
    };
    let mut store = open_ledger(
        args.ledger.as_deref(),
        Duration::from_secs(5),
        args.durability,
    )?;
    // A ledger that cannot be reached is refused at start, not at every
    // call after (which are still refused while it is gone).
    store.check()?;
    // A Redis that does not persist every write loses the ledger when it
    // restarts: said at start (the gateway still starts).
    if let Backend::Redis(redis) = &mut store {
        if let Some(warning) = redis.persistence_warning().map_err(|e| e.to_string())? {
            eprintln!("budgetgate mcp: warning: {}", terminal_safe(&warning));
        }
    }
    let session = args.session.clone().unwrap_or(default_session);
    if session.is_empty() || session.chars().count() > 256 || session.chars().any(char::is_control)
    {
        return Err("--session must be 1 to 256 characters without control characters".into());
    }
    let max_result_bytes = budget.max_result_bytes;
    let gate = LedgerGate::on(store, budget, session, args.reservation_ttl * 1000);
    Ok(Setup {
        gate,
        max_result_bytes,
    })
}

/// The terminal to ask approval at (`--terminal auto`: the controlling
/// terminal, when the gateway has one).
pub fn asking_terminal(args: &McpArgs) -> Option<std::fs::File> {
    match args.terminal {
        TerminalUse::Auto => budgetgate::mcp::terminal::controlling(),
        TerminalUse::Never => None,
    }
}

/// Kills the server and its process group (what it started), and reaps it.
fn kill(child: &mut Child) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn describe_exit(child: &mut Child) -> Option<String> {
    let status = child.try_wait().ok()??;
    Some(match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => {
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                match status.signal() {
                    Some(sig) => format!("was killed by signal {sig}"),
                    None => "exited".to_owned(),
                }
            }
            #[cfg(not(unix))]
            {
                "exited".to_owned()
            }
        }
    })
}

/// `budgetgate mcp`: exit 0 when the client closed stdin (the server was
/// stopped), 2 when the gateway cannot start (budget, ledger, command),
/// [`EXIT_SERVER_GONE`] when the server exited or crashed first.
pub fn command(args: &McpArgs) -> ExitCode {
    let fail = |what: String| {
        eprintln!(
            "budgetgate mcp: {}; not started (fail closed)",
            terminal_safe(&what)
        );
        ExitCode::from(2)
    };
    if let Some(url) = &args.upstream {
        return http_command(args, url);
    }
    let Some(program) = args.command.first() else {
        return fail("no MCP server command (after --) and no --upstream".into());
    };
    let Setup {
        gate,
        max_result_bytes,
    } = match setup(args, default_session(&args.command)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut server = Command::new(program);
    server
        .args(&args.command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        server.process_group(0);
    }
    let mut child = match server.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("starting {program:?}: {e}")),
    };
    let (Some(server_in), Some(server_out)) = (child.stdin.take(), child.stdout.take()) else {
        kill(&mut child);
        return fail("the server's pipes could not be opened".into());
    };
    let connection = format!("{}-{}", std::process::id(), now());
    let mut proxy = Proxy::new(
        gate,
        connection,
        max_result_bytes,
        args.approval_timeout * 1000,
    );
    let stdout = std::io::stdout();
    let mut client_out = stdout.lock();
    let ending = serve(
        &mut proxy,
        std::io::stdin(),
        &mut client_out,
        server_in,
        server_out,
        &mut || describe_exit(&mut child),
        Duration::from_millis(args.shutdown_ms),
        asking_terminal(args),
    );
    match ending {
        Ending::ClientClosed { at } => {
            // The server's stdin is closed by now (its writer ended with the
            // proxy's channel); it has the deadline from the client's close
            // to exit, then it is killed.
            let deadline = at + Duration::from_millis(args.shutdown_ms);
            while Instant::now() < deadline {
                if describe_exit(&mut child).is_some() {
                    // What it started and left behind goes with it.
                    kill(&mut child);
                    return ExitCode::SUCCESS;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kill(&mut child);
            eprintln!(
                "budgetgate mcp: the server did not exit within {} ms of the client closing stdin; killed",
                args.shutdown_ms
            );
            ExitCode::SUCCESS
        }
        Ending::ServerGone(why) => {
            let why = describe_exit(&mut child).unwrap_or(why);
            kill(&mut child);
            eprintln!(
                "budgetgate mcp: the MCP server {why}; the gateway ends (exit {EXIT_SERVER_GONE})"
            );
            ExitCode::from(EXIT_SERVER_GONE)
        }
    }
}

/// `budgetgate mcp --listen ADDR --upstream URL`: serves until SIGINT or
/// SIGTERM (exit 0, calls in flight counted); exit 2 when it cannot start.
pub fn http_command(args: &McpArgs, upstream: &str) -> ExitCode {
    let fail = |what: String| {
        eprintln!(
            "budgetgate mcp: {}; not started (fail closed)",
            terminal_safe(&what)
        );
        ExitCode::from(2)
    };
    let addr = match args.listen.as_deref().map(listen_addr) {
        Some(Ok(a)) => a,
        Some(Err(e)) => return fail(e),
        None => return fail("--upstream needs --listen ADDR".into()),
    };
    let url = match upstream_url(upstream) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let Setup {
        gate,
        max_result_bytes,
    } = match setup(args, http::default_session(&url)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("the async runtime: {e}")),
    };
    let connection = format!("{}-{}", std::process::id(), now());
    let gw = match Gateway::new(
        url.to_string(),
        gate,
        max_result_bytes,
        Duration::from_secs(args.upstream_timeout),
        Duration::from_secs(args.approval_timeout),
        connection,
        asking_terminal(args),
    )
    .and_then(|g| match &args.upstream_ca {
        Some(ca) => g.with_upstream_ca(ca),
        None => Ok(g),
    }) {
        Ok(g) => Arc::new(g),
        Err(e) => return fail(e),
    };
    runtime.block_on(async move {
        let listener = match budgetgate::net::bind(addr, "mcp", PATH, url.as_str()).await {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        http::serve(listener, Arc::clone(&gw)).await;
        gw.close_all();
        eprintln!("budgetgate mcp: stopped");
        ExitCode::SUCCESS
    })
}
