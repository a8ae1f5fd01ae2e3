//! `budgetgate replay DIR` and several files: every recording below is
//! replayed on its own with the same budget, in parallel (rayon), and
//! summed up in one table, worst first (`--json`: one object per line).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{Map, Value};

use super::{add_subagents, load_session, replay, Outcome, ReplayBudget, Report};
use crate::term::terminal_safe;

/// File names a directory walk takes for recordings.
const EXTENSIONS: [&str; 7] = ["jsonl", "json", "yaml", "yml", "traj", "gz", "ndjson"];

/// Most files one batch replays (a directory walk stops with an error past
/// it rather than growing without bound).
pub const MAX_BATCH_FILES: usize = 100_000;

/// The recordings named: files as given, directories walked (sorted, in
/// depth), taking files whose name ends in one of [`EXTENSIONS`]. A
/// `S/subagents/` directory beside a session log `S.jsonl` is left out: its
/// logs are replayed with that session.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, (String, String)> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            walk(path, &mut out)?;
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), (String, String)> {
    let shown = || dir.display().to_string();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| (shown(), format!("cannot read the directory: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            let merged = path.file_name().is_some_and(|n| n == "subagents")
                && path
                    .parent()
                    .is_some_and(|session| session.with_extension("jsonl").is_file());
            if !merged {
                walk(&path, out)?;
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            if out.len() >= MAX_BATCH_FILES {
                return Err((
                    shown(),
                    format!("more than {MAX_BATCH_FILES} recordings; replay fewer at a time"),
                ));
            }
            out.push(path);
        }
    }
    Ok(())
}

/// One recording replayed: its report, or why it cannot be read.
pub fn replay_path(path: &Path, budget: &ReplayBudget) -> Result<Report, String> {
    let mut session = load_session(path)?;
    add_subagents(path, &mut session).map_err(|(source, e)| format!("{source}: {e}"))?;
    replay(&session, budget)
}

/// How bad a result is, for sorting worst first: unreadable, stopped or
/// overshot, then by tokens.
fn severity(result: &Result<Report, String>) -> (u8, u64) {
    match result {
        Err(_) => (3, 0),
        Ok(r) if r.stopped.is_some() || r.overshoot.is_some() => (2, r.usage.total()),
        Ok(r) => (1, r.usage.total()),
    }
}

/// The progress bar of a batch on standard error: bytes of recordings read
/// out of their total, and recordings done, redrawn at most 10 times a
/// second. Hidden unless `shown` (the command shows it when standard error
/// is a terminal, so logs and pipes get no control characters), and for
/// one file.
fn progress_bar(files: &[PathBuf], shown: bool) -> ProgressBar {
    if files.len() < 2 || !shown {
        return ProgressBar::hidden();
    }
    let bytes = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .fold(0u64, u64::saturating_add);
    let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr_with_hz(10));
    // The template is a constant: it parses, and if a later indicatif
    // refused it the default style is kept rather than failing the replay.
    if let Ok(style) = ProgressStyle::with_template(
        "replay {msg}, {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta}) [{wide_bar}]",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("0/{} recordings", files.len()));
    bar
}

/// Replays `files` in parallel and writes the summary (or JSON Lines) to
/// `out`; with `progress`, a progress bar goes to standard error
/// ([`progress_bar`]). Returns how the batch ended: unreadable if any
/// recording cannot be read, else exceeded if any was stopped or
/// overshot, else held.
pub fn run(
    files: &[PathBuf],
    budget: &ReplayBudget,
    json: bool,
    progress: bool,
    out: &mut dyn Write,
) -> Result<Outcome, std::io::Error> {
    let done = AtomicUsize::new(0);
    let bar = progress_bar(files, progress);
    let mut results: Vec<(String, Result<Report, String>)> = files
        .par_iter()
        .map(|path| {
            let result = replay_path(path, budget);
            if !bar.is_hidden() {
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                bar.inc(std::fs::metadata(path).map_or(0, |m| m.len()));
                bar.set_message(format!("{n}/{} recordings", files.len()));
            }
            (crate::input::display_name(path).into_owned(), result)
        })
        .collect();
    bar.finish_and_clear();
    results.sort_by(|(a_name, a), (b_name, b)| {
        severity(b)
            .cmp(&severity(a))
            .then_with(|| a_name.cmp(b_name))
    });
    let status = results.iter().map(|(_, r)| match r {
        Err(_) => Outcome::Unreadable,
        Ok(r) if r.stopped.is_some() || r.overshoot.is_some() => Outcome::Exceeded,
        Ok(_) => Outcome::Held,
    });
    let status = status.max().unwrap_or(Outcome::Held);
    if json {
        for (name, result) in &results {
            let mut line = Map::new();
            line.insert("file".into(), Value::String(name.clone()));
            match result {
                Ok(report) => {
                    if let Value::Object(fields) = serde_json::to_value(report)? {
                        line.extend(fields);
                    }
                }
                Err(e) => {
                    line.insert("error".into(), Value::String(e.clone()));
                }
            }
            let text =
                crate::term::to_safe_json(&Value::Object(line)).map_err(std::io::Error::other)?;
            writeln!(out, "{text}")?;
        }
    } else {
        writeln!(
            out,
            "{:<48} {:<24} {:>6} {:>7} {:>11}  {:<11} stops / refusals",
            "recording", "format", "turns", "calls", "tokens", "status"
        )?;
        for (name, result) in &results {
            let name = terminal_safe(name);
            match result {
                // The first sentence: the whole reason is in `--json`
                // and in the report of that file alone.
                Err(e) => writeln!(
                    out,
                    "{name:<48} unreadable: {}",
                    terminal_safe(brief_reason(e))
                )?,
                Ok(r) => {
                    // As the single report says it, and the overshoot too
                    // when the run was also stopped.
                    // A budget's stop, or the response's own stop reason
                    // (`max_tokens`: the model's limit, not the budget's).
                    let stopped = r.stopped.as_ref().map(|s| {
                        let place = r.stop_place(s);
                        let reason = terminal_safe(&s.reason);
                        if s.by_budget {
                            format!("stopped {place}: {reason}")
                        } else {
                            format!("ended {place}: the response's stop_reason {reason}")
                        }
                    });
                    let overshot = r
                        .overshoot
                        .as_ref()
                        .map(|o| format!("overshot {} by {}", o.limit, o.by));
                    let stop = match (stopped, overshot) {
                        (Some(s), Some(o)) => format!("{s}, {o}"),
                        (Some(one), None) | (None, Some(one)) => one,
                        (None, None) => "-".into(),
                    };
                    let refused: u32 = r.refusals.values().sum();
                    writeln!(
                        out,
                        "{name:<48} {:<24} {:>6} {:>7} {:>11}  {:<11} {stop}; {refused} refused",
                        r.format,
                        r.turns,
                        r.tool_calls,
                        r.usage.total(),
                        r.status
                    )?;
                }
            }
        }
        let (bad, stopped) = results
            .iter()
            .fold((0, 0), |(bad, stopped), (_, r)| match r {
                Err(_) => (bad + 1, stopped),
                Ok(r) if r.stopped.is_some() || r.overshoot.is_some() => (bad, stopped + 1),
                Ok(_) => (bad, stopped),
            });
        let tokens: u64 = results
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .map(|r| r.usage.total())
            .fold(0, u64::saturating_add);
        writeln!(
            out,
            "{} recordings: {stopped} stopped or overshot, {bad} unreadable; {tokens} tokens recorded in all",
            results.len()
        )?;
    }
    Ok(status)
}

/// A refusal's reason cut to its first clause (before `: expected`), so a
/// table of many unreadable files stays one short line each.
fn brief_reason(reason: &str) -> &str {
    reason.find(": expected").map_or(reason, |at| &reason[..at])
}
