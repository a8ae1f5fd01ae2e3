//! `budgetgate hook install` / `uninstall`: budgetgate's entries in Claude
//! Code's `settings.json` (`docs/CLAUDE-CODE.md`).
//!
//! The `hooks` block gets, per event, one matcher group whose one command is
//! `budgetgate hook claude-code [--budget FILE]`, with the program's absolute
//! path. Every other setting and every other hook is kept, in order. An
//! entry is budgetgate's when its command runs this program's
//! `hook claude-code`; install first removes such entries (so it is
//! idempotent and a changed `--budget` replaces the old one), uninstall
//! removes only them (and a group or event left empty by that). The file is
//! written atomically (a temporary file renamed over it) after a backup of
//! the previous one.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// The events the hook is installed for; `true`: the event takes a matcher.
pub const EVENTS: [(&str, bool); 8] = [
    ("PreToolUse", true),
    ("PostToolUse", true),
    ("PostToolUseFailure", true),
    ("UserPromptSubmit", false),
    ("Stop", false),
    ("SubagentStop", false),
    ("SessionStart", false),
    ("SessionEnd", false),
];

/// Claude Code's timeout for the hook command, in seconds: above the
/// command's own 2 s deadline, so the command always answers first.
pub const HOOK_TIMEOUT_S: u64 = 5;

/// A path quoted for the POSIX shell Claude Code runs hook commands with.
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `path` made absolute (against the current folder), or why it cannot be.
pub fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The command line written into settings.json.
pub fn hook_command(program: &Path, budget: Option<&Path>, state: Option<&Path>) -> String {
    hook_command_on(program, budget, state, None)
}

/// [`hook_command`] with `--ledger URL` (already absolute where it names a
/// path).
pub fn hook_command_on(
    program: &Path,
    budget: Option<&Path>,
    state: Option<&Path>,
    ledger: Option<&str>,
) -> String {
    let mut command = format!(
        "{} hook claude-code",
        shell_quote(&program.to_string_lossy())
    );
    if let Some(budget) = budget {
        command += &format!(" --budget {}", shell_quote(&budget.to_string_lossy()));
    }
    if let Some(state) = state {
        command += &format!(" --state {}", shell_quote(&state.to_string_lossy()));
    }
    if let Some(ledger) = ledger {
        command += &format!(" --ledger {}", shell_quote(ledger));
    }
    command
}

/// `--ledger URL` with a path made absolute (the hook runs in whatever
/// folder Claude Code starts it in).
pub fn absolute_ledger(url: &str) -> Result<String, String> {
    match crate::store::LedgerUrl::parse(Some(url), None)? {
        crate::store::LedgerUrl::Redis(url) => Ok(url),
        crate::store::LedgerUrl::SqliteFile(file) => {
            Ok(format!("sqlite:{}", absolute(&file)?.display()))
        }
        crate::store::LedgerUrl::StateDir(dir) => Ok(absolute(&dir)?.display().to_string()),
    }
}

/// Whether a hook command is one that install wrote: the whole command is
/// a program named `budgetgate` (quoted or not) followed by `hook
/// claude-code` and its options — never a compound command that merely
/// contains one (`./audit.sh && budgetgate hook claude-code`).
pub fn is_ours(command: &str) -> bool {
    let command = command.trim();
    let (program, rest) = match command.strip_prefix('\'') {
        Some(quoted) => match quoted.split_once('\'') {
            Some((program, rest)) => (program, rest),
            None => return false,
        },
        None => command.split_once(' ').unwrap_or((command, "")),
    };
    let Some(options) = rest.trim_start().strip_prefix("hook claude-code") else {
        return false;
    };
    program.rsplit('/').next() == Some("budgetgate")
        && (options.is_empty() || options.starts_with(' '))
        && !options.contains(['&', '|', ';', '`', '\n'])
        && !options.contains("$(")
}

/// `settings` without budgetgate's entries: each matcher group loses them,
/// a group left with no hooks goes, and an event left with no group goes.
pub fn without_ours(settings: &Value) -> Value {
    let mut out = settings.clone();
    let Some(hooks) = out.get_mut("hooks").and_then(Value::as_object_mut) else {
        return out;
    };
    let mut emptied = Vec::new();
    for (event, groups) in hooks.iter_mut() {
        let Some(groups) = groups.as_array_mut() else {
            continue;
        };
        for group in groups.iter_mut() {
            if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                list.retain(|h| {
                    !h.get("command")
                        .and_then(Value::as_str)
                        .is_some_and(is_ours)
                });
            }
        }
        groups.retain(|g| {
            g.get("hooks")
                .and_then(Value::as_array)
                .is_none_or(|l| !l.is_empty())
        });
        if groups.is_empty() {
            emptied.push(event.clone());
        }
    }
    for event in emptied {
        hooks.remove(&event);
    }
    if hooks.is_empty() {
        if let Some(object) = out.as_object_mut() {
            object.remove("hooks");
        }
    }
    out
}

/// `settings` with budgetgate's entries (and none left from before).
pub fn with_ours(settings: &Value, command: &str) -> Result<Value, String> {
    let mut out = without_ours(settings);
    let object = out
        .as_object_mut()
        .ok_or("settings.json is not a JSON object")?;
    let hooks = object
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or("`hooks` in the settings file is not an object")?;
    for (event, matcher) in EVENTS {
        let groups = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .ok_or_else(|| format!("`hooks.{event}` in the settings file is not an array"))?;
        let entry = json!({"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S});
        let group = if matcher {
            json!({"matcher": "*", "hooks": [entry]})
        } else {
            json!({"hooks": [entry]})
        };
        // First, so the budget is checked before any other hook spends work.
        groups.insert(0, group);
    }
    Ok(out)
}

fn read_settings(path: &Path) -> Result<Option<(String, Value)>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let value = crate::strict::value_from_str(&text)
                .map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
            Ok(Some((text, value)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// A unified diff of two texts (for `--dry-run`).
fn diff(path: &Path, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .header(
            &format!("{} (now)", path.display()),
            &format!("{} (after)", path.display()),
        )
        .to_string()
}

/// Writes `text` to `path` atomically, keeping the file's permissions, and
/// writing through a symlink to the file it names (a settings file kept in
/// a dotfiles folder stays there). The first time, the file as it was is
/// kept as `<path>.budgetgate-backup`; a backup already there is the state
/// before budgetgate first touched the file and is never overwritten.
fn write_atomically(path: &Path, text: &str, had: bool) -> Result<(), String> {
    use std::io::Write as _;
    let path = &if had {
        std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        path.to_owned()
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let permissions = if had {
        Some(
            std::fs::metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .permissions(),
        )
    } else {
        None
    };
    if had {
        let backup = path.with_file_name(format!(
            "{}.budgetgate-backup",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        if !backup.exists() {
            std::fs::copy(path, &backup).map_err(|e| format!("{}: {e}", backup.display()))?;
        }
    }
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(permissions) = permissions {
        tmp.as_file()
            .set_permissions(permissions)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    tmp.persist(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// Applies `edit` to the settings file `path` (an absent file is `{}`) and
/// writes the result (atomically, the previous file backed up), or with
/// `dry_run` only shows it as a diff; returns what to print.
pub fn change(
    path: &Path,
    dry_run: bool,
    edit: impl FnOnce(&Value) -> Result<Value, String>,
) -> Result<String, String> {
    let existing = read_settings(path)?;
    let before = existing.as_ref().map_or(json!({}), |(_, v)| v.clone());
    let old_text = existing.as_ref().map_or(String::new(), |(t, _)| t.clone());
    let after = edit(&before)?;
    if after == before {
        return Ok(format!("{}: nothing to change\n", path.display()));
    }
    let new_text = pretty(&after);
    if dry_run {
        return Ok(diff(path, &pretty(&before), &new_text));
    }
    let _ = old_text;
    write_atomically(path, &new_text, existing.is_some())?;
    Ok(format!("{}: written\n", path.display()))
}

/// The setting Claude Code reads the Messages API's address from.
pub const BASE_URL: &str = "ANTHROPIC_BASE_URL";

/// Checks `--proxy`: an `http://` URL of this machine (where `budgetgate
/// proxy` listens), without a path.
pub fn proxy_url(text: &str) -> Result<String, String> {
    let trimmed = text.trim_end_matches('/');
    if !is_local_proxy(trimmed) {
        return Err(format!(
            "--proxy {text}: not http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT (where budgetgate proxy listens)"
        ));
    }
    Ok(trimmed.to_owned())
}

/// Whether `url` is a `budgetgate proxy` address as `--proxy` takes it.
fn is_local_proxy(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let port = ["127.0.0.1:", "localhost:", "[::1]:"]
        .iter()
        .find_map(|host| rest.strip_prefix(host));
    port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

/// `settings` with `env.ANTHROPIC_BASE_URL` set to `url`.
pub fn with_proxy(settings: &Value, url: &str) -> Result<Value, String> {
    let mut out = settings.clone();
    let object = out
        .as_object_mut()
        .ok_or("settings.json is not a JSON object")?;
    object
        .entry("env")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or("`env` in the settings file is not an object")?
        .insert(BASE_URL.into(), Value::String(url.to_owned()));
    Ok(out)
}

/// `settings` without an `env.ANTHROPIC_BASE_URL` that `--proxy` could
/// have written (a local proxy's address); another one is left alone.
pub fn without_proxy(settings: &Value) -> Value {
    let mut out = settings.clone();
    let Some(env) = out.get_mut("env").and_then(Value::as_object_mut) else {
        return out;
    };
    if env
        .get(BASE_URL)
        .and_then(Value::as_str)
        .is_some_and(is_local_proxy)
    {
        env.remove(BASE_URL);
        if env.is_empty() {
            if let Some(object) = out.as_object_mut() {
                object.remove("env");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_keeps_other_settings_and_is_idempotent() {
        let before = json!({
            "model": "opus",
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "my-check"}]}]}
        });
        let cmd = hook_command(
            Path::new("/opt/bin/budgetgate"),
            Some(Path::new("/b/budget file.toml")),
            None,
        );
        assert_eq!(
            cmd,
            "/opt/bin/budgetgate hook claude-code --budget '/b/budget file.toml'"
        );
        let once = with_ours(&before, &cmd).unwrap();
        let twice = with_ours(&once, &cmd).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once["model"], "opus");
        let pre = once["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"], cmd);
        assert_eq!(pre[1]["hooks"][0]["command"], "my-check");
        assert!(once["hooks"]["Stop"][0].get("matcher").is_none());
        // Uninstall gives back exactly the settings before.
        assert_eq!(without_ours(&once), before);
        // A changed budget replaces the old entry.
        let other = hook_command(
            Path::new("/opt/bin/budgetgate"),
            Some(Path::new("/b/other.toml")),
            None,
        );
        let changed = with_ours(&once, &other).unwrap();
        assert_eq!(changed["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(
            changed["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            other
        );
    }

    #[test]
    fn only_budgetgate_hook_commands_are_ours() {
        assert!(is_ours("/usr/local/bin/budgetgate hook claude-code"));
        assert!(is_ours(
            "'/home/a b/budgetgate' hook claude-code --budget x"
        ));
        assert!(!is_ours("budgetgate-fork hook claude-code"));
        assert!(!is_ours("/bin/other hook claude-code"));
        assert!(!is_ours("budgetgate replay x"));
        assert!(!is_ours("echo budgetgate"));
        assert!(!is_ours("./audit.sh && /opt/x/budgetgate hook claude-code"));
        assert!(!is_ours("/opt/x/budgetgate hook claude-code && rm -rf /"));
        assert!(is_ours(
            "/opt/x/budgetgate hook claude-code --budget '/a b/c.toml'"
        ));
    }

    #[test]
    fn settings_of_the_wrong_shape_are_refused() {
        assert!(with_ours(&json!([]), "x").is_err());
        assert!(with_ours(&json!({"hooks": []}), "x").is_err());
        assert!(with_ours(&json!({"hooks": {"Stop": {}}}), "x").is_err());
    }

    #[test]
    fn the_proxy_is_set_in_env_and_only_a_local_one_is_removed_again() {
        assert_eq!(
            proxy_url("http://127.0.0.1:8787/").unwrap(),
            "http://127.0.0.1:8787"
        );
        assert!(proxy_url("http://localhost:1").is_ok());
        assert!(proxy_url("http://[::1]:9").is_ok());
        for bad in [
            "https://127.0.0.1:8787",
            "http://example.com:80",
            "http://127.0.0.1",
            "http://127.0.0.1:0",
            "http://127.0.0.1:80/v1",
        ] {
            assert!(proxy_url(bad).is_err(), "{bad}");
        }
        let before = json!({"env": {"FOO": "1"}, "model": "x"});
        let after = with_proxy(&before, "http://127.0.0.1:8787").unwrap();
        assert_eq!(
            after["env"],
            json!({"FOO": "1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8787"})
        );
        assert_eq!(without_proxy(&after), before);
        let only = with_proxy(&json!({}), "http://127.0.0.1:8787").unwrap();
        assert_eq!(without_proxy(&only), json!({}));
        // Someone else's base URL is not ours to remove.
        let theirs = json!({"env": {"ANTHROPIC_BASE_URL": "https://gateway.example"}});
        assert_eq!(without_proxy(&theirs), theirs);
        assert!(with_proxy(&json!({"env": []}), "http://127.0.0.1:1").is_err());
    }
}
