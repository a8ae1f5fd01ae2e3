//! The stdio transport: [`serve`] runs the proxy between four pipes from
//! one thread that waits on them with `poll(2)`.

#[allow(unused_imports)]
use super::*;

/// How [`serve`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The client closed its stdin (or stopped reading) at `at`: the
    /// server's shutdown deadline counts from then.
    ClientClosed {
        /// When the gateway saw it.
        at: Instant,
    },
    /// The server closed its stdout or exited (`why`).
    ServerGone(String),
}

/// The wall clock in milliseconds (the ledger's clock).
pub(crate) fn now() -> u64 {
    crate::gate::clock::now_ms()
}

/// Bytes read from an input at a time.
const READ_CHUNK: usize = 1 << 16;

/// How long the stdio gateway lets an answered call wait for its commit
/// to join the next decision's transaction (one transaction per gated call
/// while calls follow each other, `docs/BENCHMARKS.md`), before it commits
/// it on its own. A crash in between leaves the call reserved, as a crash
/// while the server ran it does (the reservation's expiry gives it back):
/// this widens that window by at most this much.
pub const SETTLE_WAIT: Duration = Duration::from_millis(SETTLE_WAIT_MS);
const SETTLE_WAIT_MS: u64 = 1;

/// How long a commit that failed waits before it is made again by the
/// transport (the next decision makes it at once, and waits for it).
const SETTLE_RETRY: Duration = Duration::from_millis(250);

/// The gateway's pipes, driven from its one thread by `poll(2)`: the
/// client's stdin, the server's stdin (non-blocking, so the proxy never
/// waits on it: what it will not take yet waits in `backlog`) and stdout,
/// and the wake-up pipe of the terminal's answers.
#[cfg(unix)]
struct Pipes<CI, SI, SO> {
    client_in: CI,
    client: Lines,
    /// `None` once closed (the server's stdin closes with it).
    server_in: Option<SI>,
    /// Lines (newline included) for the server, oldest first; `sent`
    /// bytes of the first are written.
    backlog: VecDeque<Vec<u8>>,
    sent: usize,
    server_out: SO,
    server: Lines,
    wake: Option<std::io::PipeReader>,
    buf: Vec<u8>,
}

#[cfg(unix)]
impl<CI: AsFd, SI: AsFd, SO: AsFd> Pipes<CI, SI, SO> {
    /// Writes to the server what its stdin takes now, without waiting. A
    /// server that closed its stdin takes nothing more: its end comes as
    /// the end of its stdout.
    fn flush(&mut self) {
        let Some(server_in) = &self.server_in else {
            self.backlog.clear();
            return;
        };
        while let Some(front) = self.backlog.front() {
            match rustix::io::write(server_in, &front[self.sent..]) {
                Ok(n) => {
                    self.sent += n;
                    if self.sent == front.len() {
                        self.backlog.pop_front();
                        self.sent = 0;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return,
                Err(_) => {
                    self.backlog.clear();
                    self.sent = 0;
                }
            }
        }
    }

    fn send(&mut self, line: String) {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        self.backlog.push_back(bytes);
    }

    /// Waits at most `wait` for the server's output, room in its stdin
    /// while the backlog waits, the client's input (when `take_client`)
    /// or the terminal's wake-up, and reads one chunk from each input that
    /// is ready. `false`: nothing was ready within `wait`.
    fn wait(&mut self, wait: Duration, take_client: bool) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let client = take_client && !self.client.ended() && !self.client.has_next();
        let server = !self.server.ended();
        let room = !self.backlog.is_empty() && self.server_in.is_some();
        let mut fds = Vec::with_capacity(4);
        if server {
            fds.push(PollFd::new(&self.server_out, PollFlags::IN));
        }
        if client {
            fds.push(PollFd::new(&self.client_in, PollFlags::IN));
        }
        if let (true, Some(server_in)) = (room, &self.server_in) {
            fds.push(PollFd::new(server_in, PollFlags::OUT));
        }
        if let Some(wake) = &self.wake {
            fds.push(PollFd::new(wake, PollFlags::IN));
        }
        let timeout = rustix::event::Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => return false,
            Err(_) => return true,
            Ok(_) => {}
        }
        let mut ready = fds.iter().map(|fd| !fd.revents().is_empty());
        let server_ready = server && ready.next() == Some(true);
        let client_ready = client && ready.next() == Some(true);
        let _room = room && ready.next() == Some(true);
        let woken = self.wake.is_some() && ready.next() == Some(true);
        drop(fds);
        if server_ready {
            read_chunk(&self.server_out, &mut self.buf, &mut self.server);
        }
        if client_ready {
            read_chunk(&self.client_in, &mut self.buf, &mut self.client);
        }
        if woken {
            if let Some(wake) = &self.wake {
                let mut drained = [0u8; 64];
                match rustix::io::read(wake, &mut drained) {
                    Ok(1..) | Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    // The terminal's thread is gone (its end closed): no
                    // more answers come, and a closed pipe would wake every
                    // poll at once.
                    Ok(0) | Err(_) => self.wake = None,
                }
            }
        }
        true
    }
}

/// Reads one chunk of `input` into `lines`; its end (or an error reading
/// it) ends it.
#[cfg(unix)]
fn read_chunk(input: impl AsFd, buf: &mut [u8], lines: &mut Lines) {
    match rustix::io::read(input, &mut *buf) {
        Ok(n @ 1..) => lines.feed(&buf[..n]),
        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
        Ok(0) | Err(_) => lines.finish(),
    }
}

/// What [`serve`] takes next.
enum Event {
    Client(Line),
    ClientClosed,
    Server(Line),
    ServerClosed,
}

/// Runs `proxy` between the client (`client_in`, `client_out`) and the
/// server (`server_in`, `server_out`) until one side ends, from this one
/// thread: it waits on the pipes with `poll(2)`, so a message costs the
/// gateway one wake-up each way. `server_exited` is polled a few times a
/// second and tells whether (and how) the server process ended. When the
/// client closes its stdin (MCP's stdio shutdown), the server's stdin is
/// closed and what the server still answers to requests it was running is
/// relayed, through the proxy, until it closes its stdout or exits,
/// nothing is pending any more, or `shutdown` has passed; what is still
/// running then is counted.
///
/// The proxy never waits on the server's stdin (made non-blocking here):
/// what it does not take yet waits in a backlog (at most one client
/// message's worth), and while it waits no client message is taken, but
/// the server's output still is — so a server blocked writing its stdout
/// can always go on, and a client or server that floods only fills its own
/// pipe. At most one chunk of input (64 KiB) and one line ([`MAX_LINE`])
/// per side are held.
#[cfg(unix)]
#[allow(clippy::too_many_arguments)]
pub fn serve<G: CallGate>(
    proxy: &mut Proxy<G>,
    client_in: impl AsFd,
    client_out: &mut dyn Write,
    server_in: impl AsFd,
    server_out: impl AsFd,
    server_exited: &mut dyn FnMut() -> Option<String>,
    shutdown: Duration,
    terminal: Option<std::fs::File>,
) -> Ending {
    if let Err(e) = rustix::io::ioctl_fionbio(&server_in, true) {
        let why = format!("could not be written to without blocking ({e})");
        let _ = write_client(client_out, &proxy.on_server_exit(&why, now()));
        return Ending::ServerGone(why);
    }
    // The person at the terminal, asked when the client cannot be: each
    // answer is queued and wakes the poll through a pipe (non-blocking: a
    // full pipe means the gateway is woken already).
    let (person_tx, person_rx) = sync_channel::<(String, bool)>(CHANNEL_MESSAGES);
    let mut wake = None;
    let terminal = terminal.and_then(|tty| {
        let (reader, writer) = std::io::pipe().ok()?;
        rustix::io::ioctl_fionbio(&writer, true).ok()?;
        wake = Some(reader);
        Terminal::on(tty, move |eid, yes| {
            let _ = person_tx.send((eid, yes));
            let _ = rustix::io::write(&writer, &[1]);
        })
    });
    proxy.ask_on_terminal(terminal.is_some());
    let mut io = Pipes {
        client_in,
        client: Lines::new(MAX_LINE),
        server_in: Some(server_in),
        backlog: VecDeque::new(),
        sent: 0,
        server_out,
        server: Lines::new(MAX_LINE),
        wake,
        buf: vec![0; READ_CHUNK],
    };
    let mut exited_at: Option<(Instant, String)> = None;
    // Whether the last wait ended with nothing to read, and when the
    // server was last asked whether it exited (a `wait4` call): asked when
    // quiet or 50 ms after the last time, not on every message's way
    // through.
    let mut quiet = true;
    let mut asked = Instant::now();
    // Since when answered calls wait for their commit: the next
    // `tools/call` commits them in its decision's transaction, or they are
    // settled once they have waited SETTLE_WAIT.
    let mut unsettled_since: Option<Instant> = None;
    loop {
        match (proxy.unsettled(), unsettled_since) {
            (0, _) => unsettled_since = None,
            (_, None) => unsettled_since = Some(Instant::now()),
            (_, Some(since)) if since.elapsed() >= SETTLE_WAIT => {
                proxy.settle(now());
                // A commit that failed stays; made again after a pause
                // (or by the next decision, which waits for it).
                unsettled_since = (proxy.unsettled() > 0).then(|| Instant::now() + SETTLE_RETRY);
            }
            _ => {}
        }
        let mut person = Vec::new();
        while let Ok((eid, yes)) = person_rx.try_recv() {
            person.extend(proxy.on_person(&eid, yes, now()));
        }
        if proxy.next_deadline().is_some_and(|d| d <= now()) {
            person.extend(proxy.on_tick(now()));
        }
        if !person.is_empty() {
            let outs = to_terminal(proxy, terminal.as_ref(), person);
            for out in &outs {
                if let Out::Server(line) = out {
                    io.send(line.clone());
                }
            }
            if write_client(client_out, &outs).is_err() {
                proxy.on_client_closed(now());
                return Ending::ClientClosed { at: Instant::now() };
            }
        }
        io.flush();
        // The server's output first; the client's only while nothing
        // waits for the server's stdin.
        let event = if let Some(line) = io.server.take_line() {
            Some(Event::Server(line))
        } else if io.server.ended() {
            Some(Event::ServerClosed)
        } else if !io.backlog.is_empty() {
            None
        } else if let Some(line) = io.client.take_line() {
            Some(Event::Client(line))
        } else if io.client.ended() {
            Some(Event::ClientClosed)
        } else {
            None
        };
        let Some(event) = event else {
            // Nothing to do: a server that exited while something still
            // holds its stdout open gets a moment for its last lines.
            match &exited_at {
                None if quiet || asked.elapsed() >= Duration::from_millis(50) => {
                    asked = Instant::now();
                    if let Some(why) = server_exited() {
                        exited_at = Some((Instant::now(), why));
                    }
                }
                None => {}
                Some((at, why)) if at.elapsed() > Duration::from_millis(500) => {
                    let why = why.clone();
                    let outs = proxy.on_server_exit(&why, now());
                    let _ = write_client(client_out, &outs);
                    return Ending::ServerGone(why);
                }
                Some(_) => {}
            }
            let mut wait = proxy
                .next_deadline()
                .map_or(200, |d| d.saturating_sub(now()).clamp(1, 200));
            if let Some(since) = unsettled_since {
                let left = (since + SETTLE_WAIT).saturating_duration_since(Instant::now());
                wait = wait.min(u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
            }
            let take_client = io.backlog.is_empty();
            quiet = !io.wait(Duration::from_millis(wait), take_client);
            continue;
        };
        let outs = match event {
            Event::Client(Line::Text(line)) => proxy.on_client(&line, now()),
            Event::Client(Line::TooLong(_)) => proxy.on_client_too_long(),
            Event::ClientClosed => {
                let at = Instant::now();
                drain(proxy, client_out, &mut io, server_exited, at + shutdown);
                proxy.on_client_closed(now());
                return Ending::ClientClosed { at };
            }
            // Answered first; committed with the next decision, or once it
            // has waited SETTLE_WAIT (the top of the loop).
            Event::Server(Line::Text(line)) => proxy.on_server_unsettled(&line, now()),
            Event::Server(Line::TooLong(id)) => proxy.on_server_too_long(id.as_deref(), now()),
            Event::ServerClosed => {
                // A process that closed its stdout is usually exiting: give
                // it a moment, so the answer can name how it ended.
                let until = Instant::now() + Duration::from_millis(500);
                let why = loop {
                    if let Some(why) = server_exited() {
                        break why;
                    }
                    if Instant::now() >= until {
                        break "closed its stdout".to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
                let outs = proxy.on_server_exit(&why, now());
                if write_client(client_out, &outs).is_err() {
                    return Ending::ClientClosed { at: Instant::now() };
                }
                return Ending::ServerGone(why);
            }
        };
        let mut to_client = Vec::new();
        for out in to_terminal(proxy, terminal.as_ref(), outs) {
            match out {
                Out::Server(line) => io.send(line),
                client => to_client.push(client),
            }
        }
        // What the server can take now goes before the client's answer is
        // written, so neither waits on the other.
        io.flush();
        if write_client(client_out, &to_client).is_err() {
            proxy.on_client_closed(now());
            return Ending::ClientClosed { at: Instant::now() };
        }
    }
}

/// Off Unix the stdio gateway does not run (it waits on its pipes with
/// `poll(2)`): the server is reported gone at once and the gateway ends
/// with status 3 before it reads a message, so nothing reaches the server
/// ungated (fail closed). Not built or tested by this project's CI.
#[cfg(not(unix))]
#[allow(clippy::too_many_arguments)]
pub fn serve<G: CallGate, CI, SI, SO>(
    proxy: &mut Proxy<G>,
    _client_in: CI,
    client_out: &mut dyn Write,
    _server_in: SI,
    _server_out: SO,
    _server_exited: &mut dyn FnMut() -> Option<String>,
    _shutdown: Duration,
    _terminal: Option<std::fs::File>,
) -> Ending {
    let why = "could not be served: the stdio gateway needs poll(2) (Unix only)".to_owned();
    let _ = write_client(client_out, &proxy.on_server_exit(&why, now()));
    Ending::ServerGone(why)
}

/// After the client closed its stdin: writes what the server was still to
/// be sent, closes its stdin, and relays what it still sends (answers to
/// the requests it was running, through the proxy, so a call answered is
/// committed and its result bounded as ever) until it closes its stdout or
/// exits, no request is pending, the client stops reading, or `until`.
/// What the server asks of the client meanwhile is dropped: there is no
/// one to answer it.
#[cfg(unix)]
fn drain<G: CallGate, CI: AsFd, SI: AsFd, SO: AsFd>(
    proxy: &mut Proxy<G>,
    client_out: &mut dyn Write,
    io: &mut Pipes<CI, SI, SO>,
    server_exited: &mut dyn FnMut() -> Option<String>,
    until: Instant,
) {
    loop {
        io.flush();
        if io.backlog.is_empty() {
            // Dropping it closes the server's stdin.
            io.server_in = None;
        }
        if let Some(line) = io.server.take_line() {
            {
                let outs = match line {
                    Line::Text(line) => proxy.on_server_unsettled(&line, now()),
                    Line::TooLong(id) => proxy.on_server_too_long(id.as_deref(), now()),
                };
                let outs: Vec<Out> = outs
                    .into_iter()
                    .filter(|o| matches!(o, Out::Client(_)))
                    .collect();
                let written = write_client(client_out, &outs);
                proxy.settle(now());
                if written.is_err() {
                    return;
                }
            }
            continue;
        }
        if io.server.ended() || (io.server_in.is_none() && !proxy.awaits_server()) {
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        // A server that exited may have left a long answer in its pipe:
        // it is read to the end (or `until`); only 100 ms in which nothing
        // came ends the wait early.
        let came = io.wait(left.min(Duration::from_millis(100)), false);
        if !came && server_exited().is_some() {
            return;
        }
    }
}

/// Hands the terminal its part of `outs` (a question it cannot take is
/// refused at once, through the proxy) and returns the rest.
fn to_terminal<G: CallGate>(
    proxy: &mut Proxy<G>,
    terminal: Option<&Terminal>,
    outs: Vec<Out>,
) -> Vec<Out> {
    let mut rest = Vec::new();
    let mut todo: std::collections::VecDeque<Out> = outs.into();
    while let Some(out) = todo.pop_front() {
        match out {
            Out::Ask(q) => {
                if !terminal.is_some_and(|t| t.ask(q.eid.clone(), &q)) {
                    todo.extend(proxy.refuse_question(
                        &q.eid,
                        "not asked",
                        "the gateway's terminal could not take the question",
                        now(),
                    ));
                }
            }
            Out::Withdraw { eid, why } => {
                if let Some(t) = terminal {
                    t.withdraw(eid, &why);
                }
            }
            other => rest.push(other),
        }
    }
    rest
}

/// Writes the client's part of `outs` in one write (each line and its
/// newline together: a pipe's reader is woken once, and never sees half a
/// line followed by a pause).
fn write_client(client_out: &mut dyn Write, outs: &[Out]) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    for out in outs {
        if let Out::Client(line) = out {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
    }
    if !bytes.is_empty() {
        client_out.write_all(&bytes)?;
        client_out.flush()?;
    }
    Ok(())
}
