//! The gate firmware under QEMU, end to end, on every board of
//! `firmware/boards.txt` in turn (`mps2-an386`, `mps2-an385`, `mps2-an505`): sealed frames on
//! the agent link (UART0), the operator console (UART1), the LED register as
//! the actuators. Every reply is compared byte for byte with what
//! `docs/PROTOCOL.md` says. Each test boots its own QEMU; all skip (with a
//! notice) when `qemu-system-arm` is missing, unless
//! `BUDGETGATE_REQUIRE_QEMU` is set, which makes that a failure.

use std::cell::Cell;
use std::time::{Duration, Instant};

use budgetgate::device::{AgentLink, Console, Operator, Session};
use budgetgate_core::link::{self, FRAME_MAX};
use budgetgate_tests::qemu::{self, frame, Board, Qemu, EXIT_PANIC};

/// The console's first line on `board`.
fn boot_banner(board: &Board) -> String {
    format!(
        "budgetgate-firmware 0.1.0 gate board={} protocol=2 frame_max=1024; no run yet: type start",
        board.name
    )
}
const TOOLS: &str = "add,HassTurnOn,HassTurnOff,HassLightSet,HassValveOpen*,HassGetState";

thread_local! {
    /// The run the console last started in this test (each test has its
    /// own thread): every decision and status reply must carry it.
    static RUN: Cell<u32> = const { Cell::new(0) };
}

/// [`qemu::on_every_board`], each board's case with no run started yet.
fn on_every_board(case: impl Fn(&'static Board)) {
    qemu::on_every_board(|board| {
        RUN.with(|r| r.set(0));
        case(board);
    });
}

fn run() -> u32 {
    RUN.with(Cell::get)
}

/// Starts a run on the console and remembers its number (`started run N`)
/// as the run every later reply must name.
fn start(qemu: &mut Qemu, budgets: Option<(u32, u32)>) -> String {
    let line = qemu.start(budgets);
    let n = line
        .strip_prefix("started run ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .expect(&line);
    RUN.with(|r| r.set(n));
    line
}

fn observation(step: u8, call_id: &str, name: &str, executed: bool, data: &str) -> String {
    let ok = !data.starts_with('"');
    let run = run();
    format!(
        r#"{{"type":"observation","run":{run},"step":{step},"call_id":"{call_id}","name":"{name}","executed":{executed},"ok":{ok},"data":{data}}}"#
    )
}

/// An executed tool's successful observation.
fn ran(step: u8, call_id: &str, name: &str, data: &str) -> String {
    observation(step, call_id, name, true, data)
}

/// A counted attempt whose tool did not run, with its error word.
fn refused(step: u8, call_id: &str, name: &str, word: &str) -> String {
    observation(step, call_id, name, false, &format!("\"{word}\""))
}

fn stopped(step: u8, status: &str) -> String {
    let run = run();
    format!(r#"{{"type":"stopped","run":{run},"step":{step},"status":"{status}"}}"#)
}

fn error(word: &str) -> String {
    format!(r#"{{"type":"error","error":"{word}"}}"#)
}

/// A `status` reply with every actuator in its safe state.
fn status(decisions: u8, max_d: u8, attempts: u8, max_t: u8, state: &str) -> String {
    status_with(decisions, max_d, attempts, max_t, state, 0)
}

/// A `status` reply with the actuator register read back as `actuators`.
fn status_with(
    decisions: u8,
    max_d: u8,
    attempts: u8,
    max_t: u8,
    state: &str,
    actuators: u32,
) -> String {
    let run = run();
    format!(
        r#"{{"type":"status","run":{run},"decisions":{decisions},"max_decisions":{max_d},"tool_attempts":{attempts},"max_tool_calls":{max_t},"state":"{state}","actuators":{actuators}}}"#
    )
}

fn tool(call_id: &str, name: &str, arguments: &str) -> String {
    format!(r#"{{"kind":"tool","call_id":"{call_id}","name":"{name}","arguments":{arguments}}}"#)
}

fn add(call_id: &str) -> String {
    tool(call_id, "add", r#"{"a":7,"b":8}"#)
}

fn final_(text: &str) -> String {
    format!(r#"{{"kind":"final","text":"{text}"}}"#)
}

/// Boots, checks the banner, starts a run with the config budgets (8, 4).
fn started(board: &'static Board) -> Option<Qemu> {
    let mut qemu = Qemu::boot_gate(board)?;
    assert_eq!(
        start(&mut qemu, None),
        format!(
            "started run 1: max_decisions=8 max_tool_calls=4 time_budget_ms=120000 \
             approval_timeout_ms=30000 tools={TOOLS}"
        )
    );
    Some(qemu)
}

#[test]
fn idle_until_the_operator_starts_a_run() {
    on_every_board(|board| {
        let Some(mut qemu) = Qemu::boot(board) else {
            return;
        };
        assert_eq!(qemu.read_console_line(), boot_banner(board));
        // Nothing is sent on the agent link unasked.
        assert_eq!(qemu.try_read_line(Duration::from_millis(200)), None);
        assert_eq!(
            qemu.request("HELLO"),
            r#"{"type":"hello","protocol":2,"frame_max":1024}"#
        );
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "idle"));
        assert_eq!(qemu.propose(&add("c1")), error("no-run"));
        assert_eq!(qemu.console_command("status"), "idle: no run (type start)");
        assert_eq!(qemu.leds(), 0, "actuators are in the safe state at boot");

        start(&mut qemu, None);
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "running"));
        let line = qemu.console_command("status");
        assert!(
            line.starts_with("run 1 running decisions=0/8 tool_attempts=0/4 time_left_ms=")
                && line.ends_with(" approval=none rx_overruns=0 rx_lost=0"),
            "{line}"
        );
    });
}

/// SPEC A2, first worked example: add(7, 8) with call id c1, then final "15".
#[test]
fn worked_example_add_then_final() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(qemu.propose(&add("c1")), ran(0, "c1", "add", "15"));
        assert_eq!(qemu.propose(&final_("15")), stopped(1, "final"));
        assert_eq!(qemu.status(), status(2, 8, 1, 4, "final"));
        // After the stop, nothing more is decided.
        assert_eq!(qemu.propose(&add("c2")), error("run-stopped"));
        assert_eq!(qemu.propose(&final_("again")), error("run-stopped"));
        assert_eq!(qemu.status(), status(2, 8, 1, 4, "final"));
    });
}

/// Integers stay integers, floats are spelled as the reference spells them.
#[test]
fn add_takes_integers_and_floats() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let sum = |qemu: &mut Qemu, id: &str, args: &str| qemu.propose(&tool(id, "add", args));
        assert_eq!(
            sum(&mut qemu, "i", r#"{"a":-1000000,"b":1000000}"#),
            ran(0, "i", "add", "0")
        );
        assert_eq!(
            sum(&mut qemu, "f", r#"{"a":2.5,"b":4}"#),
            ran(1, "f", "add", "6.5")
        );
        assert_eq!(
            sum(&mut qemu, "e", r#"{"a":1e-5,"b":0.0}"#),
            ran(2, "e", "add", "1e-05")
        );
        assert_eq!(
            sum(&mut qemu, "b", r#"{"a":true,"b":1}"#),
            refused(3, "b", "add", "invalid-arguments"),
            "booleans are not numbers"
        );
    });
}

#[test]
fn actuator_switched_and_read_back_from_the_register() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let lamp = r#"{"name":"lamp"}"#;
        assert_eq!(
            qemu.propose(&tool("on", "HassTurnOn", lamp)),
            ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        assert_eq!(
            qemu.propose(&tool("s1", "HassGetState", "{}")),
            ran(
                1,
                "s1",
                "HassGetState",
                r#"{"lamp":"on","valve":"closed","leds":1}"#
            )
        );
        assert_eq!(qemu.leds(), 0b01, "the console reads the same register");
        assert_eq!(
            qemu.propose(&tool(
                "dim",
                "HassLightSet",
                r#"{"name":"lamp","brightness":0}"#
            )),
            ran(
                2,
                "dim",
                "HassLightSet",
                r#"{"name":"lamp","brightness":0,"state":"off"}"#
            ),
            "brightness 0 is off: there is no PWM"
        );
        assert_eq!(qemu.leds(), 0);
        assert_eq!(
            qemu.propose(&tool(
                "up",
                "HassLightSet",
                r#"{"brightness":40,"name":"lamp"}"#
            )),
            ran(
                3,
                "up",
                "HassLightSet",
                r#"{"name":"lamp","brightness":40,"state":"on"}"#
            )
        );
        assert_eq!(qemu.leds(), 0b01);
        // A new run drives the actuators to the safe state.
        start(&mut qemu, None);
        assert_eq!(qemu.leds(), 0);
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "running"));
        assert_eq!(
            qemu.propose(&tool("s", "HassGetState", "{}")),
            ran(
                0,
                "s",
                "HassGetState",
                r#"{"lamp":"off","valve":"closed","leds":0}"#
            )
        );
    });
}

#[test]
fn invalid_arguments_count_an_attempt_and_move_nothing() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let cases = [
            ("HassLightSet", r#"{"name":"lamp","brightness":150}"#),
            ("HassLightSet", r#"{"name":"lamp","brightness":40.0}"#),
            ("HassTurnOn", r#"{"name":"valve"}"#),
        ];
        for (step, (name, args)) in cases.iter().enumerate() {
            let id = format!("x{step}");
            assert_eq!(
                qemu.propose(&tool(&id, name, args)),
                refused(step as u8, &id, name, "invalid-arguments")
            );
        }
        assert_eq!(qemu.leds(), 0, "no actuator moved");
        assert_eq!(qemu.status(), status(3, 8, 3, 4, "running"));
        // The run goes on.
        assert_eq!(
            qemu.propose(&tool("x3", "HassGetState", "{}")),
            ran(
                3,
                "x3",
                "HassGetState",
                r#"{"lamp":"off","valve":"closed","leds":0}"#
            )
        );
    });
}

#[test]
fn unknown_tool_is_counted_but_not_executed() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.propose(&tool("v", "HassVacuumStart", "{}")),
            refused(0, "v", "HassVacuumStart", "unknown-tool")
        );
        assert_eq!(qemu.status(), status(1, 8, 1, 4, "running"));
    });
}

fn valve_prompt(call_id: &str) -> String {
    format!(r#"approve? {call_id} HassValveOpen {{"name":"valve"}} [y/n]"#)
}

#[test]
fn approval_granted_opens_the_valve() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        // Nothing moves and nothing is answered before the operator says so.
        assert_eq!(qemu.try_read_line(Duration::from_millis(200)), None);
        assert_eq!(qemu.leds(), 0);
        let line = qemu.console_command("status");
        assert!(
            line.ends_with(" approval=water rx_overruns=0 rx_lost=0"),
            "{line}"
        );
        assert_eq!(
            qemu.console_command("start"),
            "error: answer the pending approval first (y or n)"
        );
        assert_eq!(qemu.console_command("approve"), "approved water");
        assert_eq!(
            qemu.read_frame(),
            ran(
                0,
                "water",
                "HassValveOpen",
                r#"{"name":"valve","state":"open"}"#
            )
        );
        assert_eq!(qemu.leds(), 0b10);
        assert_eq!(
            qemu.propose(&tool("shut", "HassTurnOff", r#"{"name":"valve"}"#)),
            ran(
                1,
                "shut",
                "HassTurnOff",
                r#"{"name":"valve","state":"closed"}"#
            ),
            "closing the valve needs no approval"
        );
        assert_eq!(qemu.leds(), 0);
        assert_eq!(qemu.console_command("y"), "error: no approval pending");
    });
}

/// Bytes of the agent link's receive queue that can wait (firmware
/// `config::AGENT_RX_QUEUE` - 1): more sent behind a pending approval is an
/// overrun.
const RX_QUEUE_BYTES: usize = 1023;

/// Frames sent back to back while a call waits for approval are received
/// (by the UART interrupt, into the receive queue) and every one is
/// answered after the approval, in order: a second approval among them
/// holds the frames behind it in turn. No byte is lost (`rx_overruns=0`).
#[test]
fn frames_queued_behind_a_pending_approval_are_all_answered_in_order() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let valve = r#"{"name":"valve"}"#;
        let lamp = r#"{"name":"lamp"}"#;
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", valve)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        let mut burst = Vec::new();
        for payload in [
            "STATUS".to_owned(),
            format!("PROPOSE {}", add("c2")),
            "HELLO".to_owned(),
            format!("PROPOSE {}", tool("on", "HassTurnOn", lamp)),
            format!("PROPOSE {}", tool("more", "HassValveOpen", valve)),
            "STATUS".to_owned(),
        ] {
            burst.extend(frame(payload.as_bytes()));
        }
        qemu.send_bytes(&burst);
        assert_eq!(
            qemu.try_read_line(Duration::from_millis(200)),
            None,
            "nothing is answered before the operator"
        );
        let line = qemu.console_command("status");
        assert!(
            line.ends_with(" approval=water rx_overruns=0 rx_lost=0"),
            "{line}"
        );
        assert_eq!(qemu.console_command("y"), "approved water");
        let open = r#"{"name":"valve","state":"open"}"#;
        assert_eq!(qemu.read_frame(), ran(0, "water", "HassValveOpen", open));
        assert_eq!(qemu.read_frame(), status_with(1, 8, 1, 4, "running", 0b10));
        assert_eq!(qemu.read_frame(), ran(1, "c2", "add", "15"));
        assert_eq!(
            qemu.read_frame(),
            r#"{"type":"hello","protocol":2,"frame_max":1024}"#
        );
        assert_eq!(
            qemu.read_frame(),
            ran(2, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        // The second approval: the STATUS behind it waits for its answer.
        assert_eq!(qemu.read_console_line(), valve_prompt("more"));
        assert_eq!(qemu.try_read_line(Duration::from_millis(200)), None);
        assert_eq!(qemu.console_command("n"), "denied more");
        assert_eq!(
            qemu.read_frame(),
            refused(3, "more", "HassValveOpen", "approval-denied")
        );
        assert_eq!(qemu.read_frame(), status_with(4, 8, 4, 4, "running", 0b11));
        assert_eq!(qemu.try_read_line(Duration::from_millis(100)), None);
    });
}

/// An overrun of the agent link's receive queue — more bytes behind a
/// pending approval than it holds — is counted in the console's `status`
/// (`rx_overruns`, `rx_lost`), and the frame that lost bytes fails its
/// checksum and uses no decision even when what is left of it would verify:
/// here the bytes after the loss complete a valid, sealed `final` proposal,
/// which is answered `bad-checksum`, and the run goes on. The frames before
/// it are answered, and the link is in sync after it.
#[test]
fn an_overrun_is_counted_and_its_damaged_frame_fails_its_checksum() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        let hello = frame(b"HELLO");
        let last = frame(format!("PROPOSE {}", final_(&"x".repeat(980))).as_bytes());
        assert!(last.len() <= FRAME_MAX + 1, "a frame the gate would decide");
        let burst = [hello.clone(), hello.clone(), last].concat();
        let lost = burst.len() - RX_QUEUE_BYTES;
        let kept = burst.get(2 * hello.len()..RX_QUEUE_BYTES).expect("kept");
        assert!(
            kept.ends_with(b"xxx"),
            "the loss is inside the final's text"
        );
        qemu.send_bytes(&burst);
        // Wait until the device has received (and dropped) every byte.
        let expected = format!(" approval=water rx_overruns=1 rx_lost={lost}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let line = qemu.console_command("status");
            if line.ends_with(&expected) {
                break;
            }
            assert!(Instant::now() < deadline, "{line}, expected {expected}");
        }
        assert_eq!(qemu.console_command("y"), "approved water");
        let open = r#"{"name":"valve","state":"open"}"#;
        assert_eq!(qemu.read_frame(), ran(0, "water", "HassValveOpen", open));
        let hello_reply = r#"{"type":"hello","protocol":2,"frame_max":1024}"#;
        assert_eq!(qemu.read_frame(), hello_reply);
        assert_eq!(qemu.read_frame(), hello_reply);
        // The damaged frame lost its line end too: it ends with the next
        // one. Sent now, the rest of a final whose checksum covers the bytes
        // kept before the loss: the line the device holds would verify.
        assert_eq!(qemu.try_read_line(Duration::from_millis(200)), None);
        let rest = br#""}"#;
        let whole = [kept, rest].concat();
        let seal = format!("*{:08X}\n", link::checksum(&whole));
        let line = [whole.as_slice(), seal.as_bytes()].concat();
        assert!(
            link::verify(line.trim_ascii_end()).is_ok(),
            "without the overrun rule this line would be decided"
        );
        qemu.send_bytes(&[rest.as_slice(), seal.as_bytes()].concat());
        assert_eq!(qemu.read_frame(), error("bad-checksum"));
        assert_eq!(
            qemu.status(),
            status_with(1, 8, 1, 4, "running", 0b10),
            "the damaged final used no decision"
        );
        let line = qemu.console_command("status");
        assert!(
            line.ends_with(&format!(" rx_overruns=1 rx_lost={lost}")),
            "{line}"
        );
    });
}

#[test]
fn approval_denied_leaves_the_valve_closed() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        assert_eq!(qemu.console_command("n"), "denied water");
        assert_eq!(
            qemu.read_frame(),
            refused(0, "water", "HassValveOpen", "approval-denied")
        );
        assert_eq!(qemu.leds(), 0, "the valve did not move");
        // The refusal is a counted attempt; the run goes on.
        assert_eq!(qemu.status(), status(1, 8, 1, 4, "running"));
        assert_eq!(
            qemu.propose(&final_("valve stays shut")),
            stopped(1, "final")
        );
    });
}

#[test]
fn approval_timeout_is_a_refusal() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.console_command("timeout 300"),
            "ok approval_timeout_ms=300"
        );
        let sent = Instant::now();
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        // Pipelined behind the proposal: it waits in the UART until the
        // approval is settled, then is answered in order.
        qemu.send_frame("STATUS");
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        assert_eq!(qemu.read_console_line(), "denied water (timeout)");
        let waited = sent.elapsed();
        assert!(
            waited >= Duration::from_millis(290),
            "refused after {waited:?}"
        );
        assert_eq!(
            qemu.read_frame(),
            refused(0, "water", "HassValveOpen", "approval-denied")
        );
        assert_eq!(qemu.read_frame(), status(1, 8, 1, 4, "running"));
        assert_eq!(qemu.leds(), 0, "the valve did not move");
    });
}

/// Issue 15, duty windows on the board (SPEC C with the device's
/// actuator budgets): `duty W M` on the console gives the valve a window
/// between runs, and is refused while one runs; the gate closes the valve
/// the moment its on-time reaches M (the emulated clock, not the agent,
/// decides: no frame comes between) and refuses the next opening with
/// `duty-limit` and when to retry, without asking the operator. The on-time
/// stays counted after the run: a longer window is refused.
#[test]
fn the_consoles_duty_window_closes_the_valve_and_refuses_the_next_opening() {
    on_every_board(|board| {
        let Some(mut qemu) = Qemu::boot_gate(board) else {
            return;
        };
        let usage = "error: duty W M needs two whole numbers of milliseconds, M at most W, each 1..=3600000";
        for bad in [
            "duty",
            "duty 400",
            "duty 0 0",
            "duty 100 200",
            "duty 1 1 1",
            "duty 3600001 1",
        ] {
            assert_eq!(qemu.console_command(bad), usage, "{bad}");
        }
        assert_eq!(
            qemu.console_command("duty 60000 400"),
            "ok duty_window_ms=60000 duty_max_on_ms=400"
        );
        start(&mut qemu, None);
        assert_eq!(
            qemu.console_command("duty 60000 60000"),
            "error: stop the run first (a duty window is set between runs)"
        );
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("v1", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("v1"));
        let opened = Instant::now();
        assert_eq!(qemu.console_command("y"), "approved v1");
        assert_eq!(
            qemu.read_frame(),
            ran(
                0,
                "v1",
                "HassValveOpen",
                r#"{"name":"valve","state":"open"}"#
            )
        );
        assert_eq!(
            qemu.read_console_line(),
            "duty: actuator 1 spent its duty window; driven to its safe state"
        );
        let open_for = opened.elapsed();
        assert!(
            open_for >= Duration::from_millis(390),
            "closed after {open_for:?}"
        );
        assert_eq!(qemu.leds(), 0, "the valve is closed");
        let reply = qemu.propose(&tool("v2", "HassValveOpen", r#"{"name":"valve"}"#));
        let refusal = refused(1, "v2", "HassValveOpen", "duty-limit");
        let prefix = format!("{},\"retry_after_ms\":", refusal.trim_end_matches('}'));
        let retry: u64 = reply
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{reply}"));
        assert!((58_000..=59_600).contains(&retry), "{reply}");
        assert_eq!(qemu.leds(), 0, "no prompt, nothing moved");
        assert_eq!(qemu.try_read_console_line(Duration::from_millis(100)), None);
        assert_eq!(qemu.propose(&final_("done")), stopped(2, "final"));
        assert_eq!(
            qemu.console_command("duty 60001 400"),
            "error: the valve has been open in its window, which cannot be made longer"
        );
        assert_eq!(
            qemu.console_command("duty 30000 400"),
            "ok duty_window_ms=30000 duty_max_on_ms=400"
        );
    });
}

#[test]
fn duplicate_call_id_stops_the_run() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(qemu.propose(&add("c1")), ran(0, "c1", "add", "15"));
        assert_eq!(
            qemu.propose(&tool("c1", "HassGetState", "{}")),
            stopped(1, "duplicate-call")
        );
        assert_eq!(qemu.status(), status(2, 8, 1, 4, "duplicate-call"));
        assert_eq!(qemu.propose(&add("c2")), error("run-stopped"));
    });
}

#[test]
fn tool_budget_stops_the_fifth_attempt() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        for i in 0..4u8 {
            let id = format!("c{i}");
            assert_eq!(qemu.propose(&add(&id)), ran(i, &id, "add", "15"));
        }
        assert_eq!(qemu.propose(&add("c4")), stopped(4, "tool-budget"));
        assert_eq!(qemu.status(), status(5, 8, 4, 4, "tool-budget"));
        assert_eq!(qemu.propose(&final_("15")), error("run-stopped"));
    });
}

/// Found by a hostile trial: after `tool-budget` the valve stayed open, and
/// nothing on the agent link could close it (even `HassTurnOff` is answered
/// `run-stopped`). Every stop now drives every actuator to its safe state
/// (lamp off, valve closed), and `STATUS` reads the register back.
#[test]
fn a_stopped_run_leaves_every_actuator_in_its_safe_state() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let lamp = r#"{"name":"lamp"}"#;
        let valve = r#"{"name":"valve"}"#;
        assert_eq!(
            qemu.propose(&tool("on", "HassTurnOn", lamp)),
            ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", valve)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        assert_eq!(qemu.console_command("y"), "approved water");
        assert_eq!(
            qemu.read_frame(),
            ran(
                1,
                "water",
                "HassValveOpen",
                r#"{"name":"valve","state":"open"}"#
            )
        );
        assert_eq!(qemu.leds(), 0b11);
        assert_eq!(qemu.status(), status_with(2, 8, 2, 4, "running", 0b11));
        assert_eq!(qemu.propose(&add("a")), ran(2, "a", "add", "15"));
        assert_eq!(qemu.propose(&add("b")), ran(3, "b", "add", "15"));
        assert_eq!(qemu.propose(&add("c")), stopped(4, "tool-budget"));
        assert_eq!(
            qemu.leds(),
            0,
            "the stop closed the valve and turned the lamp off"
        );
        assert_eq!(qemu.status(), status(5, 8, 4, 4, "tool-budget"));
        assert_eq!(
            qemu.propose(&tool("off", "HassTurnOff", valve)),
            error("run-stopped"),
            "nothing is left for the agent to undo"
        );

        // The same for every other stop: final, duplicate call, policy error,
        // and the decision budget that follows a tool round.
        let stops = [
            (final_("done"), "final"),
            (tool("on", "HassGetState", "{}"), "duplicate-call"),
            (r#"{"kind":"tool"}"#.to_owned(), "policy-error"),
        ];
        for (proposal, status_word) in stops {
            start(&mut qemu, None);
            assert_eq!(
                qemu.propose(&tool("on", "HassTurnOn", lamp)),
                ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
            );
            assert_eq!(qemu.leds(), 1);
            assert_eq!(qemu.propose(&proposal), stopped(1, status_word));
            assert_eq!(qemu.leds(), 0, "{status_word}");
            assert_eq!(qemu.status(), status(2, 8, 1, 4, status_word));
        }
        start(&mut qemu, Some((1, 4)));
        qemu.send_frame(&format!("PROPOSE {}", tool("on", "HassTurnOn", lamp)));
        assert_eq!(
            qemu.read_frame(),
            ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        assert_eq!(qemu.read_frame(), stopped(0, "decision-budget"));
        assert_eq!(qemu.leds(), 0, "decision-budget");
    });
}

/// Kept from a hostile trial (they held): sealed frames whose payload is
/// binary (NUL, ESC, invalid UTF-8) reach the request and proposal readers
/// with a valid checksum; they are an unknown request (no decision) or an
/// invalid proposal (`policy-error`), never a crash.
#[test]
fn sealed_binary_payloads_are_refused_without_a_crash() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        for payload in [&b"\x00"[..], b"\xff\xfe", b"\x1b[2J", b"PROPOSE\x00{}"] {
            qemu.send_bytes(&frame(payload));
            assert_eq!(qemu.read_frame(), error("unknown-request"), "{payload:?}");
        }
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "running"));
        let proposals: [&[u8]; 4] = [
            b"PROPOSE {\"kind\":\"final\",\"text\":\"\xff\"}",
            b"PROPOSE {\"kind\":\"final\",\"text\":\"a\x00b\"}",
            b"PROPOSE {\"kind\":\"final\",\"text\":\"\xc0\xaf\"}",
            b"PROPOSE \x00",
        ];
        for (i, payload) in proposals.into_iter().enumerate() {
            if i > 0 {
                start(&mut qemu, None);
            }
            qemu.send_bytes(&frame(payload));
            assert_eq!(qemu.read_frame(), stopped(0, "policy-error"), "{payload:?}");
        }
        assert_eq!(qemu.leds(), 0);
    });
}

#[test]
fn decision_budget_and_the_contract_examples() {
    on_every_board(|board| {
        let Some(mut qemu) = Qemu::boot_gate(board) else {
            return;
        };
        // SPEC A2 third example: the first policy with max_decisions=1.
        assert!(start(&mut qemu, Some((1, 4)))
            .starts_with("started run 1: max_decisions=1 max_tool_calls=4 "));
        qemu.send_frame(&format!("PROPOSE {}", add("c1")));
        assert_eq!(qemu.read_frame(), ran(0, "c1", "add", "15"));
        assert_eq!(qemu.read_frame(), stopped(0, "decision-budget"));
        assert_eq!(qemu.status(), status(1, 1, 1, 4, "decision-budget"));

        // SPEC A2 second example: fresh call ids, max_decisions=3, max_tool_calls=1.
        assert!(start(&mut qemu, Some((3, 1))).starts_with("started run 2: "));
        assert_eq!(qemu.propose(&add("c0")), ran(0, "c0", "add", "15"));
        assert_eq!(qemu.propose(&add("c1")), stopped(1, "tool-budget"));
        assert_eq!(qemu.status(), status(2, 3, 1, 1, "tool-budget"));

        // Three decisions, all tool rounds: the third is followed by its stop.
        start(&mut qemu, Some((3, 4)));
        assert_eq!(qemu.propose(&add("a")), ran(0, "a", "add", "15"));
        assert_eq!(
            qemu.propose(&tool("b", "nope", "{}")),
            refused(1, "b", "nope", "unknown-tool")
        );
        qemu.send_frame(&format!("PROPOSE {}", add("c")));
        assert_eq!(qemu.read_frame(), ran(2, "c", "add", "15"));
        assert_eq!(qemu.read_frame(), stopped(2, "decision-budget"));
        assert_eq!(qemu.propose(&final_("15")), error("run-stopped"));

        // Budgets outside the contract's bounds are refused on the console too.
        assert_eq!(
            qemu.console_command("start 33 4"),
            "error: start D T needs max_decisions 1..=32 and max_tool_calls 0..=16"
        );
        assert_eq!(qemu.status(), status(3, 3, 3, 4, "decision-budget"));
    });
}

#[test]
fn invalid_proposals_are_policy_errors() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.propose(r#"{"kind":"tool","call_id":"c1","name":"add"}"#),
            stopped(0, "policy-error")
        );
        // Strings stay in the frame they came in: a valid text as long as a
        // frame allows is read whole, and a blank one is still refused.
        start(&mut qemu, None);
        assert_eq!(qemu.propose(&final_(&"x".repeat(900))), stopped(0, "final"));
        start(&mut qemu, None);
        assert_eq!(
            qemu.propose(&final_(" \\n\\u3000")),
            stopped(0, "policy-error")
        );
        start(&mut qemu, None);
        assert_eq!(
            qemu.propose(r#"{"kind":"final","text":"x","kind":"final"}"#),
            stopped(0, "policy-error"),
            "duplicate keys"
        );
    });
}

#[test]
fn corrupted_frames_use_no_decision() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        let good = frame(format!("PROPOSE {}", add("c1")).as_bytes());
        let mut flipped = good.clone();
        flipped[20] ^= 0x01; // one bit of the JSON
        qemu.send_bytes(&flipped);
        assert_eq!(qemu.read_frame(), error("bad-checksum"));
        let mut bad_crc = good.clone();
        let digit = bad_crc.len() - 2;
        bad_crc[digit] = if bad_crc[digit] == b'0' { b'1' } else { b'0' };
        qemu.send_bytes(&bad_crc);
        assert_eq!(qemu.read_frame(), error("bad-checksum"));
        qemu.send_line("STATUS");
        assert_eq!(qemu.read_frame(), error("missing-checksum"));
        // Found by a hostile trial: reported as `missing-checksum` before.
        qemu.send_line("STATUS*8bf8a29a");
        assert_eq!(
            qemu.read_frame(),
            error("malformed-checksum"),
            "lower-case hex is a checksum in the wrong spelling, not a missing one"
        );
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "running"));
        // The intact frame is decided normally; CRLF line ends are accepted.
        let mut crlf = good.clone();
        crlf.insert(crlf.len() - 1, b'\r');
        qemu.send_bytes(&crlf);
        assert_eq!(qemu.read_frame(), ran(0, "c1", "add", "15"));
    });
}

#[test]
fn over_long_frames_are_refused_without_losing_sync() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        // Exactly FRAME_MAX bytes (padding is JSON whitespace) is a frame.
        let head = r#"PROPOSE {"kind":"final","text":"x""#;
        let pad = FRAME_MAX - link::CHECKSUM_LEN - head.len() - 1;
        let fits = format!("{head}{}}}", " ".repeat(pad));
        assert_eq!(frame(fits.as_bytes()).len(), FRAME_MAX + 1);
        let over = format!("{head}{}}}", " ".repeat(pad + 1));
        qemu.send_frame(&over);
        assert_eq!(qemu.read_frame(), error("frame-too-long"));
        // Much longer, written in pieces, then a frame right behind it.
        let long = "z".repeat(5 * FRAME_MAX);
        for piece in long.as_bytes().chunks(700) {
            qemu.send_bytes(piece);
        }
        qemu.send_bytes(b"\n");
        qemu.send_frame("STATUS");
        assert_eq!(qemu.read_frame(), error("frame-too-long"));
        assert_eq!(qemu.read_frame(), status(0, 8, 0, 4, "running"));
        assert_eq!(qemu.propose(&fits[8..]), stopped(0, "final"));
        assert_eq!(qemu.try_read_line(Duration::from_millis(100)), None);
    });
}

#[test]
fn garbage_bytes_use_no_decision() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        // Every byte value except '\n', NUL and 0xFF included.
        let all: Vec<u8> = (0..=255u8).filter(|&b| b != b'\n').collect();
        qemu.send_bytes(&all);
        qemu.send_bytes(b"\n");
        assert_eq!(qemu.read_frame(), error("missing-checksum"));

        // Pseudo-random bytes (fixed seed), cut into lines at every '\n'.
        let mut state: u32 = 0x2545_F491;
        let noise: Vec<u8> = (0..6000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state >> 24) as u8
            })
            .collect();
        qemu.send_bytes(&noise);
        qemu.send_bytes(b"\n");
        // What the core's decoder makes of each line: too long, empty (no
        // reply), or not a valid frame.
        let expected: Vec<String> = noise
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                if line.len() > FRAME_MAX {
                    return Some(error("frame-too-long"));
                }
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.is_empty() {
                    return None;
                }
                match link::verify(line) {
                    Err(e) => Some(error(e.as_str())),
                    Ok(_) => panic!("the noise holds a valid frame"),
                }
            })
            .collect();
        assert!(expected.len() > 10, "the noise should hold many lines");
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(&qemu.read_frame(), want, "reply {i} to the noise");
        }
        assert_eq!(qemu.status(), status(0, 8, 0, 4, "running"));
        assert_eq!(qemu.propose(&add("c1")), ran(0, "c1", "add", "15"));

        // Garbage on the console is an unknown command, not a crash.
        qemu.send_console_bytes(b"\x00\xff\x1b[2J\n");
        assert_eq!(qemu.read_console_line(), "error: unknown command");
        assert_eq!(qemu.leds(), 0);
    });
}

#[test]
fn the_agent_link_cannot_reset_the_budget() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(qemu.propose(&add("c1")), ran(0, "c1", "add", "15"));
        let before = qemu.status();
        assert_eq!(before, status(1, 8, 1, 4, "running"));
        assert_eq!(qemu.request("RESET"), error("not-permitted"));
        for other in ["reset", "RESET ", "START", "PROPOSE", "status"] {
            assert_eq!(qemu.request(other), error("unknown-request"), "{other:?}");
        }
        assert_eq!(qemu.status(), before, "nothing changed");
        // Still the same run: the call id is still taken.
        assert_eq!(qemu.propose(&add("c1")), stopped(1, "duplicate-call"));
        assert_eq!(qemu.request("RESET"), error("not-permitted"));
        assert_eq!(qemu.status(), status(2, 8, 1, 4, "duplicate-call"));
    });
}

#[test]
fn time_budget_is_measured_on_the_device() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.console_command("deadline 500"),
            "ok time_budget_ms=500"
        );
        assert_eq!(qemu.propose(&add("c1")), ran(0, "c1", "add", "15"));
        assert_eq!(
            qemu.propose(&tool("on", "HassTurnOn", r#"{"name":"lamp"}"#)),
            ran(1, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        assert_eq!(qemu.status(), status_with(2, 8, 2, 4, "running", 1));
        // The run stops when its time passes, not at the next proposal: an
        // agent that falls silent does not leave the lamp on. The emulated
        // clock may lag the host's on a loaded machine: wait for it (reading
        // the LEDs back is no proposal), at most 20 s.
        std::thread::sleep(Duration::from_millis(500));
        let waited = std::time::Instant::now();
        while qemu.leds() != 0 && waited.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(qemu.leds(), 0, "the time budget made every actuator safe");
        assert_eq!(
            qemu.status(),
            status(2, 8, 2, 4, "time-budget"),
            "STATUS is no decision"
        );
        // A later deadline does not revive a run that stopped on time.
        assert_eq!(
            qemu.console_command("deadline 60000"),
            "ok time_budget_ms=60000"
        );
        // The first proposal after it is told why the run stopped, at the
        // step it would have had.
        assert_eq!(qemu.propose(&final_("15")), stopped(2, "time-budget"));
        assert_eq!(qemu.status(), status(2, 8, 2, 4, "time-budget"));
        assert_eq!(qemu.propose(&final_("15")), error("run-stopped"));
        // A new run gets the (operator's) time budget afresh.
        start(&mut qemu, None);
        assert_eq!(qemu.propose(&final_("15")), stopped(0, "final"));
    });
}

#[test]
fn console_commands() {
    on_every_board(|board| {
        let Some(mut qemu) = Qemu::boot_gate(board) else {
            return;
        };
        assert!(qemu
            .console_command("help")
            .starts_with("commands: start [D T] status y n "));
        assert_eq!(
            qemu.console_command("tools"),
            format!("tools: {TOOLS} (* needs approval)")
        );
        assert_eq!(
            qemu.console_command("  buttons\r"),
            "buttons=0",
            "QEMU models no buttons"
        );
        // Found by a hostile trial: these said only `bad number`; the reply
        // now names the accepted range.
        for bad in ["timeout 0", "timeout x", "timeout 5 5", "timeout 3600001"] {
            assert_eq!(
                qemu.console_command(bad),
                "error: timeout MS needs one whole number of milliseconds, 1..=3600000",
                "{bad:?}"
            );
        }
        for bad in ["deadline", "deadline 0", "deadline 3600001"] {
            assert_eq!(
                qemu.console_command(bad),
                "error: deadline MS needs one whole number of milliseconds, 1..=3600000",
                "{bad:?}"
            );
        }
        for bad in ["start 8", "start 8 x", "start 8 4 4", "start 33 4"] {
            assert_eq!(
                qemu.console_command(bad),
                "error: start D T needs max_decisions 1..=32 and max_tool_calls 0..=16",
                "{bad:?}"
            );
        }
        assert_eq!(
            qemu.console_command("timeout 3600000"),
            "ok approval_timeout_ms=3600000"
        );
        assert_eq!(qemu.console_command("leds 1"), "error: unknown command");
        assert_eq!(qemu.console_command("frobnicate"), "error: unknown command");
        assert_eq!(
            qemu.console_command(&"r".repeat(500)),
            "error: line too long"
        );
        assert_eq!(qemu.console_command("n"), "error: no approval pending");
        // Blank lines get no reply: the next reply is the next command's.
        qemu.send_console_line("");
        qemu.send_console_line("   ");
        let started = qemu.console_command("start");
        assert!(started.contains("approval_timeout_ms=3600000"), "{started}");

        let uptime = |qemu: &mut Qemu| -> u64 {
            let reply = qemu.console_command("uptime");
            reply
                .strip_prefix("uptime_ms=")
                .and_then(|n| n.parse().ok())
                .expect(&reply)
        };
        let (t0, host0) = (uptime(&mut qemu), Instant::now());
        std::thread::sleep(Duration::from_millis(300));
        // The emulated clock may lag the host's on a loaded machine: wait
        // for it to pass 150 ms (at most 20 s); it can never run ahead.
        let mut t1 = uptime(&mut qemu);
        while t1.saturating_sub(t0) < 150 && host0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
            t1 = uptime(&mut qemu);
        }
        let host = host0.elapsed().as_millis() as u64;
        let dt = t1.saturating_sub(t0);
        assert!(
            (150..=host + 200).contains(&dt),
            "uptime advanced {dt} ms over {host} ms of host time"
        );
    });
}

#[test]
fn panic_turns_actuators_off_and_exits_qemu_with_failure() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.propose(&tool("on", "HassTurnOn", r#"{"name":"lamp"}"#)),
            ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        assert_eq!(qemu.leds(), 1);
        qemu.send_console_line("panic");
        let status = qemu
            .wait_exit(Duration::from_secs(5))
            .expect("QEMU exits after a panic");
        assert_eq!(status.code(), Some(EXIT_PANIC), "exit status {status}");
        assert!(!qemu.defmt_log().is_empty(), "defmt log is empty");
    });
}

/// The host's `budgetgate device` session (library form) against the
/// firmware, acting as the operator, with `examples/device-session.json`.
fn device_session(board: &'static Board, operator: Operator) -> Option<(u8, String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/device-session.json"
    );
    let text = std::fs::read_to_string(path).expect("read the example");
    host_session(board, operator, &text)
}

/// The host's session (library form) with the script `text`, as the
/// operator: its exit status, its report, and `STATUS` afterwards.
fn host_session(
    board: &'static Board,
    operator: Operator,
    text: &str,
) -> Option<(u8, String, String)> {
    let mut qemu = Qemu::boot_gate(board)?;
    let script = budgetgate::device::read_script("device-session.json", text).expect("script");
    let console = Console::new(qemu.console_stream(), operator, false).expect("console");
    let mut out = Vec::new();
    let end = Session::new(
        AgentLink::new(qemu.agent_stream(), false),
        Some(console),
        false,
        Duration::from_secs(10),
        &mut out,
    )
    .run(&script)
    .expect("the session runs");
    let report = String::from_utf8(out).expect("UTF-8 report");
    // The session's console started the device's first run.
    RUN.with(|r| r.set(1));
    // The agent link is free again: the device agrees on how the run ended.
    Some((end.exit_code(), report, qemu.status()))
}

#[test]
fn device_session_with_an_approving_operator() {
    on_every_board(|board| {
        let Some((code, report, after)) = device_session(board, Operator::Approve) else {
            return;
        };
        let expected = [
            "device: protocol 2, frame_max 1024",
            &format!(
                "operator: started run 1: max_decisions=8 max_tool_calls=6 time_budget_ms=120000 \
                 approval_timeout_ms=30000 tools={TOOLS}"
            ),
            "run 1: running, 0/8 decisions, 0/6 tool attempts",
            r#"step 0  tool lamp-on HassTurnOn {"name":"lamp"} -> ok: {"name":"lamp","state":"on"}"#,
            r#"step 1  tool check-1 HassGetState {} -> ok: {"lamp":"on","valve":"closed","leds":1}"#,
            r#"step 2  tool dim HassLightSet {"name":"lamp","brightness":140} -> refused, not executed: invalid-arguments"#,
            r#"step 3  tool dim-2 HassLightSet {"name":"lamp","brightness":40} -> ok: {"name":"lamp","brightness":40,"state":"on"}"#,
            r#"step 4  operator: approve? water HassValveOpen {"name":"valve"} [y/n] -> y"#,
            r#"step 4  tool water HassValveOpen {"name":"valve"} -> ok: {"name":"valve","state":"open"}"#,
            r#"step 5  tool check-2 HassGetState {} -> ok: {"lamp":"on","valve":"open","leds":3}"#,
            "step 6  final Lamp on at 40 %; the garden valve was asked to open (see check-2). -> stopped: final",
            "run stopped: final (final, 7/8 decisions, 6/6 tool attempts)",
            // Every stop, final too, leaves the actuators in their safe state.
            "actuators left: lamp off, valve closed (register 0: the safe state)",
        ];
        assert_eq!(report.lines().collect::<Vec<_>>(), expected, "{report}");
        assert_eq!(code, 0);
        assert_eq!(after, status(7, 8, 6, 6, "final"));
    });
}

/// The host's report says what a stop left the actuators in: the valve
/// was opened (approved), then the tool budget ran out, and the stop closed
/// it (issue 10).
#[test]
fn device_session_reports_the_actuators_a_tool_budget_stop_left_safe() {
    on_every_board(|board| {
        let script = r#"{"script": [
            {"kind": "tool", "call_id": "on", "name": "HassTurnOn", "arguments": {"name": "lamp"}},
            {"kind": "tool", "call_id": "water", "name": "HassValveOpen", "arguments": {"name": "valve"}},
            {"kind": "tool", "call_id": "a", "name": "add", "arguments": {"a": 7, "b": 8}},
            {"kind": "tool", "call_id": "b", "name": "add", "arguments": {"a": 7, "b": 8}},
            {"kind": "final", "text": "never sent"}
        ], "max_tool_calls": 3}"#;
        let Some((code, report, after)) = host_session(board, Operator::Approve, script) else {
            return;
        };
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(
            &lines[lines.len() - 4..],
            [
                r#"step 2  tool a add {"a":7,"b":8} -> ok: 15"#,
                r#"step 3  tool b add {"a":7,"b":8} -> stopped: tool-budget"#,
                "run stopped: tool-budget (tool-budget, 4/8 decisions, 3/3 tool attempts)",
                "actuators left: lamp off, valve closed (register 0: the safe state)",
            ],
            "{report}"
        );
        assert!(
            report.contains(r#"step 1  tool water HassValveOpen {"name":"valve"} -> ok: {"name":"valve","state":"open"}"#),
            "{report}"
        );
        assert_eq!(code, 1);
        assert_eq!(after, status(4, 8, 3, 3, "tool-budget"));
    });
}

#[test]
fn device_session_with_a_denying_operator() {
    on_every_board(|board| {
        let Some((code, report, after)) = device_session(board, Operator::Deny) else {
            return;
        };
        for line in [
            r#"step 4  operator: approve? water HassValveOpen {"name":"valve"} [y/n] -> n"#,
            r#"step 4  tool water HassValveOpen {"name":"valve"} -> refused, not executed: approval-denied"#,
            r#"step 5  tool check-2 HassGetState {} -> ok: {"lamp":"on","valve":"closed","leds":1}"#,
            "actuators left: lamp off, valve closed (register 0: the safe state)",
        ] {
            assert!(
                report.lines().any(|l| l == line),
                "missing {line:?} in:\n{report}"
            );
        }
        assert_eq!(code, 0);
        assert_eq!(after, status(7, 8, 6, 6, "final"));
    });
}

/// Guest instructions per gated action, counted by QEMU: with `-icount
/// shift=0` every instruction advances the virtual clock by 1 ns, and the
/// firmware's 25 MHz SysTick counts one tick per 40 ns. The firmware keeps
/// the ticks of the last agent frame (line end to last reply byte; console
/// `ticks`). Printed with `--nocapture`; the bounds catch a broken
/// measurement or a gross regression, and the `add` frame (the worked
/// example) must reach its verdict within issue 15's target, 2 % of its
/// wire time at the board's clock.
///
/// With an image built with `--features stack-paint` (see docs/FIRMWARE.md,
/// `BUDGETGATE_FIRMWARE_IMAGE`) it also prints the stack's high-water mark
/// after the deepest paths (a float result, an approval).
#[test]
fn instructions_per_gated_action() {
    on_every_board(|board| {
        let Some(mut qemu) = Qemu::boot_with(board, &["-icount", "shift=0"]) else {
            return;
        };
        assert_eq!(qemu.read_console_line(), boot_banner(board));
        start(&mut qemu, Some((8, 8)));
        // The deepest paths first, for the stack measurement at the end.
        qemu.propose(&tool("f", "add", r#"{"a":2.5,"b":1e-5}"#));
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("w", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("w"));
        assert_eq!(qemu.console_command("y"), "approved w");
        qemu.read_frame();
        let actions = [
            ("STATUS (no decision)", "STATUS".to_owned()),
            ("add 7+8 (worked example)", format!("PROPOSE {}", add("c1"))),
            (
                "HassTurnOn lamp",
                format!("PROPOSE {}", tool("c2", "HassTurnOn", r#"{"name":"lamp"}"#)),
            ),
            (
                "HassLightSet 140 (refused)",
                format!(
                    "PROPOSE {}",
                    tool("c3", "HassLightSet", r#"{"name":"lamp","brightness":140}"#)
                ),
            ),
            (
                "HassGetState",
                format!("PROPOSE {}", tool("c4", "HassGetState", "{}")),
            ),
            ("final", format!("PROPOSE {}", final_("15"))),
        ];
        println!(
            "{} ({}, {} MHz): guest instructions per agent frame (QEMU -icount shift=0, ±{} each):",
            board.name,
            board.cpu_class,
            board.clock_mhz,
            1000 / board.clock_mhz
        );
        println!(
            "  {:<28} {:>14} {:>14}",
            "", "to the verdict", "to the reply"
        );
        for (what, payload) in actions {
            qemu.request(&payload);
            let reply = qemu.console_command("ticks");
            let (frame, verdict): (u64, u64) = reply
                .strip_prefix("last_frame_ticks=")
                .and_then(|rest| rest.split_once(" verdict_ticks="))
                .and_then(|(f, v)| Some((f.parse().ok()?, v.parse().ok()?)))
                .expect(&reply);
            // Under -icount shift=0 an instruction is 1 ns of virtual time.
            let per_tick = u64::from(1000 / board.clock_mhz);
            let (frame, verdict) = (frame * per_tick, verdict * per_tick);
            println!("  {what:<28} {verdict:>14} {frame:>14}");
            assert!(
                (40..2_000_000).contains(&frame),
                "{what}: {frame} instructions"
            );
            // A proposal reaches its verdict before its reply is complete;
            // other requests have none.
            if payload.starts_with("PROPOSE") {
                assert!(
                    (40..frame).contains(&verdict),
                    "{what}: verdict {verdict} of {frame}"
                );
                // Issue 15's target, on the typical call: from its line end
                // to its verdict at most 2 % of the frame's wire time at
                // 115 200 baud (10 bits a byte), counting an instruction a
                // cycle at the board's clock.
                if what.starts_with("add") {
                    let wire_bits = (payload.len() as u64 + "*XXXXXXXX\n".len() as u64) * 10;
                    let budget = wire_bits * u64::from(board.clock_mhz) * 1_000_000 / 115_200 / 50;
                    assert!(
                        verdict <= budget,
                        "{}: the add frame's verdict took {verdict} instructions, \
                         over 2 % of its wire time ({budget})",
                        board.name
                    );
                }
            } else {
                assert_eq!(verdict, 0, "{what}");
            }
        }
        match qemu.console_command("stack") {
            line if line.starts_with("stack_peak_bytes=") => println!("  {line}"),
            line => assert_eq!(line, "error: build with --features stack-paint"),
        }
    });
}

/// Found by a hostile trial: an approval given after the run's time budget
/// ran out opened the valve. It must not: the call is answered as refused
/// for time, the run stops on its time budget, the actuator stays still.
#[test]
fn an_approval_after_the_time_budget_moves_nothing() {
    on_every_board(|board| {
        let Some(mut qemu) = started(board) else {
            return;
        };
        assert_eq!(
            qemu.console_command("timeout 5000"),
            "ok approval_timeout_ms=5000"
        );
        assert_eq!(
            qemu.console_command("deadline 300"),
            "ok time_budget_ms=300"
        );
        // The deadline applies from the next start.
        let uptime = |qemu: &mut Qemu| -> u64 {
            let reply = qemu.console_command("uptime");
            reply
                .strip_prefix("uptime_ms=")
                .and_then(|n| n.parse().ok())
                .expect(&reply)
        };
        let started_at = uptime(&mut qemu);
        start(&mut qemu, None);
        qemu.send_frame(&format!(
            "PROPOSE {}",
            tool("water", "HassValveOpen", r#"{"name":"valve"}"#)
        ));
        assert_eq!(qemu.read_console_line(), valve_prompt("water"));
        // Past the 300 ms on the device's own clock (which may lag the
        // host's on a loaded machine), at most 20 s.
        let waited = Instant::now();
        while uptime(&mut qemu) < started_at + 400 && waited.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Operator answers ignore case.
        assert_eq!(qemu.console_command("Y"), "approved water");
        assert_eq!(
            qemu.read_console_line(),
            "too late: the run's time budget ran out; not executed"
        );
        assert_eq!(
            qemu.read_frame(),
            refused(0, "water", "HassValveOpen", "time-budget")
        );
        assert_eq!(qemu.read_frame(), stopped(0, "time-budget"));
        assert_eq!(qemu.leds(), 0, "the valve did not move");
        assert_eq!(qemu.propose(&final_("done")), error("run-stopped"));
    });
}
