//! `budgetgate device`: its arguments, the script file read, the session
//! run on the link the options name, and its exit status; `device audit`'s
//! arguments and printing. The device client itself is
//! `budgetgate::device` (`host/src/device/`).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use budgetgate::device::audit::read_audit;
use budgetgate::device::{
    connect, error_line, read_script, AgentLink, Console, DeviceError, Operator, Port, Script,
    Session, SessionEnd, CONSOLE_TIMEOUT,
};
use budgetgate::input::{read_path, ReadError};
use budgetgate::term::terminal_safe;

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
    Audit(AuditArgs),
}

/// Arguments of `budgetgate device audit`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// The operator console over TCP (QEMU's UART1).
    #[arg(long, value_name = "HOST:PORT")]
    pub console: String,

    /// Print each entry as one JSON object per line
    /// (`{"run":1,"step":0,"call_id":"c1","tool":"HassTurnOn","verdict":"executed","time_ms":12}`;
    /// `call_id` and `tool` are null when the entry is not about a call).
    #[arg(long)]
    pub json: bool,
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
        return audit_command(audit);
    }
    match run(args) {
        Ok(end) => ExitCode::from(end.exit_code()),
        Err(e) => {
            eprintln!("{}", error_line(&e));
            ExitCode::from(2)
        }
    }
}

/// Runs `budgetgate device audit`: prints the log, exit status 0; 2 (one
/// line on stderr) on a transport or protocol error.
pub fn audit_command(args: &AuditArgs) -> ExitCode {
    let result = connect(&args.console, "console")
        .and_then(|mut console| read_audit(&mut console, CONSOLE_TIMEOUT));
    let entries = match result {
        Ok(entries) => entries,
        Err(e) => {
            eprintln!("{}", error_line(&e));
            return ExitCode::from(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for entry in &entries {
        let written = if args.json {
            serde_json::to_string(entry)
                .map_err(std::io::Error::other)
                .and_then(|line| writeln!(out, "{line}"))
        } else {
            writeln!(
                out,
                "run {} step {} {} {} {} at {} ms",
                entry.run,
                entry.step,
                terminal_safe(entry.call_id.as_deref().unwrap_or("-")),
                terminal_safe(entry.tool.as_deref().unwrap_or("-")),
                terminal_safe(&entry.verdict),
                entry.time_ms
            )
        };
        if written.is_err() {
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The same class of fault as the endless reply, on the script side:
    /// the script was read whole, whatever its size.
    #[test]
    fn a_script_file_is_read_bounded() {
        let began = Instant::now();
        let e = read_text("/dev/zero").unwrap_err().to_string();
        assert_eq!(e, "/dev/zero: larger than 16 MiB; refused");
        assert!(began.elapsed() < Duration::from_secs(5));
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceArgs,
    }

    /// Found by a hostile trial: `--baud 0` was accepted and
    /// `--reply-timeout 0` silently waited 1 s.
    #[test]
    fn zero_baud_and_zero_reply_timeout_are_refused_with_their_range() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["device", "--serial", "/dev/null", "s.json"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map_err(|e| e.to_string())
        };
        let e = parse(&["--baud", "0"]).unwrap_err();
        assert!(e.contains("0 is not in 50..=4000000"), "{e}");
        let e = parse(&["--reply-timeout", "0"]).unwrap_err();
        assert!(e.contains("0 is not in 1..=3600"), "{e}");
        let ok = parse(&["--baud", "9600", "--reply-timeout", "1"]).unwrap();
        assert_eq!((ok.device.baud, ok.device.reply_timeout), (9600, 1));
    }
}
