//! Claude Code itself, end to end: the real CLI (`@anthropic-ai/claude-code`
//! from the npm registry, pinned in tests/mcp/package.json and installed by
//! tests/mcp/install.sh) run offline with `claude -p`, in front of each of
//! budgetgate's front-ends: `budgetgate proxy` between it and the model API,
//! the hook installed in its project, and the MCP gateway in front of a
//! reference MCP server. The model is the one part that cannot run here: a
//! Messages API scripted by each test on loopback answers in the real API's
//! shapes (streamed or not), every answer billed the same 1 100 tokens, and
//! records every request Claude Code (or the proxy) sends.
//!
//! Without the CLI these tests say so and pass, unless
//! `BUDGETGATE_REQUIRE_MCP=1` is set (as `scripts/test` sets it): then a
//! missing part fails the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::ProxyProcess;

/// Input and output tokens of every scripted answer.
const INPUT: u64 = 1_000;
const OUTPUT: u64 = 100;
const BILLED: u64 = INPUT + OUTPUT;

/// The model Claude Code is told to use; its calls are the scripted ones.
const MODEL: &str = "claude-sonnet-4-5";

/// How long one run of Claude Code may take before the test fails (a run
/// takes 2 to 5 s here; a client that retried with back-off would not end
/// within it).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The proxy's bound on a call's input (`host/src/proxy/api`): every byte
/// of the body as a token, plus this, plus [`MEDIA_TOKENS`] per media word.
const INPUT_OVERHEAD_TOKENS: u64 = 4_096;
const MEDIA_TOKENS: u64 = 3_000;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp")
}

/// The installed CLI, or `None` (the test is skipped) when it is missing
/// and not required.
fn cli() -> Option<PathBuf> {
    let path = mcp_dir().join("node_modules/.bin/claude");
    let version = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    let why = match version {
        Ok(out) if out.status.success() => {
            eprintln!(
                "Claude Code {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
            return Some(path);
        }
        // The package's placeholder, before its native binary is in place.
        Ok(out) => format!(
            "the Claude Code CLI {} does not run: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("the Claude Code CLI {} is missing ({e})", path.display()),
    };
    missing(&why)
}

/// An installed npm package's command, or `None` as [`cli`] says.
fn npm_bin(name: &str) -> Option<PathBuf> {
    let path = mcp_dir().join("node_modules/.bin").join(name);
    if path.exists() {
        return Some(path);
    }
    missing(&format!("{} is missing", path.display()))
}

/// `None` (the test is skipped, saying `why`), or with
/// `BUDGETGATE_REQUIRE_MCP=1` a failure.
fn missing<T>(why: &str) -> Option<T> {
    if std::env::var("BUDGETGATE_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("BUDGETGATE_REQUIRE_MCP=1 and {why} (run tests/mcp/install.sh)");
    }
    eprintln!("skipped: {why} (run tests/mcp/install.sh)");
    None
}

// The scripted Messages API.

/// One answer of the scripted model.
#[derive(Clone)]
enum Turn {
    /// A `tool_use` block calling `name` with `input`.
    Tool(String, Value),
    /// A text answer (`end_turn`).
    Text(&'static str),
}

fn bash(command: &str) -> Turn {
    Turn::Tool(
        "Bash".into(),
        json!({"command": command, "description": "a scripted call"}),
    )
}

/// One request as the scripted API got it.
struct Request {
    method: String,
    path: String,
    /// The head's header lines, lowercased.
    head: String,
    body: Vec<u8>,
}

impl Request {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim())
        })
    }
    /// A call of the scripted model: `POST /v1/messages` (any query)
    /// naming [`MODEL`].
    fn is_model_call(&self) -> bool {
        self.method == "POST"
            && self.path.split('?').next() == Some("/v1/messages")
            && self.json()["model"] == MODEL
    }
}

#[derive(Default)]
struct Seen {
    requests: Vec<Request>,
    model_calls: usize,
}

/// A Messages API on loopback: the i-th call of [`MODEL`] gets the i-th
/// turn of the script (the last one again past its end); any other model
/// gets a short text, `count_tokens` a count, anything else a 404 in the
/// API's error shape. HTTP/1.1 with keep-alive; every answer, streams
/// included, has a `content-length`.
struct Api {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

impl Api {
    fn start(script: Vec<Turn>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        let script = Arc::new(script);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Arc::clone(&shared);
                let script = Arc::clone(&script);
                std::thread::spawn(move || serve(stream, &seen, &script));
            }
        });
        Self { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bodies of the scripted model's calls, in order.
    fn model_calls(&self) -> Vec<Value> {
        let seen = self.seen.lock().expect("lock");
        seen.requests
            .iter()
            .filter(|r| r.is_model_call())
            .map(Request::json)
            .collect()
    }

    /// The bodies of the scripted model's calls as they came.
    fn model_call_bytes(&self) -> Vec<Vec<u8>> {
        let seen = self.seen.lock().expect("lock");
        seen.requests
            .iter()
            .filter(|r| r.is_model_call())
            .map(|r| r.body.clone())
            .collect()
    }

    /// `X-Claude-Code-Session-Id` of every request (`None` where absent).
    fn session_ids(&self) -> Vec<Option<String>> {
        let seen = self.seen.lock().expect("lock");
        seen.requests
            .iter()
            .map(|r| r.header("x-claude-code-session-id").map(str::to_owned))
            .collect()
    }

    /// Every request but the model's calls, as `METHOD PATH (model)`.
    fn other_requests(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("lock");
        seen.requests
            .iter()
            .filter(|r| !r.is_model_call())
            .map(|r| format!("{} {} ({})", r.method, r.path, r.json()["model"]))
            .collect()
    }

    /// What a test prints of the traffic.
    fn report(&self, test: &str, run: &Run) {
        eprintln!(
            "{test}: Claude Code ended in {:.2} s ({}); {} model calls; other requests: {:?}",
            run.elapsed.as_secs_f64(),
            run.status,
            self.model_calls().len(),
            self.other_requests()
        );
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Seen>, script: &[Turn]) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut out = stream;
    while let Some(request) = read_request(&mut reader) {
        let body = request.json();
        let path = request.path.clone();
        let turn = {
            let mut seen = seen.lock().expect("lock");
            let turn = request.is_model_call().then(|| {
                let at = seen.model_calls;
                seen.model_calls += 1;
                (at, script[at.min(script.len() - 1)].clone())
            });
            seen.requests.push(request);
            turn
        };
        let route = path.split('?').next().unwrap_or("");
        let (status, kind, text) = match (route, turn) {
            ("/v1/messages", turn) => {
                let (at, turn) = turn.unwrap_or((0, Turn::Text("ok")));
                if body["stream"] == json!(true) {
                    ("200 OK", "text/event-stream", events(at, &turn, &body))
                } else {
                    ("200 OK", "application/json", message(at, &turn, &body))
                }
            }
            ("/v1/messages/count_tokens", _) => (
                "200 OK",
                "application/json",
                json!({"input_tokens": INPUT}).to_string(),
            ),
            _ => (
                "404 Not Found",
                "application/json",
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("no {path} here")}})
                    .to_string(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nrequest-id: req_scripted\r\n\r\n",
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err()
            || out.write_all(text.as_bytes()).is_err()
            || out.flush().is_err()
        {
            return;
        }
    }
}

/// One request off a keep-alive connection; `None` at its end.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut first = String::new();
    if reader.read_line(&mut first).ok()? == 0 {
        return None;
    }
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let mut words = first.split_whitespace();
    let method = words.next()?.to_owned();
    let path = words.next()?.to_owned();
    let mut request = Request {
        method,
        path,
        head,
        body: Vec::new(),
    };
    if request.header("transfer-encoding") == Some("chunked") {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            request.body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let length = request
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        request.body = vec![0; length];
        reader.read_exact(&mut request.body).ok()?;
    }
    Some(request)
}

/// The content block and stop reason of `turn` (the `at`-th model call).
fn block(at: usize, turn: &Turn) -> (Value, &'static str) {
    match turn {
        Turn::Tool(name, input) => (
            json!({"type": "tool_use", "id": format!("toolu_{at:04}"), "name": name, "input": input}),
            "tool_use",
        ),
        Turn::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
    }
}

fn message(at: usize, turn: &Turn, request: &Value) -> String {
    let (content, stop) = block(at, turn);
    json!({
        "id": format!("msg_{at:04}"), "type": "message", "role": "assistant",
        "model": request["model"], "content": [content],
        "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": INPUT, "output_tokens": OUTPUT},
    })
    .to_string()
}

/// The answer as server-sent events, `message_start` … `message_stop`; the
/// block's content comes in one delta, as the API sends a short one.
fn events(at: usize, turn: &Turn, request: &Value) -> String {
    let (content, stop) = block(at, turn);
    let (start, delta) = match turn {
        Turn::Tool(_, input) => {
            let mut start = content;
            start["input"] = json!({});
            (
                start,
                json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            )
        }
        Turn::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
    };
    let events = [
        json!({"type": "message_start", "message": {
            "id": format!("msg_{at:04}"), "type": "message", "role": "assistant",
            "model": request["model"], "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": INPUT, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": OUTPUT}}),
        json!({"type": "message_stop"}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// The last `tool_result` block of a model call's body.
fn last_tool_result(call: &Value) -> Value {
    let last = call["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    last["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_result"))
        .cloned()
        .unwrap_or_else(|| panic!("no tool_result in the last message: {last}"))
}

/// A `tool_result` block's text (a string, or its text blocks).
fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

// Claude Code, run once.

/// A temporary folder with Claude Code's `home` and its working folder
/// `work`.
struct Folder {
    dir: tempfile::TempDir,
}

/// One run of `claude -p`.
struct Run {
    status: ExitStatus,
    /// Its `--output-format json` result.
    json: Value,
    elapsed: Duration,
}

impl Folder {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for sub in ["home", "work"] {
            std::fs::create_dir(dir.path().join(sub)).expect("folder");
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// Runs `claude -p PROMPT --model MODEL --output-format json ARGS…` in
    /// `work` with `home` as its home, at the Messages API at `base_url`,
    /// with only `PATH` and `env` of this process's environment; fails the
    /// test if it takes longer than [`RUN_LIMIT`].
    fn claude(&self, cli: &Path, base_url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
        let started = Instant::now();
        let mut child = Command::new(cli)
            .args(["-p", "Run the scripted calls.", "--model", MODEL])
            .args(["--output-format", "json"])
            .args(args)
            .current_dir(self.path("work"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("ANTHROPIC_BASE_URL", base_url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start claude");
        let stdout = drain(child.stdout.take().expect("stdout"));
        let stderr = drain(child.stderr.take().expect("stderr"));
        let Some(status) = wait(&mut child, RUN_LIMIT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "Claude Code still running after {RUN_LIMIT:?}; stderr: {}",
                stderr.join().unwrap_or_default()
            )
        };
        let elapsed = started.elapsed();
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "Claude Code's output is not one JSON result ({e}; {status}):\n{stdout}\n{stderr}"
            )
        });
        Run {
            status,
            json,
            elapsed,
        }
    }
}

fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = from.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    })
}

fn wait(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

// budgetgate's parts.

/// `budgetgate proxy` in front of the scripted API.
fn start_proxy(api: &Api, budget: &Path, ledger: &Path) -> ProxyProcess {
    ProxyProcess::start(&api.url(), budget, ledger, &[])
}

/// `budgetgate ledger SUBCOMMAND ARGS…`'s standard output.
fn ledger(args: &[&str]) -> String {
    let out = Command::new(bin())
        .arg("ledger")
        .args(args)
        .output()
        .expect("budgetgate ledger");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The session's own row (no sub-agent) of `ledger list --json` on `at`
/// (`--ledger URL` or `--state DIR`), once no model call is reserved (the
/// proxy counts a call just after its answer is out; at most 10 s).
fn ledger_row(at: &[&str], session: &str) -> Value {
    let started = Instant::now();
    loop {
        let text = ledger(&[&["list", "--json"], at].concat());
        let row = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
            .find(|row| row["session"] == session && row["agent"].is_null())
            .unwrap_or_else(|| panic!("no row for {session} in {text}"));
        if row["limits"]["model_calls"]["reserved"] == json!(0)
            || started.elapsed() > Duration::from_secs(10)
        {
            return row;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn used(row: &Value, limit: &str) -> u64 {
    row["limits"][limit]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {limit} in {row}"))
}

/// The refusals of model calls in the session's log (`ledger show`).
fn refused_model_calls(at: &[&str], session: &str) -> usize {
    ledger(&[&["show", session], at].concat())
        .lines()
        .filter(|l| l.contains(" deny model call "))
        .count()
}

/// The session Claude Code names in its result, checked against the
/// header of every request the scripted API got.
fn session_of(run: &Run, api: &Api) -> String {
    let session = run.json["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_id in {}", run.json))
        .to_owned();
    let ids = api.session_ids();
    assert!(
        !ids.is_empty() && ids.iter().all(|id| id.as_deref() == Some(session.as_str())),
        "X-Claude-Code-Session-Id of each request {ids:?}, not {session}"
    );
    session
}

/// SPEC C (tokens) through `budgetgate proxy`: Claude Code's fourth model
/// call is refused before the model, and Claude Code ends at once with the
/// proxy's message; the ledger holds its session's three calls.
/// The worst case the proxy reserves for a call whose body is `body`: its
/// input bound plus its `max_tokens`.
fn worst_case(body: &[u8]) -> u64 {
    let media: u64 = [
        &b"\"image\""[..],
        b"\"image_url\"",
        b"\"input_image\"",
        b"\"document\"",
        b"\"input_file\"",
        b"\"file\"",
    ]
    .iter()
    .map(|word| body.windows(word.len()).filter(|w| w == word).count() as u64)
    .sum();
    let request: Value = serde_json::from_slice(body).expect("JSON body");
    body.len() as u64
        + INPUT_OVERHEAD_TOKENS
        + MEDIA_TOKENS * media
        + request["max_tokens"].as_u64().expect("max_tokens")
}

/// The worst case of Claude Code's first model call, measured by a run
/// like the tests' (a folder of the same shape, the same options) straight
/// at a scripted API that answers it with text.
fn first_call_worst_case(cli: &Path, args: &[&str]) -> u64 {
    let folder = Folder::new();
    let api = Api::start(vec![Turn::Text("done")]);
    let run = folder.claude(cli, &api.url(), args, &[]);
    assert!(run.status.success(), "{}", run.json);
    let calls = api.model_call_bytes();
    assert_eq!(calls.len(), 1);
    worst_case(&calls[0])
}

#[test]
fn claude_code_through_the_proxy_stops_at_the_model_call_the_token_budget_does_not_allow() {
    let Some(cli) = cli() else { return };
    let folder = Folder::new();
    let budget = folder.write(
        "budget.toml",
        "[budget]\nmax_tokens = 2500\nmax_model_calls = 50\n",
    );
    let ledger_file = folder.path("ledger.sqlite3");
    let api = Api::start(vec![
        bash("echo 1"),
        bash("echo 2"),
        bash("echo 3"),
        bash("echo 4"),
        Turn::Text("done"),
    ]);
    let proxy = start_proxy(&api, &budget, &ledger_file);
    let run = folder.claude(&cli, &proxy.url(), &["--allowedTools", "Bash"], &[]);
    api.report("proxy, tokens", &run);
    // The seed's rule: a call is made while the tokens used are below the
    // budget. 0, 1 100, 2 200 used: calls 1 to 3 made; 3 300: the fourth
    // refused by the proxy, never reaching the model.
    let calls = api.model_calls();
    assert_eq!(calls.len(), 3, "{:?}", api.other_requests());
    for (at, call) in calls.iter().enumerate().skip(1) {
        assert_eq!(call["stream"], true, "Claude Code streams");
        assert_eq!(
            result_text(&last_tool_result(call)).lines().next(),
            Some(format!("{at}").as_str())
        );
    }
    // Claude Code ends at the refusal and says why.
    assert!(!run.status.success(), "{}", run.json);
    assert_eq!(run.json["is_error"], true, "{}", run.json);
    assert_eq!(run.json["api_error_status"], 402, "{}", run.json);
    let result = run.json["result"].as_str().unwrap_or_default();
    assert!(
        result.contains(
            "budgetgate: the session's budget is spent: 3300 of 2500 tokens used (tokens)"
        ),
        "{result}"
    );
    let session = session_of(&run, &api);
    let at = format!("sqlite:{}", ledger_file.display());
    let row = ledger_row(&["--ledger", &at], &session);
    assert_eq!(used(&row, "tokens"), 3 * BILLED, "{row}");
    assert_eq!(used(&row, "model_calls"), 3, "{row}");
    // The refusal is a 402 `billing_error`: Claude Code 2.1.332 ends at
    // once (a 400 `invalid_request_error` it sent again up to five times,
    // each with fewer beta features).
    let refused = refused_model_calls(&["--ledger", &at], &session);
    assert_eq!(refused, 1, "{refused} refusals");
}

/// SPEC C, SPEC E (reserve): in reserve mode the proxy holds each call's
/// worst case (its input bound plus Claude Code's `max_tokens`) before it
/// is made; Claude Code's second call, whose worst case no longer fits,
/// is refused (`token-reserve`) and never reaches the model.
#[test]
fn claude_code_through_the_proxy_in_reserve_mode_is_refused_the_call_whose_worst_case_does_not_fit()
{
    let Some(cli) = cli() else { return };
    let args = ["--allowedTools", "Bash"];
    // The first call fits with 500 tokens to spare (a run's body may differ
    // from the measured one by a few bytes: ids and times of the same
    // length); the second's body only grows, and 1 100 tokens are used by
    // then, so its worst case is at least 600 past the budget.
    let first = first_call_worst_case(&cli, &args);
    let max = first + 500;
    eprintln!("proxy, reserve: the first call's worst case is {first} tokens; max_tokens = {max}");
    let folder = Folder::new();
    let budget = folder.write(
        "budget.toml",
        &format!("[budget]\nmax_tokens = {max}\nmax_model_calls = 50\ntoken_mode = \"reserve\"\n"),
    );
    let ledger_file = folder.path("ledger.sqlite3");
    let api = Api::start(vec![bash("echo 1"), bash("echo 2"), Turn::Text("done")]);
    let proxy = start_proxy(&api, &budget, &ledger_file);
    let run = folder.claude(&cli, &proxy.url(), &args, &[]);
    api.report("proxy, reserve", &run);
    let calls = api.model_call_bytes();
    assert_eq!(calls.len(), 1, "the refused call never reached the model");
    let measured = worst_case(&calls[0]);
    eprintln!("proxy, reserve: this run's first call's worst case is {measured} tokens");
    assert!(measured <= max, "{measured} > {max}");
    assert!(!run.status.success(), "{}", run.json);
    assert_eq!(run.json["is_error"], true, "{}", run.json);
    assert_eq!(run.json["api_error_status"], 402, "{}", run.json);
    let result = run.json["result"].as_str().unwrap_or_default();
    let left = format!(
        "and the session's token budget has {} of {max} left, so it is not made (token-reserve)",
        max - BILLED
    );
    assert!(result.contains(&left), "{result}");
    let session = session_of(&run, &api);
    let at = format!("sqlite:{}", ledger_file.display());
    let row = ledger_row(&["--ledger", &at], &session);
    assert_eq!(used(&row, "tokens"), BILLED, "{row}");
    assert_eq!(row["limits"]["tokens"]["reserved"], 0, "{row}");
    assert_eq!(used(&row, "model_calls"), 1, "{row}");
    let refused = refused_model_calls(&["--ledger", &at], &session);
    assert_eq!(refused, 1, "{refused} refusals");
}

/// Loop detection (issue 32) through the hook alone: Claude Code's own
/// `PostToolUse` events report each Bash call's output to the ledger, and
/// the third identical `echo pending` (same input, same output twice
/// before: `same_outcome = 3`) is denied `no-progress` before it runs; the
/// model reads why. A fourth call with another command runs.
#[test]
fn the_hook_in_claude_codes_project_denies_a_call_that_makes_no_progress() {
    let Some(cli) = cli() else { return };
    let folder = Folder::new();
    let budget = folder.write(
        "budget.toml",
        "[budget]\nmax_repeats = 100\n[loops]\nsame_outcome = 3\n",
    );
    let state = folder.path("state");
    let install = Command::new(bin())
        .args(["hook", "install", "--project", "--budget"])
        .arg(&budget)
        .arg("--state")
        .arg(&state)
        .current_dir(folder.path("work"))
        .output()
        .expect("hook install");
    assert!(install.status.success(), "{install:?}");
    let api = Api::start(vec![
        bash("echo pending"),
        bash("echo pending"),
        bash("echo pending"),
        bash("echo done"),
        Turn::Text("done"),
    ]);
    let run = folder.claude(&cli, &api.url(), &["--allowedTools", "Bash"], &[]);
    api.report("hook loops", &run);
    let calls = api.model_calls();
    assert_eq!(calls.len(), 5, "{:?}", api.other_requests());
    for at in [1, 2] {
        let ran = last_tool_result(&calls[at]);
        assert_ne!(ran["is_error"], true, "{ran}");
        assert_eq!(result_text(&ran).lines().next(), Some("pending"), "{ran}");
    }
    let denied = last_tool_result(&calls[3]);
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(
        result_text(&denied).contains(
            "budgetgate refused this call (no-progress): Bash has been called 2 times with this input and returned the same result each time; this would be call 3 (same_outcome 3)"
        ),
        "{denied}"
    );
    let ran = last_tool_result(&calls[4]);
    assert_eq!(result_text(&ran).lines().next(), Some("done"), "{ran}");
    assert!(run.status.success(), "{}", run.json);
    let denials = &run.json["permission_denials"];
    assert_eq!(denials.as_array().map(Vec::len), Some(1), "{denials}");
}

/// SPEC C (a tool's cap) through the hook alone: `budgetgate hook install
/// --project` in Claude Code's working folder, Claude Code straight at the
/// scripted API. Its second Bash call is denied by the hook before it
/// runs; the model reads why in the next call's `tool_result`, Claude Code
/// reports the denial, and the ledger has counted the session's model
/// calls and tokens from the transcript and logged the denial.
#[test]
fn the_hook_in_claude_codes_project_denies_the_bash_call_over_its_cap() {
    let Some(cli) = cli() else { return };
    let folder = Folder::new();
    let budget = folder.write("budget.toml", "[tools]\nmax_calls = { Bash = 1 }\n");
    let state = folder.path("state");
    let install = Command::new(bin())
        .args(["hook", "install", "--project", "--budget"])
        .arg(&budget)
        .arg("--state")
        .arg(&state)
        .current_dir(folder.path("work"))
        .output()
        .expect("hook install");
    assert!(install.status.success(), "{install:?}");
    assert!(folder.path("work/.claude/settings.json").exists());
    let api = Api::start(vec![bash("echo one"), bash("echo two"), Turn::Text("done")]);
    let run = folder.claude(&cli, &api.url(), &["--allowedTools", "Bash"], &[]);
    api.report("hook", &run);
    let calls = api.model_calls();
    assert_eq!(calls.len(), 3, "{:?}", api.other_requests());
    let ran = last_tool_result(&calls[1]);
    assert_ne!(ran["is_error"], true, "{ran}");
    assert_eq!(result_text(&ran).lines().next(), Some("one"), "{ran}");
    let denied = last_tool_result(&calls[2]);
    assert_eq!(denied["tool_use_id"], "toolu_0001", "{denied}");
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(
        result_text(&denied).contains(
            "budgetgate refused this call (tool-cap): Bash may be called at most 1 times in this session (1 used)"
        ),
        "{denied}"
    );
    assert!(run.status.success(), "{}", run.json);
    assert_eq!(run.json["result"], "done", "{}", run.json);
    let denials = &run.json["permission_denials"];
    assert_eq!(
        (
            denials.as_array().map(Vec::len),
            &denials[0]["tool_name"],
            &denials[0]["tool_input"]["command"]
        ),
        (Some(1), &json!("Bash"), &json!("echo two")),
        "{denials}"
    );
    let session = session_of(&run, &api);
    let at = ["--state", state.to_str().expect("UTF-8 path")];
    let row = ledger_row(&at, &session);
    assert_eq!(row["caps"]["Bash"]["used"], 1, "{row}");
    assert_eq!(used(&row, "tool_calls"), 1, "{row}");
    assert_eq!(used(&row, "model_calls"), 3, "{row}");
    assert_eq!(used(&row, "tokens"), 3 * BILLED, "{row}");
    let log = ledger(&[&["show", session.as_str()], &at[..]].concat());
    assert!(log.contains("deny toolu_0001: tool-cap"), "{log}");
}

/// The hook and the proxy together, as `hook install --proxy` sets them up:
/// one ledger. The proxy counts each model call exactly before it is made;
/// the hook takes those counts from the ledger (it does not count the
/// session's transcript a second time) and decides the tool calls. A cap
/// of one Bash call denies the second; the third response spends the
/// token budget, so its call is denied and the session ends: three model
/// calls reach the model, counted once each.
#[test]
fn the_hook_and_the_proxy_share_one_ledger_and_count_each_model_call_once() {
    let Some(cli) = cli() else { return };
    let folder = Folder::new();
    let budget = folder.write(
        "budget.toml",
        "[budget]\nmax_tokens = 3000\nmax_model_calls = 50\n[tools]\nmax_calls = { Bash = 1 }\n",
    );
    let ledger_file = folder.path("ledger.sqlite3");
    let at = format!("sqlite:{}", ledger_file.display());
    let api = Api::start(vec![
        bash("echo 1"),
        bash("echo 2"),
        bash("echo 3"),
        bash("echo 4"),
        Turn::Text("done"),
    ]);
    let proxy = start_proxy(&api, &budget, &ledger_file);
    let install = Command::new(bin())
        .args(["hook", "install", "--project", "--budget"])
        .arg(&budget)
        .args(["--ledger", &at, "--proxy", &proxy.url()])
        .current_dir(folder.path("work"))
        .output()
        .expect("hook install");
    assert!(install.status.success(), "{install:?}");
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.path("work/.claude/settings.json")).expect("settings"),
    )
    .expect("JSON settings");
    assert_eq!(settings["env"]["ANTHROPIC_BASE_URL"], json!(proxy.url()));
    let run = folder.claude(&cli, &proxy.url(), &["--allowedTools", "Bash"], &[]);
    api.report("hook and proxy", &run);
    let calls = api.model_calls();
    assert_eq!(calls.len(), 3, "{:?}", api.other_requests());
    // The first Bash call ran; the second was over its cap.
    assert_eq!(
        result_text(&last_tool_result(&calls[1])).lines().next(),
        Some("1")
    );
    let capped = last_tool_result(&calls[2]);
    assert_eq!(capped["is_error"], true, "{capped}");
    assert!(result_text(&capped).contains("(tool-cap)"), "{capped}");
    let session = session_of(&run, &api);
    let row = ledger_row(&["--ledger", &at], &session);
    assert_eq!(used(&row, "model_calls"), 3, "{row}");
    assert_eq!(used(&row, "tokens"), 3 * BILLED, "{row}");
    assert_eq!(row["caps"]["Bash"]["used"], 1, "{row}");
    let log = ledger(&["show", session.as_str(), "--ledger", &at]);
    assert!(log.contains(": tool-cap"), "{log}");
    assert!(log.contains(": budget-exhausted"), "{log}");
}

/// SPEC C (a tool's cap) through the MCP gateway: Claude Code starts
/// `budgetgate mcp … -- mcp-server-filesystem` from `--mcp-config`; the
/// scripted model calls `mcp__files__create_directory` three times with a
/// cap of two. The third is refused by the gateway and never reaches the
/// server (its folder is not made); the refusal's text is the tool result
/// the model reads in its next call.
#[test]
fn the_mcp_gateway_refuses_claude_codes_mcp_call_over_its_cap_and_the_model_reads_why() {
    let Some(cli) = cli() else { return };
    let Some(server) = npm_bin("mcp-server-filesystem") else {
        return;
    };
    let folder = Folder::new();
    let budget = folder.write(
        "budget.toml",
        "[tools]\nmax_calls = { create_directory = 2 }\n",
    );
    let ledger_file = folder.path("ledger.sqlite3");
    let work = folder.path("work");
    let config = json!({"mcpServers": {"files": {
        "command": bin(),
        "args": ["mcp", "--budget", budget, "--ledger", format!("sqlite:{}", ledger_file.display()),
                 "--session", "files", "--terminal", "never", "--", server, work],
    }}});
    let config = folder.write("mcp.json", &config.to_string());
    let make = |name: &str| {
        Turn::Tool(
            "mcp__files__create_directory".into(),
            json!({"path": work.join(name)}),
        )
    };
    let api = Api::start(vec![make("a"), make("b"), make("c"), Turn::Text("done")]);
    let args = [
        "--mcp-config",
        config.to_str().expect("UTF-8 path"),
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__files__create_directory",
    ];
    // Every tool's schema in the first call, as a model that is not
    // scripted would need it to call the tool (without this, MCP tools are
    // found through ToolSearch first).
    let run = folder.claude(&cli, &api.url(), &args, &[("ENABLE_TOOL_SEARCH", "false")]);
    api.report("mcp", &run);
    let calls = api.model_calls();
    assert_eq!(calls.len(), 4, "{:?}", api.other_requests());
    let tools: Vec<&str> = calls[0]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(tools.contains(&"mcp__files__create_directory"), "{tools:?}");
    for (call, name) in calls[1..3].iter().zip(["a", "b"]) {
        let made = last_tool_result(call);
        assert_ne!(made["is_error"], true, "{made}");
        assert!(
            result_text(&made).contains("Successfully created directory"),
            "{made}"
        );
        assert!(work.join(name).is_dir());
    }
    let refused = last_tool_result(&calls[3]);
    assert_eq!(refused["tool_use_id"], "toolu_0002", "{refused}");
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        result_text(&refused).contains(
            "budgetgate refused this call (tool-cap): create_directory may be called at most 2 times in this session (2 used)"
        ),
        "{refused}"
    );
    assert!(
        !work.join("c").exists(),
        "the server never ran the refused call"
    );
    assert!(run.status.success(), "{}", run.json);
    assert_eq!(run.json["result"], "done", "{}", run.json);
    let at = format!("sqlite:{}", ledger_file.display());
    let row = ledger_row(&["--ledger", &at], "files");
    assert_eq!(used(&row, "tool_calls"), 2, "{row}");
    assert_eq!(row["limits"]["tool_calls"]["reserved"], 0, "{row}");
    assert_eq!(row["caps"]["create_directory"]["used"], 2, "{row}");
    let log = ledger(&["show", "files", "--ledger", &at]);
    assert!(log.contains(": tool-cap"), "{log}");
}
