//! `budgetgate device`: runs a script of proposals through the gate on a
//! co-processor, over its agent link (`docs/PROTOCOL.md`), and optionally
//! acts as the operator on its console.
//!
//! The host is only the agent's messenger: every decision is the device's.
//! It sends one `PROPOSE` at a time, waits for the verdict, and prints it.
//! The frame codec is the core's ([`budgetgate_core::link`]), so host and
//! device read and write the same bytes.
//!
//! * [`DeviceArgs`] and [`command`]: the subcommand (`budgetgate device`).
//! * [`Session`]: the same, as a library, over any [`Port`] (used by the QEMU
//!   end-to-end tests).
//! * [`AgentLink`]: framed requests and verified replies; [`DeviceReply`]: a
//!   reply read back into a Rust value; [`Expected`]: what a reply must be to
//!   belong to its request; [`minify`]: a proposal made into one line without
//!   changing a byte of its meaning.
//!
//! Whatever the peer sends, the host holds a few frames of memory at most: a
//! reply line longer than [`FRAME_MAX`](budgetgate_core::link::FRAME_MAX) is
//! reported at once and discarded to its line end, and so is a console line
//! longer than [`CONSOLE_LINE_MAX`]. Every text printed from a script or a
//! device goes through [`terminal_safe`](crate::term::terminal_safe) (or,
//! for `--json`, [`json_terminal_safe`]).
//!
//! Replies have one schema, the core's
//! [`link::Reply`](budgetgate_core::link::Reply): the device writes it
//! with borrowed words (`Reply<&str, _>`), the host reads it with owned ones
//! ([`DeviceReply`], `Reply<String, Value>`: an owned string can hold what a
//! peer escaped). A test writes every kind of reply with the core's codec
//! and reads it back here.
//!
//! The rooms of this folder: `mod.rs` the command's arguments, set-up and
//! [`command`]; `link.rs` the byte links (TCP, serial), the agent link's
//! framing and [`DeviceError`]; `console.rs` the operator console;
//! `script.rs` the script file; `session.rs` a script run through the
//! device; `expected.rs` what a reply must be to belong to its request;
//! `report.rs` the readable report; [`audit`] the device's audit log;
//! `tests.rs` the unit tests.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::input::{read_path, ReadError};

mod console;
mod expected;
mod link;
mod report;
mod script;
mod session;

pub mod audit;

pub use console::*;
pub use expected::*;
pub use link::*;
pub use report::*;
pub use script::*;
pub use session::*;

/// Largest script file read (as the other commands' inputs): a script has a
/// few dozen proposals of at most a frame each.
pub const SCRIPT_MAX_BYTES: u64 = 16 << 20;
/// The accepted `--baud` rates.
pub const BAUD_RANGE: std::ops::RangeInclusive<i64> = 50..=4_000_000;
/// The accepted `--reply-timeout` seconds.
pub const REPLY_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;

/// Arguments of `budgetgate device`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("link").required(true).args(["tcp", "serial"])))]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DeviceArgs {
    /// `audit`: read the device's audit log instead of running a script.
    #[command(subcommand)]
    pub action: Option<DeviceAction>,

    /// The agent link over TCP, e.g. QEMU's UART0 (`-serial tcp::4440,server=on`).
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp: Option<String>,

    /// The agent link on a serial port (8N1, no flow control).
    #[arg(long, value_name = "PATH")]
    pub serial: Option<PathBuf>,

    /// Baud rate of --serial, 50..=4000000.
    #[arg(long, value_name = "N", default_value_t = 115_200, requires = "serial",
          value_parser = clap::value_parser!(u32).range(BAUD_RANGE))]
    pub baud: u32,

    /// The operator console over TCP: the command sends `start` there first
    /// and answers every approval prompt as --operator says.
    #[arg(long, value_name = "HOST:PORT", requires = "operator")]
    pub console: Option<String>,

    /// How to answer approval prompts on --console.
    #[arg(long, value_enum, requires = "console")]
    pub operator: Option<Operator>,

    /// The script: {"script": [proposal, ...], ...}, the file format of
    /// `budgetgate run`. With --console, its max_decisions and max_tool_calls
    /// (if given) are the budgets the run is started with; other keys (such
    /// as tools) are ignored: the device has its own tools. "-" reads
    /// standard input.
    #[arg(value_name = "SCRIPT.json", required = true)]
    pub script: Option<String>,

    /// Print each reply of the device as one JSON line (the frame's payload;
    /// characters a terminal would act on, such as ESC or bidi controls, are
    /// written as JSON escapes) instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Print every raw frame and console line on standard error (escaped
    /// for the terminal; a line over 1024 bytes is not printed).
    #[arg(long)]
    pub frames: bool,

    /// Seconds to wait for each reply, 1..=3600 (a call that needs approval
    /// waits for the operator, up to the device's approval timeout: keep this
    /// longer than that).
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(REPLY_TIMEOUT_RANGE))]
    pub reply_timeout: u64,
}

/// What `budgetgate device` does instead of running a script.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DeviceAction {
    /// Read the device's audit log (its flash, issue 15) over its console.
    ///
    /// Sends `audit` on --console and prints every entry, oldest first:
    /// run, step, call id, tool, verdict and the device's clock. Exit
    /// status 0, or 2 on a transport or protocol error (one line on stderr).
    ///
    /// Example: budgetgate device audit --console 127.0.0.1:4441 --json
    Audit(audit::AuditArgs),
}

/// Reads the script file (`-`: standard input), at most
/// [`SCRIPT_MAX_BYTES`]: a larger one (or `/dev/zero`) is refused without
/// being read whole, as every other input of the command.
fn read_text(path: &str) -> Result<String, DeviceError> {
    let bytes = read_path(std::path::Path::new(path), SCRIPT_MAX_BYTES).map_err(|e| match e {
        ReadError::Io(e) => DeviceError::Usage(format!("{path}: cannot read: {e}")),
        ReadError::TooLarge { limit } => {
            DeviceError::Usage(format!("{path}: larger than {} MiB; refused", limit >> 20))
        }
    })?;
    String::from_utf8(bytes).map_err(|e| DeviceError::Usage(format!("{path}: not UTF-8: {e}")))
}

fn session<P: Port>(
    args: &DeviceArgs,
    agent: P,
    script: &Script,
) -> Result<SessionEnd, DeviceError> {
    let console = match (&args.console, args.operator) {
        (Some(address), Some(operator)) => Some(Console::new(
            connect(address, "console")?,
            operator,
            args.frames,
        )?),
        _ => None,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut session = Session::new(
        AgentLink::new(agent, args.frames),
        console,
        args.json,
        Duration::from_secs(args.reply_timeout),
        &mut out,
    );
    session.run(script)
}

fn run(args: &DeviceArgs) -> Result<SessionEnd, DeviceError> {
    let path = args
        .script
        .as_deref()
        .ok_or_else(|| DeviceError::Usage("give a SCRIPT.json (or `audit`)".into()))?;
    let text = read_text(path)?;
    let name = if path == "-" { "<stdin>" } else { path };
    let script = read_script(name, &text)?;
    match (&args.tcp, &args.serial) {
        (Some(address), None) => session(args, connect(address, "agent link")?, &script),
        (None, Some(path)) => {
            let port = serialport::new(path.to_string_lossy(), args.baud)
                .timeout(Duration::from_millis(100))
                .open()
                .map_err(|e| DeviceError::Io {
                    what: format!("opening {}", path.display()),
                    source: e.into(),
                })?;
            session(args, port, &script)
        }
        _ => Err(DeviceError::Usage(
            "give exactly one of --tcp HOST:PORT and --serial PATH".into(),
        )),
    }
}

/// Runs `budgetgate device`: exit status 0 when the run ended with `final`,
/// 1 with any other stop status (or the script ended first), 2 on a usage,
/// transport or protocol error (one line on stderr).
pub fn command(args: &DeviceArgs) -> ExitCode {
    if let Some(DeviceAction::Audit(audit)) = &args.action {
        return audit::command(audit);
    }
    match run(args) {
        Ok(end) => ExitCode::from(end.exit_code()),
        Err(e) => {
            eprintln!("{}", error_line(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests;
