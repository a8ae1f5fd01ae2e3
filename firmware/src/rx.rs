//! Interrupt-driven receive of the agent link (UART0) into a ring buffer.
//!
//! The board's UART0 RX interrupt takes every byte out of the UART as it
//! arrives and calls [`received`] (or [`overrun`] when the UART itself lost
//! bytes); the bytes wait in a `heapless::spsc` queue of [`AGENT_RX_QUEUE`]
//! entries (the producer in the interrupt, the consumer in the main loop),
//! so the link is received while a reply is being written and while an
//! approval is pending. The main loop decodes frames from the queue with a
//! [`LinkDecoder`]; while a call waits for approval it decodes nothing, so
//! the frames behind it stay queued and are answered after it, in order.
//!
//! **Overrun.** A byte that finds the queue full is dropped, and so is every
//! byte after it until the queue has room again; the first loss counts one
//! overrun ([`overruns`]; the console's `status` reports it with the bytes
//! lost, [`lost_bytes`]). Where the bytes were lost, a [`LOST`] marker enters
//! the queue in their place: the frame it falls in — every byte from the
//! loss to the next line end the device receives — is answered
//! `bad-checksum` whatever its checksum says, so a damaged frame never
//! reaches a decision (`docs/FIRMWARE.md`, "Receive").
#![forbid(unsafe_code)]

use core::cell::RefCell;
use core::sync::atomic::{AtomicU32, Ordering};

use budgetgate_core::link::{FrameDecoder, FrameError};
use critical_section::Mutex;
use heapless::spsc::{Consumer, Producer, Queue};

use crate::config::{AGENT_RX_QUEUE, FRAME_MAX};

/// The queue entry that stands for lost bytes (a received byte is 0..=255).
const LOST: u16 = 0x100;

/// The agent link's receive queue: [`AGENT_RX_QUEUE`] entries of 16 bits (a
/// byte, or [`LOST`]), of which `AGENT_RX_QUEUE - 1` can be in use.
pub type RxQueue = Queue<u16, AGENT_RX_QUEUE>;

/// The interrupt's side of the queue. All zero until [`install`] (so the
/// static needs no initializer image in flash).
struct Receiver {
    producer: Option<Producer<'static, u16>>,
    /// Bytes were lost and the marker is not in the queue yet.
    losing: bool,
}

impl Receiver {
    fn push(&mut self, byte: u8) {
        let Some(producer) = self.producer.as_mut() else {
            add(&LOST_BYTES, 1);
            return;
        };
        if self.losing {
            // The marker, then the byte, or neither.
            if producer.capacity() - producer.len() < 2 {
                add(&LOST_BYTES, 1);
                return;
            }
            let _ = producer.enqueue(LOST);
            self.losing = false;
        }
        if producer.enqueue(u16::from(byte)).is_err() {
            self.lose(1);
        }
    }

    fn lose(&mut self, bytes: u32) {
        add(&LOST_BYTES, bytes);
        if !self.losing {
            self.losing = true;
            add(&OVERRUNS, 1);
        }
    }
}

static RECEIVER: Mutex<RefCell<Receiver>> = Mutex::new(RefCell::new(Receiver {
    producer: None,
    losing: false,
}));
static OVERRUNS: AtomicU32 = AtomicU32::new(0);
static LOST_BYTES: AtomicU32 = AtomicU32::new(0);

/// Adds to a counter only the interrupt writes (load and store: no
/// compare-and-swap, which a Cortex-M0 lacks); saturates.
fn add(counter: &AtomicU32, n: u32) {
    counter.store(
        counter.load(Ordering::Relaxed).saturating_add(n),
        Ordering::Relaxed,
    );
}

/// Splits `queue` and hands its producer to the receive interrupt; the
/// consumer is the main loop's. Call once, before the board enables the
/// interrupt (a byte that arrives before counts as lost).
pub fn install(queue: &'static mut RxQueue) -> Consumer<'static, u16> {
    let (producer, consumer) = queue.split();
    critical_section::with(|cs| {
        RECEIVER.borrow(cs).replace(Receiver {
            producer: Some(producer),
            losing: false,
        });
    });
    consumer
}

/// Called by the UART0 RX interrupt with each byte it took from the UART.
pub fn received(byte: u8) {
    critical_section::with(|cs| match RECEIVER.borrow(cs).try_borrow_mut() {
        Ok(mut receiver) => receiver.push(byte),
        Err(_) => add(&LOST_BYTES, 1),
    });
}

/// Called by the UART0 RX interrupt when the UART reports that it lost
/// bytes (its overrun flag: at least one, counted as one).
pub fn overrun() {
    critical_section::with(|cs| {
        if let Ok(mut receiver) = RECEIVER.borrow(cs).try_borrow_mut() {
            receiver.lose(1);
        }
    });
}

/// Overruns since boot: times bytes were lost (one per run of lost bytes).
pub fn overruns() -> u32 {
    OVERRUNS.load(Ordering::Relaxed)
}

/// Bytes lost since boot (a UART overrun counts one, at least that many).
pub fn lost_bytes() -> u32 {
    LOST_BYTES.load(Ordering::Relaxed)
}

/// The core's [`FrameDecoder`] fed from the receive queue, with the
/// overrun rule: a frame that lost bytes is `bad-checksum`.
pub struct LinkDecoder {
    decoder: FrameDecoder<FRAME_MAX>,
    damaged: bool,
}

impl LinkDecoder {
    /// An empty decoder (`const`, for a `static`).
    pub const fn new() -> Self {
        Self {
            decoder: FrameDecoder::new(),
            damaged: false,
        }
    }

    /// Feeds one queue entry. At a line end, the verified payload or why
    /// the line is not a frame, as [`FrameDecoder::push`]; a line that lost
    /// bytes is `Err(BadChecksum)`, even an empty one (a frame was there).
    pub fn push(&mut self, entry: u16) -> Option<Result<&[u8], FrameError>> {
        let Ok(byte) = u8::try_from(entry) else {
            self.damaged = true;
            return None;
        };
        let frame = self.decoder.push(byte);
        if byte == b'\n' && core::mem::take(&mut self.damaged) {
            return Some(Err(FrameError::BadChecksum));
        }
        frame
    }
}
