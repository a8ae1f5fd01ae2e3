//! A replay's inputs read: the recording (whole, gunzipped, or a large
//! Claude Code log line by line), its sub-agent logs, and the budget file.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::budget::{self, ApprovePolicy, ReplayBudget};
use super::read::{read_large_claude_code_spilled, read_session};
use super::session::{Format, Session};
use super::{input_name, spill_read_error, ReplayOptions, MAX_SESSION_BYTES};

/// The sub-agent logs Claude Code keeps beside a session log `S.jsonl`:
/// `S/subagents/agent-ID.jsonl`, by name, as `(agent-ID, path)`. Empty for
/// standard input or when there are none.
pub fn subagent_logs(main: &Path) -> Vec<(String, PathBuf)> {
    if main == Path::new("-") {
        return Vec::new();
    }
    let dir = main.with_extension("").join("subagents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let agent = name.strip_suffix(".jsonl")?;
            agent
                .starts_with("agent-")
                .then(|| (agent.to_owned(), e.path()))
        })
        .collect();
    found.sort();
    found
}

/// Reads a Claude Code session log's sub-agent logs ([`subagent_logs`])
/// into `session`; an unreadable one is an error naming its file.
pub(super) fn add_subagents(main: &Path, session: &mut Session) -> Result<(), (String, String)> {
    if session.format != Format::ClaudeCode {
        return Ok(());
    }
    let logs = subagent_logs(main);
    if logs.is_empty() {
        return Ok(());
    }
    // Merged by time: every response held.
    session
        .hold_all()
        .map_err(|e| (input_name(main), spill_read_error(e)))?;
    let mut subs = Vec::new();
    for (agent, path) in logs {
        let name = input_name(&path);
        let mut sub = load_session(&path).map_err(|e| (name.clone(), e))?;
        sub.hold_all()
            .map_err(|e| (name.clone(), spill_read_error(e)))?;
        if sub.format != Format::ClaudeCode {
            return Err((
                name,
                format!(
                    "a sub-agent log read as {}, not a Claude Code session log",
                    sub.format.as_str()
                ),
            ));
        }
        subs.push((agent, sub));
    }
    session.merge_subagents(subs);
    Ok(())
}

/// Reads UTF-8 text of at most `limit` bytes from `reader`: reads at most
/// `limit + 1` bytes, so an endless input (`/dev/zero`) is refused without
/// being read whole. `what` names the kind of input in the error.
pub fn read_limited(reader: impl Read, limit: u64, what: &str) -> Result<String, String> {
    crate::input::text_of(crate::input::read_bounded(reader, limit), what)
}

/// A gzip-compressed recording (a whole cassette as `.yaml.gz`, as
/// langchain keeps them; `1f 8b` at the start) decompressed, at most
/// [`MAX_SESSION_BYTES`] of it (a larger one is refused, so a gzip bomb is
/// never inflated whole); anything else as it is.
pub fn gunzipped(bytes: Vec<u8>) -> Result<Vec<u8>, crate::input::ReadError> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    crate::input::read_bounded(
        flate2::read::MultiGzDecoder::new(bytes.as_slice()),
        MAX_SESSION_BYTES,
    )
}

pub(super) fn load(args: &ReplayOptions) -> Result<(ReplayBudget, Session), (String, String)> {
    let file = input_name(&args.file);
    let stdin = Path::new("-");
    if args.file == stdin && args.budget.as_deref() == Some(stdin) {
        return Err((
            "--budget".to_owned(),
            "the recording and the budget cannot both come from standard input".to_owned(),
        ));
    }
    let budget = load_budget(args)?;
    let session = load_session(&args.file).map_err(|e| (file, e))?;
    Ok((budget, session))
}

/// Regular files of at least this many bytes that are Claude Code logs (or
/// stream-json output) are read line by line, never whole: the memory a
/// replay takes is then the responses it keeps, whatever the file's size.
pub const STREAM_FROM_BYTES: u64 = 16 << 20;

/// Reads the recording at `path` (`-`: standard input): whole, at most
/// [`MAX_SESSION_BYTES`] (a gzip-compressed one decompressed first), or, for
/// a regular file of [`STREAM_FROM_BYTES`] or more that is a Claude Code
/// log or stream-json output, line by line without holding it whole (no
/// size limit then).
pub(super) fn load_session(path: &Path) -> Result<Session, String> {
    let large = path != Path::new("-")
        && std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= STREAM_FROM_BYTES);
    if large {
        if let Some(session) = read_large_claude_code_spilled(path)? {
            return Ok(session);
        }
    }
    let bytes = crate::input::read_path(path, MAX_SESSION_BYTES);
    let text = crate::input::text_of(bytes.and_then(gunzipped), "a recording")?;
    read_session(&text)
}

/// The budget file (or the defaults) with `--approve` applied.
pub(super) fn load_budget(args: &ReplayOptions) -> Result<ReplayBudget, (String, String)> {
    let mut budget = match &args.budget {
        // The one reader of budget files (the hook and the gateways read
        // theirs the same way).
        Some(path) => budget::read_budget(path, budget::StdinBudget::Allowed)?,
        None => ReplayBudget::default(),
    };
    if let Some(approve) = &args.approve {
        budget.approve = ApprovePolicy::parse_for(approve, &budget.needs_approval)
            .map_err(|e| ("--approve".to_owned(), e))?;
    }
    Ok(budget)
}
