//! `budgetgate proxy`: its arguments, turned into the proxy's set-up
//! ([`budgetgate::proxy::Config`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use budgetgate::proxy::{self, Config};
use budgetgate::store::Durability;

/// Arguments of `budgetgate proxy`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyArgs {
    /// Where to serve the model API: `PORT` (on 127.0.0.1) or `HOST:PORT`;
    /// port 0 picks a free one, printed on stderr.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// The model API to forward to: `https://api.anthropic.com`,
    /// `https://api.openai.com`, or any `http(s)://HOST[:PORT][/PATH]` (the
    /// request's path is added to PATH).
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// A PEM file of CA certificates trusted beside the system's, for an
    /// HTTPS upstream with a private CA.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
    /// Budget file (TOML, docs/BUDGETS.md); the reference's defaults when
    /// absent. `token_mode = "reserve"` reserves each call's worst case.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// The ledger: `sqlite:FILE`, a state folder, or `redis://HOST:PORT/DB`
    /// (the hook's and the MCP gateway's, so they share one budget).
    /// `--state DIR`, as the hook names its folder, is the same.
    #[arg(long, value_name = "URL", visible_alias = "state")]
    pub ledger: Option<String>,
    /// The session of requests that name none (Claude Code names its own in
    /// `X-Claude-Code-Session-Id`).
    #[arg(long, value_name = "NAME", default_value = "proxy")]
    pub session: String,
    /// A request header that names the session, for clients other than
    /// Claude Code (e.g. `x-agent-session`).
    #[arg(long, value_name = "HEADER")]
    pub session_header: Option<String>,
    /// How durable each decision is in a SQLite ledger.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = Durability::Full)]
    pub durability: Durability,
    /// Seconds a model call may take, from its request to its last byte;
    /// past it the call is cut and what was reported counts.
    #[arg(long, value_name = "S", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub call_timeout: u64,
    /// Seconds past a call's deadline after which a call no proxy counted
    /// (its proxy was killed mid-call) is counted as spent: its
    /// reservation in reserve mode, else its input bound. Until then it
    /// holds its place in the budget. Several proxies on one Redis ledger
    /// should agree on it.
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub orphan_grace: u64,
    /// The largest request body, MiB: a larger one is refused 413 before
    /// anything is sent. Four times this is the most the proxy holds of
    /// every request being read or forwarded at once; past it a request is
    /// refused 503 (`overloaded_error`, to be sent again).
    #[arg(long, value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_request_mib: u64,
}

/// Runs `budgetgate proxy`: exit 0 when stopped by SIGINT or SIGTERM, 2 when
/// it cannot start.
pub fn main(args: &ProxyArgs) -> ExitCode {
    let listen = match budgetgate::net::listen_addr(&args.listen) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("budgetgate proxy: {e}; not started");
            return ExitCode::from(2);
        }
    };
    let started = proxy::run(&Config {
        listen,
        upstream: args.upstream.clone(),
        budget: args.budget.clone(),
        ledger: args.ledger.clone(),
        session: args.session.clone(),
        session_header: args.session_header.clone(),
        durability: args.durability,
        call_timeout: Duration::from_secs(args.call_timeout),
        orphan_grace: Duration::from_secs(args.orphan_grace),
        upstream_ca: args.upstream_ca.clone(),
        max_request: usize::try_from(args.max_request_mib << 20).unwrap_or(proxy::MAX_REQUEST),
    });
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "budgetgate proxy: {}; not started (fail closed)",
                budgetgate::term::terminal_safe(&e)
            );
            ExitCode::from(2)
        }
    }
}
