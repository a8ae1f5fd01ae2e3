//! Boots the firmware image under QEMU for end-to-end tests, on each board
//! of `firmware/boards.txt` ([`Board`], [`boards`], [`on_every_board`]).
//!
//! * [`Qemu::boot`] builds `firmware/` once per board and test process (a
//!   nested `cargo build --release` with the board's feature, the `flash`
//!   feature (the flash store, issue 15) and the board's target;
//!   [`firmware_image_without_flash`] builds the image without it),
//!   then starts `qemu-system-arm` with the board's `-machine` and `-cpu`,
//!   UART0 (agent link) and UART1 (operator console)
//!   connected, as TCP clients, to two listeners this process opened on
//!   ephemeral loopback ports: no fixed port, no race for one.
//! * Without `qemu-system-arm`, `boot` returns `None` after printing why, so
//!   the test can return early — unless `BUDGETGATE_REQUIRE_QEMU` is set (CI),
//!   in which case it panics.
//! * QEMU's stdout is the raw defmt log (semihosting); it and QEMU's stderr
//!   are kept in a temporary directory, left in place if the test panics.
//! * The agent link speaks `docs/PROTOCOL.md`: [`Qemu::request`] seals a
//!   payload with the core's codec, sends it and returns the verified reply
//!   payload; [`Qemu::propose`] does the same for `PROPOSE {json}`.
//!
//! Environment: `BUDGETGATE_QEMU` (QEMU binary, default `qemu-system-arm`),
//! `BUDGETGATE_FIRMWARE_IMAGE` (use this ELF for the board named by
//! `BUDGETGATE_FIRMWARE_BOARD`, default the first of `boards.txt`; build the
//! others), `BUDGETGATE_BOARDS` (comma-separated board names: test only
//! these; default every board), `BUDGETGATE_REQUIRE_QEMU` (fail instead of
//! skip).

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use budgetgate_core::link;

/// How long [`Qemu::read_line`] and friends wait for a line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`Qemu::boot`] waits for QEMU to connect both UARTs.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Set this variable (to anything) to make a missing QEMU a test failure.
pub const REQUIRE_QEMU_VAR: &str = "BUDGETGATE_REQUIRE_QEMU";
/// The firmware's exit status after a panic (`board::EXIT_PANIC`).
pub const EXIT_PANIC: i32 = 101;
/// The firmware's exit status after a fault (`board::EXIT_FAULT`).
pub const EXIT_FAULT: i32 = 102;

const BIN: &str = "budgetgate-firmware";

/// One board of `firmware/boards.txt`: what it is built for and how QEMU
/// runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Board {
    /// The board's name, also its cargo feature (`mps2-an386`).
    pub name: String,
    /// Its CPU class (`Cortex-M4F`).
    pub cpu_class: String,
    /// The rustup target it is built for (`thumbv7em-none-eabihf`).
    pub target: String,
    /// QEMU's `-machine`.
    pub machine: String,
    /// QEMU's `-cpu`.
    pub cpu: String,
    /// The core clock as QEMU runs it, in MHz (SysTick counts it).
    pub clock_mhz: u32,
}

/// Every board of `firmware/boards.txt`, the default (first) one first.
/// Panics if the file does not parse (six words a line).
pub fn boards() -> &'static [Board] {
    static BOARDS: OnceLock<Vec<Board>> = OnceLock::new();
    BOARDS.get_or_init(|| {
        let path = firmware_dir().join("boards.txt");
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        text.lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    [name, cpu_class, target, machine, cpu, mhz] => Board {
                        name: name.into(),
                        cpu_class: cpu_class.into(),
                        target: target.into(),
                        machine: machine.into(),
                        cpu: cpu.into(),
                        clock_mhz: mhz.parse().unwrap_or_else(|_| {
                            panic!("{}: clock {mhz:?} is not whole MHz", path.display())
                        }),
                    },
                    _ => panic!("{}: a board line has six words: {line:?}", path.display()),
                },
            )
            .collect()
    })
}

/// The boards to test: those named in `$BUDGETGATE_BOARDS` (comma-separated;
/// an unknown name panics), else every board.
pub fn boards_under_test() -> Vec<&'static Board> {
    let all = boards();
    match std::env::var("BUDGETGATE_BOARDS") {
        Ok(names) if !names.trim().is_empty() => names
            .split(',')
            .map(str::trim)
            .map(|name| {
                all.iter().find(|b| b.name == name).unwrap_or_else(|| {
                    panic!("BUDGETGATE_BOARDS names {name:?}, not a board of boards.txt")
                })
            })
            .collect(),
        _ => all.iter().collect(),
    }
}

/// Runs `case` once on each board under test ([`boards_under_test`]), in
/// turn; a panic names the board it happened on.
pub fn on_every_board(case: impl Fn(&'static Board)) {
    struct Announce(&'static str);
    impl Drop for Announce {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("(the failure above is on board {})", self.0);
            }
        }
    }
    for board in boards_under_test() {
        let _announce = Announce(&board.name);
        case(board);
    }
}

/// The repository's `firmware/` directory.
pub fn firmware_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("firmware")
}

/// The QEMU program to run: `$BUDGETGATE_QEMU` or `qemu-system-arm`, if it
/// can be found.
pub fn qemu_program() -> Option<PathBuf> {
    let name = std::env::var_os("BUDGETGATE_QEMU").unwrap_or_else(|| "qemu-system-arm".into());
    let name = PathBuf::from(name);
    if name.components().count() > 1 {
        return name.is_file().then_some(name);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file())
}

/// The firmware ELF for `board`: `$BUDGETGATE_FIRMWARE_IMAGE` if
/// `$BUDGETGATE_FIRMWARE_BOARD` (default: the first board) names it, else
/// built once per board and process (one build at a time). Panics with
/// cargo's output if the build fails.
pub fn firmware_image(board: &Board) -> PathBuf {
    static IMAGES: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut images = IMAGES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let image = match images.iter().find(|(name, _)| *name == board.name) {
        Some((_, image)) => image.clone(),
        None => {
            let image_board = std::env::var("BUDGETGATE_FIRMWARE_BOARD")
                .unwrap_or_else(|_| boards().first().map(|b| b.name.clone()).unwrap_or_default());
            let image = match std::env::var_os("BUDGETGATE_FIRMWARE_IMAGE") {
                Some(path) if image_board == board.name => Ok(PathBuf::from(path)),
                _ => build_firmware(board, true, None),
            };
            images.push((board.name.clone(), image.clone()));
            image
        }
    };
    match image {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// Environment variables of the outer `cargo test` that must not leak into
/// the nested firmware build (they would change its target dir, flags,
/// profile or target, or point at the outer package).
fn leaks_into_nested_cargo(key: &OsStr) -> bool {
    let Some(key) = key.to_str() else {
        return false;
    };
    const KEEP: &[&str] = &[
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_TERM_",
    ];
    if key.starts_with("CARGO_") {
        return !KEEP.iter().any(|keep| key.starts_with(keep));
    }
    matches!(
        key,
        "CARGO" | "RUSTFLAGS" | "RUSTDOCFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER"
    ) || key.starts_with("__CARGO")
}

/// `board`'s firmware ELF built without the flash store (issue 15:
/// `--features BOARD`, no `flash`), once per board and process, in its own
/// target directory (`firmware/target/no-flash`) so that it never replaces
/// the image [`firmware_image`] returns. Panics with cargo's output if the
/// build fails.
pub fn firmware_image_without_flash(board: &Board) -> PathBuf {
    static IMAGES: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut images = IMAGES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let image = match images.iter().find(|(name, _)| *name == board.name) {
        Some((_, image)) => image.clone(),
        None => {
            let target = firmware_dir().join("target").join("no-flash");
            let image = build_firmware(board, false, Some(&target));
            images.push((board.name.clone(), image.clone()));
            image
        }
    };
    match image {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// `cargo build --release` of `firmware/` for `board` (its feature and
/// target), with the flash store (feature `flash`, issue 15) if `flash`,
/// into `target_dir` if given, run from inside `firmware/` so that
/// `firmware/.cargo/config.toml` (linker scripts) applies.
fn build_firmware(
    board: &Board,
    flash: bool,
    target_dir: Option<&Path>,
) -> Result<PathBuf, String> {
    let dir = firmware_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let features = if flash {
        format!("{},flash", board.name)
    } else {
        board.name.clone()
    };
    let mut command = Command::new(&cargo);
    command
        .current_dir(&dir)
        .args([
            "build",
            "--release",
            "--locked",
            "--message-format=json-render-diagnostics",
            "--no-default-features",
        ])
        .args(["--features", &features, "--target", &board.target])
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .stdin(Stdio::null());
    if let Some(target_dir) = target_dir {
        command.arg("--target-dir").arg(target_dir);
    }
    for (key, _) in std::env::vars_os() {
        if leaks_into_nested_cargo(&key) {
            command.env_remove(key);
        }
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "firmware build for {} failed ({}) in {}:\n{stderr}\n\
             (needs `rustup target add {}`; see docs/FIRMWARE.md)",
            board.name,
            output.status,
            dir.display(),
            board.target
        ));
    }
    // The last compiler-artifact message for our binary names the ELF.
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == BIN)
        .filter_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .next_back()
        .ok_or_else(|| format!("firmware build printed no executable for {BIN}:\n{stderr}"))
}

/// `payload` sealed as a frame line: `PAYLOAD*XXXXXXXX\n` (CRC-32, upper-case hex).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut line = payload.to_vec();
    line.extend_from_slice(format!("*{:08X}\n", link::checksum(payload)).as_bytes());
    line
}

/// One UART as seen from the test: a TCP connection QEMU opened to us.
struct Link {
    name: &'static str,
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Link {
    fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("writing to the {} UART: {e}", self.name));
    }

    /// The next line without its `\n`, or `Ok(None)` on timeout, `Err` on EOF.
    fn read_line(&mut self, timeout: Duration) -> Result<Option<String>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).take(end).collect();
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(format!("the {} UART connection was closed", self.name)),
                Ok(n) => self
                    .pending
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the {} UART: {e}", self.name)),
            }
        }
    }
}

/// A running QEMU with the firmware; killed on drop.
pub struct Qemu {
    board: &'static Board,
    child: Child,
    status: Option<ExitStatus>,
    agent: Link,
    console: Link,
    image: PathBuf,
    dir: PathBuf,
}

impl Qemu {
    /// Builds `board`'s image (once per process) and boots it. `None` (after
    /// printing a notice) when QEMU is not installed and
    /// `BUDGETGATE_REQUIRE_QEMU` is unset; a panic when it is set.
    pub fn boot(board: &'static Board) -> Option<Self> {
        Self::boot_with(board, &[])
    }

    /// As [`Qemu::boot`], with `extra` QEMU options (e.g. `-icount shift=0`).
    pub fn boot_with(board: &'static Board, extra: &[&str]) -> Option<Self> {
        let Some(qemu) = qemu_program() else {
            if std::env::var_os(REQUIRE_QEMU_VAR).is_some() {
                panic!(
                    "qemu-system-arm not found and {REQUIRE_QEMU_VAR} is set \
                     (apt-get install qemu-system-arm)"
                );
            }
            eprintln!(
                "SKIPPED: qemu-system-arm not found (apt-get install qemu-system-arm; \
                 set {REQUIRE_QEMU_VAR}=1 to make this a failure)"
            );
            return None;
        };
        Some(Self::boot_image_with(
            &qemu,
            board,
            &firmware_image(board),
            extra,
        ))
    }

    /// Boots `image` (built for `board`) with the QEMU program `qemu`.
    pub fn boot_image(qemu: &Path, board: &'static Board, image: &Path) -> Self {
        Self::boot_image_with(qemu, board, image, &[])
    }

    /// Boots `image` (built for `board`) with the QEMU program `qemu` and
    /// `extra` options.
    pub fn boot_image_with(
        qemu: &Path,
        board: &'static Board,
        image: &Path,
        extra: &[&str],
    ) -> Self {
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "budgetgate-qemu-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));

        let listen = || TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let (agent_listener, console_listener) = (listen(), listen());
        let port = |l: &TcpListener| l.local_addr().expect("listener address").port();

        let stdout = File::create(dir.join("defmt.bin")).expect("create defmt.bin");
        let stderr = File::create(dir.join("qemu-stderr.txt")).expect("create qemu-stderr.txt");
        let mut command = Command::new(qemu);
        command
            .args(qemu_args(
                board,
                image,
                port(&agent_listener),
                port(&console_listener),
            ))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", qemu.display()));

        let links = accept(&agent_listener, &mut child, "agent (UART0)").and_then(|agent| {
            accept(&console_listener, &mut child, "console (UART1)").map(|console| (agent, console))
        });
        let (agent, console) = match links {
            Ok(links) => links,
            Err(message) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                let stderr = fs::read_to_string(dir.join("qemu-stderr.txt")).unwrap_or_default();
                panic!(
                    "{message}\nQEMU ({}): {status}; logs in {}\nQEMU stderr:\n{stderr}",
                    board.name,
                    dir.display()
                );
            }
        };
        Self {
            board,
            child,
            status: None,
            agent: Link {
                name: "agent",
                stream: agent,
                pending: Vec::new(),
            },
            console: Link {
                name: "console",
                stream: console,
                pending: Vec::new(),
            },
            image: image.to_owned(),
            dir,
        }
    }

    /// Panics with `message`, QEMU's status and its stderr.
    fn fail(&mut self, message: &str) -> ! {
        let status = match self.status {
            Some(status) => status.to_string(),
            None => match self.child.try_wait() {
                Ok(Some(status)) => status.to_string(),
                _ => "still running".to_owned(),
            },
        };
        panic!(
            "{message}\nQEMU ({}): {status}; logs in {}\nQEMU stderr:\n{}",
            self.board.name,
            self.dir.display(),
            self.stderr_log()
        );
    }

    /// Sends `line` and `\n` on the agent link (UART0).
    pub fn send_line(&mut self, line: &str) {
        self.send_bytes(format!("{line}\n").as_bytes());
    }

    /// Sends raw bytes on the agent link (UART0).
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.agent.send(bytes);
    }

    /// The next line from the agent link (without `\n`); panics after
    /// [`READ_TIMEOUT`].
    pub fn read_line(&mut self) -> String {
        match self.agent.read_line(READ_TIMEOUT) {
            Ok(Some(line)) => line,
            Ok(None) => self.fail(&format!("no line from the agent UART in {READ_TIMEOUT:?}")),
            Err(e) => self.fail(&e),
        }
    }

    /// The next agent line if one arrives within `timeout`.
    pub fn try_read_line(&mut self, timeout: Duration) -> Option<String> {
        self.agent
            .read_line(timeout)
            .unwrap_or_else(|e| self.fail(&e))
    }

    /// Boots QEMU on `board` (see [`Qemu::boot`]) and reads the console
    /// banner.
    pub fn boot_gate(board: &'static Board) -> Option<Self> {
        let mut qemu = Self::boot(board)?;
        let banner = qemu.read_console_line();
        if !banner.starts_with("budgetgate-firmware ") {
            qemu.fail(&format!("unexpected banner {banner:?}"));
        }
        Some(qemu)
    }

    /// Sends `payload` as a sealed frame on the agent link.
    pub fn send_frame(&mut self, payload: &str) {
        self.send_bytes(&frame(payload.as_bytes()));
    }

    /// The next reply frame's payload, after checking its checksum; panics
    /// if the line is not a valid frame or none comes in [`READ_TIMEOUT`].
    pub fn read_frame(&mut self) -> String {
        let line = self.read_line();
        match link::verify(line.as_bytes()) {
            Ok(payload) => String::from_utf8_lossy(payload).into_owned(),
            Err(e) => self.fail(&format!("reply {line:?} is not a valid frame: {e}")),
        }
    }

    /// Sends `payload` as a frame and returns the reply's payload.
    pub fn request(&mut self, payload: &str) -> String {
        self.send_frame(payload);
        self.read_frame()
    }

    /// `PROPOSE {action}`: sends a proposal and returns the reply's payload.
    pub fn propose(&mut self, action: &str) -> String {
        self.request(&format!("PROPOSE {action}"))
    }

    /// The payload of the `STATUS` reply.
    pub fn status(&mut self) -> String {
        self.request("STATUS")
    }

    /// Starts a run on the console (`start` or `start D T`) and returns the
    /// console's reply line.
    pub fn start(&mut self, budgets: Option<(u32, u32)>) -> String {
        let command = match budgets {
            Some((d, t)) => format!("start {d} {t}"),
            None => "start".to_owned(),
        };
        let reply = self.console_command(&command);
        if !reply.starts_with("started run ") {
            self.fail(&format!("`{command}` answered {reply:?}"));
        }
        reply
    }

    /// A second handle on the agent link's TCP connection, e.g. for the
    /// host's `device` session. Read from one handle at a time.
    pub fn agent_stream(&self) -> TcpStream {
        self.agent
            .stream
            .try_clone()
            .expect("clone the agent stream")
    }

    /// A second handle on the console's TCP connection.
    pub fn console_stream(&self) -> TcpStream {
        self.console
            .stream
            .try_clone()
            .expect("clone the console stream")
    }

    /// Sends `line` and `\n` on the operator console (UART1).
    pub fn send_console_line(&mut self, line: &str) {
        self.send_console_bytes(format!("{line}\n").as_bytes());
    }

    /// Sends raw bytes on the operator console (UART1).
    pub fn send_console_bytes(&mut self, bytes: &[u8]) {
        self.console.send(bytes);
    }

    /// The next console line (without `\n`); panics after [`READ_TIMEOUT`].
    pub fn read_console_line(&mut self) -> String {
        match self.console.read_line(READ_TIMEOUT) {
            Ok(Some(line)) => line,
            Ok(None) => self.fail(&format!(
                "no line from the console UART in {READ_TIMEOUT:?}"
            )),
            Err(e) => self.fail(&e),
        }
    }

    /// The next console line if one arrives within `timeout`.
    pub fn try_read_console_line(&mut self, timeout: Duration) -> Option<String> {
        self.console
            .read_line(timeout)
            .unwrap_or_else(|e| self.fail(&e))
    }

    /// Sends a console command and returns its one reply line.
    pub fn console_command(&mut self, command: &str) -> String {
        self.send_console_line(command);
        self.read_console_line()
    }

    /// The LED register as the firmware reads it back (console `leds`).
    pub fn leds(&mut self) -> u32 {
        let reply = self.console_command("leds");
        reply
            .strip_prefix("leds=")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| self.fail(&format!("unexpected reply to `leds`: {reply:?}")))
    }

    /// Waits up to `timeout` for QEMU to exit; its status, if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.status {
                return Some(status);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The raw defmt stream so far (QEMU's stdout); decode it with
    /// `defmt-print -e <image> < defmt.bin`.
    pub fn defmt_log(&self) -> Vec<u8> {
        fs::read(self.dir.join("defmt.bin")).unwrap_or_default()
    }

    /// QEMU's stderr so far.
    pub fn stderr_log(&self) -> String {
        fs::read_to_string(self.dir.join("qemu-stderr.txt")).unwrap_or_default()
    }

    /// The board QEMU runs.
    pub fn board(&self) -> &'static Board {
        self.board
    }

    /// The ELF that was booted.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// Where QEMU's stdout (`defmt.bin`) and stderr are kept.
    pub fn log_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("QEMU logs kept in {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The QEMU command line (after the program name) for `image` on `board`,
/// with UART0 and UART1 connecting to `agent_port` and `console_port` on
/// 127.0.0.1.
pub fn qemu_args(board: &Board, image: &Path, agent_port: u16, console_port: u16) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-cpu",
        &board.cpu,
        "-machine",
        &board.machine,
        "-nographic",
        "-monitor",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push("-serial".into());
    // `nodelay`: QEMU writes a reply byte by byte; with Nagle's algorithm on
    // its side each reply would wait for the test's delayed ACK (~40 ms).
    args.push(format!("tcp:127.0.0.1:{agent_port},nodelay=on").into());
    args.push("-serial".into());
    args.push(format!("tcp:127.0.0.1:{console_port},nodelay=on").into());
    args.push("-kernel".into());
    args.push(image.into());
    args
}

/// Accepts QEMU's connection on `listener`, failing early if QEMU exits.
fn accept(listener: &TcpListener, child: &mut Child, what: &str) -> Result<TcpStream, String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("accepting the {what} connection: {e}")),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("QEMU exited ({status}) before connecting {what}"));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "QEMU did not connect {what} within {CONNECT_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
