//! The `budgetgate` command.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Gate what an AI agent may do: validate its proposals and enforce the
/// budgets of its run and of its plan, exactly as the budgetgate core
/// decides them.
#[derive(Parser)]
#[command(
    name = "budgetgate",
    version,
    after_help = "\
Exit status (plan, run, replay, device): 0 complete, 1 stopped by a limit
or budget, 2 invalid input (a one-line error on stderr names the file and the
rule); each subcommand's --help gives its own.

SPEC A, SPEC B, SPEC C: sections of the behaviour contract, docs/CONTRACT.md
in the repository (SPEC X names its section X).

Examples:
  budgetgate hook install --budget examples/claude-code-budget.toml
  budgetgate mcp --budget examples/mcp-budget.toml -- npx -y @modelcontextprotocol/server-everything
  budgetgate replay ~/.claude/projects --budget examples/budget.toml
  budgetgate ledger list
  budgetgate plan examples/plan.json --limits examples/limits.json
  echo '{\"fn\":\"aggregate_usage\",\"args\":{\"plan\":[]}}' | budgetgate eval"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a plan of sub-tasks against whole-run limits (SPEC B).
    ///
    /// Reads a plan, a JSON array of at most 32 rows {"id", "parent", "tokens",
    /// "output"}: ids match [a-z][a-z0-9-]{0,31} and are unique, "parent" is
    /// null or the id of an earlier row, "tokens" and "output" are integers
    /// 0..=10000. Shows the usage of the whole plan (aggregate_usage), then runs
    /// the bounded workflow (bounded_workflow): before each step, in row order,
    /// the would-be totals are checked against the limits in the order steps,
    /// tokens, output, depth, fanout; the first one exceeded stops the plan
    /// before that step. Each step is shown, as a tree by parent, as accepted,
    /// "stopped here (limit: tokens 5 > 4)" or not reached.
    ///
    /// Limits come from --limits FILE (a JSON object with exactly steps,
    /// tokens, output, depth, fanout) or from the single options. A limit not
    /// given is at its contract maximum (steps, depth, fanout 32; tokens,
    /// output 320000), which no valid plan can exceed: with no limits at all,
    /// the command checks the plan and shows its usage.
    ///
    /// With --json, prints one line: {"usage": USAGE, "workflow": WORKFLOW},
    /// where USAGE is aggregate_usage's result {steps, tokens, output,
    /// max_depth, max_fanout} and WORKFLOW is bounded_workflow's result
    /// {accepted: [ids], stopped: id or null, reason, usage}, both exactly as
    /// `budgetgate eval` answers them.
    #[command(after_help = "\
Exit status: 0 every step accepted, 1 stopped by a limit, 2 invalid input:
the plan or limits file cannot be read or breaks a rule; one line on stderr
names the file, the row (counted from 0) and the rule, e.g.
  budgetgate plan: bad.json: row 3 (id \"draft\"): `parent` is not the id of an earlier row

Examples:
  budgetgate plan examples/plan.json
  budgetgate plan examples/plan.json --limits examples/limits.json
  budgetgate plan examples/plan.json --tokens 9000 --fanout 2
  budgetgate plan examples/plan.json --limits examples/limits.json --json

SPEC B: section B of the behaviour contract, docs/CONTRACT.md in the repository.")]
    #[command(display_order = 8)]
    Plan(cli::plan::PlanArgs),

    /// Run a scripted agent against the demo tools within its budgets (SPEC A).
    ///
    /// Reads a script file {"script": [proposal, ...], "tools": {"name":
    /// "kind", ...}, "max_decisions"?: N, "max_tool_calls"?: N}, the arguments
    /// of eval's run_bounded_agent. Round i proposes script[i] whatever it
    /// observed; a used-up script makes the policy fail (policy-error). A
    /// proposal is {"kind": "final", "text": ...} or {"kind": "tool",
    /// "call_id": ..., "name": ..., "arguments": {...}}. Tool kinds: add
    /// (exactly a and b, numbers but not booleans: a + b), echo (returns its
    /// arguments), fail (always fails), repeat (exactly s, a string, and n, an
    /// integer 0..=10000: s repeated n times), nested (no arguments: a fixed
    /// nested value); other arguments make the tool fail (tool-error). Budgets
    /// default to 8 decisions
    /// and 4 tool attempts; the options override the file.
    ///
    /// Prints the trace as a table (step, decision, call id, tool, executed,
    /// ok, observation cut to 40 characters), then the status, the answer, the
    /// counts and the work units (trace_work): every decision costs
    /// --decision-units (default 1), every execution of a tool its
    /// --tool-units cost (default 1 for every registered tool).
    ///
    /// With --json, prints one line: the run_bounded_agent result {status,
    /// answer, observations, trace, tool_attempts}, exactly as `budgetgate
    /// eval` answers it under "ok" (no work units), so programs can compare.
    #[command(after_help = "\
Exit status: 0 the run ended with final, 1 it ended with any other status
(tool-budget, decision-budget, policy-error, duplicate-call), 2 invalid input
(unreadable or malformed script file, unknown tool kind, bad option).

Examples:
  budgetgate run examples/run-add.json
  budgetgate run examples/run-budget.json --json
  budgetgate run examples/run-add.json --decision-units 2 --tool-units add=3
  budgetgate run examples/run-add.json --max-decisions 1

SPEC A: section A of the behaviour contract, docs/CONTRACT.md in the repository.")]
    #[command(display_order = 9)]
    Run(cli::run::RunArgs),

    /// Answer JSON Lines requests on stdin, one JSON line per request on stdout.
    ///
    /// The machine interface to every contract function. A request is one
    /// line {"fn": NAME, "args": {...}}; the answer is one line {"ok":
    /// RESULT}, {"error": "invalid-input", "detail": TEXT} where the contract
    /// calls the input invalid, or {"error": "bad-request", "detail": TEXT} for
    /// a line that is not a request (not UTF-8, not a JSON object, unknown fn,
    /// wrong arguments). Every line, even an empty or bad one, gets exactly one
    /// answer, in order; a bad line never stops the stream.
    ///
    /// Functions and their args: validate_agent_action {value};
    /// run_bounded_agent {script, tools, max_decisions?, max_tool_calls?};
    /// trace_work {trace, decision_units, tool_units}; aggregate_usage {plan};
    /// bounded_workflow {plan, limits}.
    #[command(after_help = "\
Exit status: 0 at the end of input, or when the reader closes the pipe
(`| head`); 2, with the reason on stderr, when stdin cannot be read or
stdout cannot be written (a full disk).

Examples:
  $ echo '{\"fn\":\"aggregate_usage\",\"args\":{\"plan\":[]}}' | budgetgate eval
  {\"ok\":{\"steps\":0,\"tokens\":0,\"output\":0,\"max_depth\":0,\"max_fanout\":0}}
  $ echo '{\"fn\":\"validate_agent_action\",\"args\":{\"value\":[]}}' | budgetgate eval
  {\"error\":\"invalid-input\",\"detail\":\"an action must be a JSON object\"}")]
    #[command(display_order = 7)]
    Eval,

    /// Re-decide a recorded agent session through the turn gate (SPEC C).
    ///
    /// Reads a recorded session (Claude Code JSONL log, Anthropic Messages API
    /// request/response pairs as JSON or JSONL, a VCR cassette in YAML, or a
    /// SWE-agent .traj; the format is detected and named) and replays it turn
    /// by turn as if the gate had been in the loop: per turn the usage (each
    /// token field and the running total) and each tool call's verdict; where
    /// the budget would have stopped the agent and why; the totals; and the
    /// refusals counted by reason. Budgets come from a TOML file
    /// (docs/TURN-GATE.md, examples/budget.toml); the defaults are the
    /// reference's: 15 steps, 150 000 tokens, 120 s, 2 repeats.
    ///
    /// With --json, prints one object with format, turns, tool_calls, usage
    /// {input_tokens, output_tokens, cache_read_input_tokens,
    /// cache_creation_input_tokens, total}, stopped (null or {turn, reason}),
    /// overshoot (null or {limit, used, max, by}: the budget the gated run
    /// passed, e.g. {"limit":"tokens","used":200001,"max":150000,"by":50001}
    /// for one response of 200 001 tokens, since after-the-fact mode checks
    /// before each call) and refusals {reason: count}.
    #[command(after_help = "\
Exit status: 0 the gate would not have stopped the session and its budget
held, 1 it would have stopped it or the budget was overshot, 2 the session or budget file cannot be read (or is over 256 MiB / 1 MiB), or
the report cannot be written. FILE `-` reads the session from stdin.

Examples:
  budgetgate replay examples/replay/claude-code.jsonl
  budgetgate replay examples/replay/vcr-cassette.yaml --budget examples/budget.toml
  budgetgate replay examples/replay/swe-agent.traj --approve none --json

SPEC C: section C of the behaviour contract, docs/CONTRACT.md in the repository.")]
    #[command(display_order = 4)]
    Replay(cli::replay::ReplayArgs),

    /// Run a script of proposals through the gate on a device (a
    /// co-processor on a serial line, or the firmware under QEMU).
    ///
    /// Speaks the agent link protocol (docs/PROTOCOL.md) over --tcp or
    /// --serial: sends the proposals of SCRIPT.json ({"script": [proposal,
    /// ...], ...}, the file format of `budgetgate run`) one at a time, waits
    /// for each verdict and prints it. The device decides everything with
    /// its own tools, budgets, argument checks and approvals. With --console
    /// and --operator this program is also the operator: it starts the run
    /// (with the file's max_decisions and max_tool_calls, if it has them)
    /// and answers every approval prompt.
    #[command(after_help = "\
Exit status: 0 the run ended with final, 1 it ended with any other status
(or the script ended first), 2 a usage, transport or protocol error, such as a
reply that does not belong to its request (one line on stderr).

Examples:
  budgetgate device --tcp 127.0.0.1:4440 --console 127.0.0.1:4441 --operator approve examples/device-session.json
  budgetgate device --serial /dev/ttyACM0 examples/device-session.json --json
  scripts/demo")]
    #[command(display_order = 6)]
    Device(cli::device::DeviceArgs),

    /// Put the gate in front of an agent as a hook (Claude Code).
    ///
    /// `hook claude-code` is what Claude Code runs for each hook event: the
    /// event on stdin, the decision on stdout (docs/CLAUDE-CODE.md).
    /// `hook install` writes the hooks into Claude Code's settings;
    /// `hook uninstall` removes exactly what install added.
    #[command(subcommand)]
    #[command(display_order = 1)]
    Hook(cli::hook::HookCommand),

    /// Put the gate in front of an MCP server (stdio, or Streamable HTTP
    /// with --listen): every tools/call is decided against the budget
    /// before it reaches the server.
    ///
    /// Starts COMMAND as the MCP server, a child speaking newline-delimited
    /// JSON-RPC on its stdin and stdout, and serves the MCP client on this
    /// program's own stdin and stdout. Everything passes through unchanged
    /// except tools/call, which is decided with the hook's rules, order and
    /// words (docs/MCP.md): a refused call is answered with a CallToolResult
    /// {"isError": true, "content": [{"type": "text", "text": REASON}],
    /// "_meta": {"budgetgate": {reason, limit, used, max, retry_after}}} and
    /// never reaches the server. Tools in needs_approval are asked about
    /// with elicitation/create when the client supports it, otherwise at
    /// the gateway's terminal when it has one (--terminal), otherwise
    /// refused. Results over max_result_bytes are replaced by an error
    /// result; lines over 16 MiB are refused.
    #[command(after_help = "\
Exit status: 0 the client closed stdin (the server was stopped, killed after
--shutdown-ms); 2 the gateway could not start (budget, ledger, command; one
line on stderr); 3 the MCP server exited or crashed first (every pending
request was answered with a JSON-RPC error).

With --listen ADDR --upstream URL the gateway serves MCP's Streamable HTTP
transport at http://ADDR/mcp (ADDR: PORT on 127.0.0.1, or HOST:PORT) in front
of the upstream server's URL instead of starting a command; it runs until
SIGINT or SIGTERM (exit 0). A request the upstream cannot answer (not
reachable, a 5xx, no answer within --upstream-timeout) is answered with a
JSON-RPC error. Approval works over HTTP too (the question goes on the call's
stream, the answer comes in a POST of its own).

Examples:
  budgetgate mcp --budget examples/mcp-budget.toml -- npx -y @modelcontextprotocol/server-everything
  budgetgate mcp --session team-a --ledger sqlite:/var/lib/budgetgate/ledger.sqlite3 -- ./my-server
  budgetgate mcp --durability normal -- ./my-server    # faster; a power cut may forget the last calls
  budgetgate mcp --listen 8080 --upstream http://127.0.0.1:3001/mcp --session remote")]
    #[command(display_order = 2)]
    Mcp(cli::mcp::McpArgs),

    /// Put the gate in front of the model API: every model call is decided
    /// against the budget before it reaches the provider.
    ///
    /// Serves Anthropic's Messages API (POST /v1/messages) and OpenAI's Chat
    /// Completions and Responses (POST /v1/chat/completions, /v1/responses),
    /// streamed or not, and forwards them to --upstream; everything else
    /// (count_tokens, model lists) passes through ungated. Before each call
    /// the engine checks model calls, tokens, cost and time (docs/PROXY.md);
    /// with token_mode = "reserve" the call's worst case (its input bound
    /// plus its max tokens) must fit, or, with reserve_min_reply_tokens,
    /// is sent with its max tokens lowered to what is left (said in the
    /// answer's x-budgetgate-max-tokens). A refused call never reaches the
    /// upstream: it is answered with the provider's own error shape, status
    /// 402 and x-should-retry: false, naming the limit and what was used.
    /// The response's usage is read on the way back and counted in the
    /// ledger the hook and the MCP gateway share.
    #[command(after_help = "\
Exit status: 0 stopped by SIGINT or SIGTERM; 2 it could not start (budget,
ledger, address, upstream; one line on stderr).

Examples:
  budgetgate proxy --upstream https://api.anthropic.com --budget budget.toml
  ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude
  budgetgate proxy --listen 127.0.0.1:0 --upstream https://llm.internal --upstream-ca ca.pem --ledger redis://127.0.0.1/0
  OPENAI_BASE_URL=http://127.0.0.1:8787/v1 python agent.py")]
    #[command(display_order = 3)]
    Proxy(cli::proxy::ProxyArgs),

    /// Look at (or, as an operator, reset) the durable ledger that the hook
    /// and other front-ends share.
    #[command(subcommand)]
    #[command(display_order = 5)]
    Ledger(cli::ledger::LedgerCommand),
}

/// Where the library's notes go: a long-running front-end (the gateways,
/// the proxy, the device link) says what it drops, retries or traces
/// through the `log` facade, and only this command prints them, one line
/// each on standard error, as written (`log` rather than a printer of our
/// own: the library never prints, and a program that embeds it chooses).
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // Ours only: what the libraries below note (rustls, say) is not
        // this command's to show.
        metadata.level() <= log::Level::Info && metadata.target().starts_with("budgetgate")
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            use std::io::Write as _;
            // Standard error gone (a closed terminal): nothing to tell.
            let _ = writeln!(std::io::stderr().lock(), "{}", record.args());
        }
    }
    fn flush(&self) {}
}

static STDERR_LOG: StderrLog = StderrLog;

fn main() -> ExitCode {
    if log::set_logger(&STDERR_LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => cli::plan::main(&args).into(),
        Command::Run(args) => cli::run::main(&args).into(),
        Command::Eval => cli::eval::main().into(),
        Command::Replay(args) => cli::replay::command(&args),
        Command::Device(args) => cli::device::command(&args),
        Command::Hook(command) => cli::hook::command(&command),
        Command::Ledger(command) => cli::ledger::command(&command),
        Command::Mcp(args) => cli::mcp::command(&args),
        Command::Proxy(args) => cli::proxy::main(&args),
    }
}
