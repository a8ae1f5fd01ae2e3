//! One script run through the device ([`Session`]) and how it ended
//! ([`SessionEnd`]).

use std::io::Write;
use std::time::Duration;

use budgetgate_core::link::PROTOCOL_VERSION;

use super::console::{Console, ConsoleEvent};
use super::expected::Expected;
use super::link::{io_error, request_frame, AgentLink, DeviceError, DeviceReply, Port, Reply};
use super::report::{actuators, json_terminal_safe, summary, verdict};
use super::script::Script;
use crate::term::terminal_safe;

/// How a session ended when the link worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    /// The run's stop status (`final`, `tool-budget`, …), or `None` when the
    /// script ended while the run still takes proposals.
    pub status: Option<String>,
}

impl SessionEnd {
    /// 0 for `final`, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.status.as_deref() {
            Some("final") => 0,
            _ => 1,
        }
    }
}

/// One script run through the device.
pub struct Session<'o, P: Port> {
    agent: AgentLink<P>,
    console: Option<Console>,
    json: bool,
    reply_timeout: Duration,
    out: &'o mut dyn Write,
}

/// A `status` reply, read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunStatus {
    run: u32,
    decisions: u8,
    max_decisions: u8,
    state: String,
    actuators: u32,
    text: String,
}

impl<'o, P: Port> Session<'o, P> {
    /// A session over `agent`, with the operator `console` if any; the
    /// report (or, with `json`, the replies) goes to `out`.
    pub fn new(
        agent: AgentLink<P>,
        console: Option<Console>,
        json: bool,
        reply_timeout: Duration,
        out: &'o mut dyn Write,
    ) -> Self {
        Self {
            agent,
            console,
            json,
            reply_timeout,
            out,
        }
    }

    /// One line of the report, made safe for a terminal: it holds text from
    /// the script and from the device.
    fn say(&mut self, line: &str) -> Result<(), DeviceError> {
        if !self.json {
            writeln!(self.out, "{}", terminal_safe(line))
                .map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn record(&mut self, reply: &Reply) -> Result<(), DeviceError> {
        if self.json {
            writeln!(self.out, "{}", json_terminal_safe(&reply.raw))
                .map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn ask(&mut self, verb: &str, json: Option<&[u8]>) -> Result<Reply, DeviceError> {
        let frame = request_frame(verb, json)?;
        let reply = self.agent.request(&frame, self.reply_timeout)?;
        self.record(&reply)?;
        Ok(reply)
    }

    fn status(&mut self) -> Result<RunStatus, DeviceError> {
        let reply = self.ask("STATUS", None)?;
        let text = verdict(&reply.reply);
        match reply.reply {
            DeviceReply::Status {
                run,
                decisions,
                max_decisions,
                state,
                actuators,
                ..
            } => Ok(RunStatus {
                run,
                decisions,
                max_decisions,
                state,
                actuators,
                text,
            }),
            _ => Err(DeviceError::Protocol(format!(
                "STATUS was answered with {}",
                reply.raw
            ))),
        }
    }

    fn print_notes(&mut self, step: Option<u8>) -> Result<(), DeviceError> {
        let notes = match &mut self.console {
            Some(console) => console.take_notes()?,
            None => return Ok(()),
        };
        for note in notes {
            if let ConsoleEvent::Prompt { line, answer } = note {
                let at = step.map_or_else(String::new, |s| format!("step {s}  "));
                let line = format!("{at}operator: {line} -> {answer}");
                if self.json {
                    log::info!("{}", terminal_safe(&line));
                } else {
                    self.say(&line)?;
                }
            }
        }
        Ok(())
    }

    /// Greets the device, starts a run if this session is the operator
    /// (with the script's budgets, if it names any), sends every proposal in
    /// turn and reports each verdict, and what the actuators were left in.
    /// Every reply must belong to its request ([`Expected`]).
    pub fn run(&mut self, script: &Script) -> Result<SessionEnd, DeviceError> {
        let proposals = &script.proposals;
        let hello = self.ask("HELLO", None)?;
        match hello.reply {
            DeviceReply::Hello { protocol, .. } if protocol == PROTOCOL_VERSION => {}
            DeviceReply::Hello { protocol, .. } => {
                return Err(DeviceError::Protocol(format!(
                    "the device speaks protocol {protocol}; this host speaks {PROTOCOL_VERSION}"
                )))
            }
            _ => {
                return Err(DeviceError::Protocol(format!(
                    "HELLO was answered with {}",
                    hello.raw
                )))
            }
        }
        self.say(&format!("device: {}", verdict(&hello.reply)))?;
        let mut started_run = None;
        if let Some(console) = &mut self.console {
            let started = console.command(&script.start_command(), &["started run", "error:"])?;
            if started.starts_with("error:") {
                return Err(DeviceError::Protocol(format!(
                    "the console refused `start`: {started}"
                )));
            }
            started_run = started
                .strip_prefix("started run ")
                .and_then(|rest| rest.split(':').next())
                .and_then(|n| n.parse::<u32>().ok());
            self.say(&format!("operator: {started}"))?;
        }
        let status = self.status()?;
        self.say(&format!("run {}: {}", status.run, status.text))?;
        match status.state.as_str() {
            "running" => {}
            "idle" => {
                return Err(DeviceError::Usage(
                    "the device has no run: the operator must type `start` on its console \
                     (or pass --console HOST:PORT --operator approve|deny)"
                        .into(),
                ))
            }
            other => {
                return Err(DeviceError::Usage(format!(
                    "the device's run has already stopped ({other}); the operator must `start` a new one"
                )))
            }
        }
        let run = status.run;
        if let Some(started) = started_run.filter(|n| *n != run) {
            return Err(DeviceError::Protocol(format!(
                "the console started run {started}, but the agent link reports run {run}"
            )));
        }

        let mut end = None;
        let mut step = status.decisions;
        for (index, proposal) in proposals.iter().enumerate() {
            let frame = request_frame("PROPOSE", Some(proposal.as_bytes()))?;
            let expected = Expected::proposal(proposal, run, step);
            let reply = self.agent.request(&frame, self.reply_timeout)?;
            if !matches!(reply.reply, DeviceReply::Error { .. }) {
                expected.check(&reply.reply).map_err(|why| {
                    DeviceError::Protocol(format!(
                        "proposal {index}: the reply does not belong to it: {why} \
                         (reply {}; expected {})",
                        reply.raw,
                        expected.describe()
                    ))
                })?;
            }
            let at_step = (!matches!(reply.reply, DeviceReply::Error { .. })).then_some(step);
            self.print_notes(at_step)?;
            self.record(&reply)?;
            let about = summary(proposal);
            let at = at_step.map_or_else(|| format!("proposal {index}"), |s| format!("step {s}"));
            self.say(&format!("{at}  {about} -> {}", verdict(&reply.reply)))?;
            match reply.reply {
                DeviceReply::Observation { .. } => {
                    // The round that uses the last decision is followed by
                    // its stop (PROTOCOL.md: decision-budget).
                    if u16::from(step) + 1 >= u16::from(status.max_decisions) {
                        let next = self.agent.receive_reply(self.reply_timeout)?;
                        let want = Expected::decision_budget_stop(run, step);
                        want.check(&next.reply).map_err(|why| {
                            DeviceError::Protocol(format!(
                                "proposal {index}: the reply after its observation does not \
                                 follow it: {why} (reply {}; expected {})",
                                next.raw,
                                want.describe()
                            ))
                        })?;
                        self.record(&next)?;
                        self.say(&format!("step {step}  {}", verdict(&next.reply)))?;
                        if let DeviceReply::Stopped { status, .. } = next.reply {
                            end = Some(status);
                        }
                        break;
                    }
                }
                DeviceReply::Stopped { status, .. } => {
                    end = Some(status);
                    break;
                }
                DeviceReply::Error { error } => match error.as_str() {
                    "run-stopped" => {
                        let text = self.status()?.text;
                        self.say(&format!("run: {text}"))?;
                        return Err(DeviceError::Protocol(format!(
                            "proposal {index}: the run had already stopped"
                        )));
                    }
                    other => {
                        return Err(DeviceError::Protocol(format!(
                            "proposal {index} was refused without a decision: {other}"
                        )))
                    }
                },
                _ => {
                    return Err(DeviceError::Protocol(format!(
                        "PROPOSE was answered with {}",
                        reply.raw
                    )))
                }
            }
            step = step.saturating_add(1);
        }
        let after = self.status()?;
        if after.run != run {
            return Err(DeviceError::Protocol(format!(
                "the device's run changed during the session: expected run {run}, got run {}",
                after.run
            )));
        }
        match &end {
            Some(status) => self.say(&format!("run stopped: {status} ({})", after.text))?,
            None => self.say(&format!(
                "the script ended with the run still open on the device ({})",
                after.text
            ))?,
        }
        self.say(&format!("actuators left: {}", actuators(after.actuators)))?;
        Ok(SessionEnd { status: end })
    }
}
