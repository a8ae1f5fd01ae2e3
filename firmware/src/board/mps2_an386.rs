//! The Arm MPS2 boards as QEMU models them: the AN386 FPGA image
//! (Cortex-M4F, `qemu-system-arm -machine mps2-an386`), the AN385 image
//! (Cortex-M3, `-machine mps2-an385`) and the AN505 image (Cortex-M33,
//! `-machine mps2-an505`). QEMU builds AN385 and AN386 from the same code
//! (`hw/arm/mps2.c`): the same memory map, CMSDK APB UARTs, interrupt
//! numbers, FPGA I/O block and 25 MHz clock; only the CPU differs (the M3 has
//! no FPU and no DSP instructions, which the compiler's target takes care
//! of). The AN505 (`hw/arm/mps2-tz.c`) has the same CMSDK UARTs and FPGA I/O
//! block at other addresses (their secure aliases: the image runs in the
//! secure state the CPU boots in), other interrupt numbers and a 20 MHz
//! clock; `layout` holds what differs, and the cargo feature selects it.
//!
//! This is the only module of the firmware that may contain `unsafe`, and
//! only in the items marked `#[allow(unsafe_code)]` (the crate denies it).
//! Every `unsafe` site carries a `// SAFETY:` comment; there are eight:
//! volatile read, volatile write, the `InterruptNumber` impl, `NVIC::unmask`,
//! the two handlers cortex-m-rt requires to be `unsafe fn` (`HardFault`,
//! `DefaultHandler`), the vector table's interrupt half (`__INTERRUPTS`,
//! `no_mangle` in a linker section), and the stack high-water scan
//! (`stack_high_water`, which reads dead stack memory below the stack
//! pointer).
//!
//! Peripherals used (addresses from QEMU `hw/arm/mps2.c`, `hw/arm/mps2-tz.c`):
//!
//! | block | AN385/AN386 | AN505 (secure alias) | use |
//! | --- | --- | --- | --- |
//! | CMSDK APB UART0 | `0x4000_4000`, RX IRQ 0 | `0x5020_0000`, IRQs 32/33 | agent link (`-serial` #1), receive interrupt |
//! | CMSDK APB UART1 | `0x4000_5000`, RX IRQ 2 | `0x5020_1000`, IRQs 34/35 | operator console (`-serial` #2), wake-up only |
//! | FPGA I/O | `0x4002_8000` | `0x5030_2000` | LED register (+0x0, 2 LEDs), buttons (+0x8, 2 buttons) |
//! | SysTick | core, 25 MHz | core, 20 MHz | 1 kHz tick ([`SYSCLK_HZ`]) |
use core::cell::Cell;
use core::convert::Infallible;
use core::fmt;

use cortex_m::interrupt::InterruptNumber;
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::NVIC;
use cortex_m_rt::{exception, ExceptionFrame};
use critical_section::Mutex;
use embedded_hal::digital::{self, InputPin, OutputPin, StatefulOutputPin};

/// The board's name: its cargo feature, its line in `boards.txt`, the
/// console banner's `board=`.
#[cfg(feature = "mps2-an386")]
pub const NAME: &str = "mps2-an386";
/// The board's name: its cargo feature, its line in `boards.txt`, the
/// console banner's `board=`.
#[cfg(feature = "mps2-an385")]
pub const NAME: &str = "mps2-an385";
/// The board's name: its cargo feature, its line in `boards.txt`, the
/// console banner's `board=`.
#[cfg(feature = "mps2-an505")]
pub const NAME: &str = "mps2-an505";

/// Where the blocks are and how fast they run: AN385/AN386 (`hw/arm/mps2.c`).
#[cfg(not(feature = "mps2-an505"))]
mod layout {
    /// Core, SysTick (core source) and APB clock in Hz: QEMU's `SYSCLK_FRQ`.
    pub const SYSCLK_HZ: u32 = 25_000_000;
    pub const UART0_BASE: usize = 0x4000_4000;
    pub const UART1_BASE: usize = 0x4000_5000;
    pub const FPGAIO_BASE: usize = 0x4002_8000;
    /// UART0's receive interrupt (the agent link).
    pub const AGENT_IRQS: [u16; 1] = [0];
    /// UART1's receive interrupt (the console: a wake-up only).
    pub const CONSOLE_IRQS: [u16; 1] = [2];
    /// External interrupt lines of the NVIC (QEMU: `num-irq` 32).
    pub const IRQ_LINES: usize = 32;
}

/// Where the blocks are and how fast they run: AN505 (`hw/arm/mps2-tz.c`),
/// seen from the secure state the CPU boots in. The blocks sit behind the
/// IoT Kit's peripheral protection controllers, which after reset let only
/// secure transactions through, so the image uses the secure aliases
/// (address bit 28 set: 0x5xxx_xxxx for the peripherals).
#[cfg(feature = "mps2-an505")]
mod layout {
    /// Core, SysTick (core source) and APB clock in Hz: QEMU's AN505 `sysclk_frq`.
    pub const SYSCLK_HZ: u32 = 20_000_000;
    pub const UART0_BASE: usize = 0x5020_0000;
    pub const UART1_BASE: usize = 0x5020_1000;
    pub const FPGAIO_BASE: usize = 0x5030_2000;
    /// UART0's two interrupt lines (QEMU wires TX and RX to 32 and 33);
    /// both are handled as receive (the TX interrupt is never enabled).
    pub const AGENT_IRQS: [u16; 2] = [32, 33];
    /// UART1's two lines, wake-ups only.
    pub const CONSOLE_IRQS: [u16; 2] = [34, 35];
    /// External interrupt lines of the NVIC (QEMU: the IoT Kit's 32 and
    /// the AN505's 92).
    pub const IRQ_LINES: usize = 124;
}

pub use layout::SYSCLK_HZ;
use layout::{AGENT_IRQS, CONSOLE_IRQS, FPGAIO_BASE, UART0_BASE, UART1_BASE};
/// Nominal UART baud rate programmed into BAUDDIV (QEMU only checks `BAUDDIV >= 16`;
/// bytes move as fast as the TCP socket takes them).
pub const UART_BAUD: u32 = 115_200;
/// Number of user LEDs (actuator outputs) in the FPGA I/O LED register.
pub const LED_COUNT: u8 = 2;
/// Number of user push buttons in the FPGA I/O BUTTON register.
pub const BUTTON_COUNT: u8 = 2;
/// QEMU exit status after a Rust panic (see `main.rs`).
pub const EXIT_PANIC: i32 = 101;
/// QEMU exit status after a HardFault or an unexpected exception/interrupt.
pub const EXIT_FAULT: i32 = 102;

const LED_MASK: u32 = (1 << LED_COUNT) - 1;
const BUTTON_MASK: u32 = (1 << BUTTON_COUNT) - 1;

/// Raw register access. `Reg` can only be built from the address constants of
/// this file, which is what makes the safe `read`/`write` wrappers sound.
#[allow(unsafe_code)]
mod mmio {
    /// One 32-bit memory-mapped device register of this board.
    #[derive(Clone, Copy)]
    pub(super) struct Reg(usize);

    impl Reg {
        pub(super) const fn at(addr: usize) -> Self {
            Self(addr)
        }

        #[inline(always)]
        pub(super) fn read(self) -> u32 {
            // SAFETY: every `Reg` is built (in this file only) from a 4-byte
            // aligned address of a device register of the AN386 that is always
            // mapped; it is MMIO, never memory the Rust abstract machine owns or
            // that a reference points to, so a volatile read cannot alias or
            // invalidate anything. Read side effects (e.g. DATA clearing RXFULL)
            // are device state, not memory safety.
            unsafe { core::ptr::read_volatile(self.0 as *const u32) }
        }

        #[inline(always)]
        pub(super) fn write(self, value: u32) {
            // SAFETY: as for `read`: an aligned, always-mapped device register
            // outside Rust-owned memory; the write only changes device state.
            unsafe { core::ptr::write_volatile(self.0 as *mut u32, value) }
        }
    }
}
use mmio::Reg;

// ---------------------------------------------------------------- UART -----

const UART_DATA: usize = 0x00;
const UART_STATE: usize = 0x04;
const UART_CTRL: usize = 0x08;
const UART_INTSTATUS: usize = 0x0C; // INTCLEAR on write (write 1 to clear)
const UART_BAUDDIV: usize = 0x10;

const STATE_TXFULL: u32 = 1 << 0;
const STATE_RXFULL: u32 = 1 << 1;
const STATE_TXOVERRUN: u32 = 1 << 2;
const STATE_RXOVERRUN: u32 = 1 << 3;

const CTRL_TX_EN: u32 = 1 << 0;
const CTRL_RX_EN: u32 = 1 << 1;
const CTRL_RX_INTEN: u32 = 1 << 3;

const INT_RX: u32 = 1 << 1;

/// A receive error of a [`Uart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum UartError {
    /// A byte arrived while the previous one was still unread: at least one
    /// byte was lost. (Never happens under QEMU, which holds input back.)
    RxOverrun,
}

impl fmt::Display for UartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RxOverrun => f.write_str("uart rx overrun"),
        }
    }
}

impl core::error::Error for UartError {}

impl embedded_io::Error for UartError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

/// A CMSDK APB UART (8N1, one-byte RX and TX holding registers).
///
/// UART0's (the agent link's) received bytes are taken by its RX interrupt
/// into the receive queue (`crate::rx`): do not read them here. UART1's RX
/// interrupt only wakes the core from `WFI` ([`wait_for_interrupt_unless`]);
/// its bytes are read by polling.
/// `embedded_io::Read::read` blocks until at least one byte is there; use
/// [`Uart::try_read_byte`] or `ReadReady` to avoid blocking.
pub struct Uart {
    base: usize,
}

impl Uart {
    fn init(base: usize) -> Self {
        let uart = Self { base };
        uart.reg(UART_CTRL).write(0);
        uart.reg(UART_BAUDDIV).write(SYSCLK_HZ / UART_BAUD);
        uart.reg(UART_STATE)
            .write(STATE_TXOVERRUN | STATE_RXOVERRUN); // W1C
        uart.reg(UART_INTSTATUS).write(0xF); // W1C
        uart.reg(UART_CTRL)
            .write(CTRL_TX_EN | CTRL_RX_EN | CTRL_RX_INTEN);
        uart
    }

    #[inline(always)]
    fn reg(&self, offset: usize) -> Reg {
        Reg::at(self.base + offset)
    }

    /// True if a received byte is waiting.
    pub fn rx_ready(&self) -> bool {
        self.reg(UART_STATE).read() & STATE_RXFULL != 0
    }

    /// True if the transmit holding register can take a byte.
    pub fn tx_ready(&self) -> bool {
        self.reg(UART_STATE).read() & STATE_TXFULL == 0
    }

    /// Takes the received byte, if any, without blocking. An overrun is
    /// reported (once) before the byte that follows it.
    pub fn try_read_byte(&mut self) -> Result<Option<u8>, UartError> {
        let state = self.reg(UART_STATE).read();
        if state & STATE_RXOVERRUN != 0 {
            self.reg(UART_STATE).write(STATE_RXOVERRUN);
            return Err(UartError::RxOverrun);
        }
        if state & STATE_RXFULL == 0 {
            return Ok(None);
        }
        Ok(Some((self.reg(UART_DATA).read() & 0xFF) as u8))
    }

    /// Puts a byte into the transmit register if it is free; false if busy.
    pub fn try_write_byte(&mut self, byte: u8) -> bool {
        if !self.tx_ready() {
            return false;
        }
        self.reg(UART_DATA).write(u32::from(byte));
        true
    }

    /// Sends a byte, spinning while the transmit register is busy.
    pub fn write_byte(&mut self, byte: u8) {
        while !self.try_write_byte(byte) {
            core::hint::spin_loop();
        }
    }
}

impl embedded_io::ErrorType for Uart {
    type Error = UartError;
}

impl embedded_io::Read for Uart {
    /// Blocks until at least one byte (or an overrun error) is there, then
    /// returns the bytes available without waiting. A pending overrun after
    /// the first byte ends the read early and is reported by the next call.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, UartError> {
        let mut n = 0;
        for slot in buf.iter_mut() {
            let state = self.reg(UART_STATE).read();
            if n > 0 && (state & STATE_RXOVERRUN != 0 || state & STATE_RXFULL == 0) {
                break;
            }
            *slot = loop {
                match self.try_read_byte()? {
                    Some(byte) => break byte,
                    None => core::hint::spin_loop(),
                }
            };
            n += 1;
        }
        Ok(n)
    }
}

impl embedded_io::ReadReady for Uart {
    fn read_ready(&mut self) -> Result<bool, UartError> {
        Ok(self.rx_ready())
    }
}

impl embedded_io::Write for Uart {
    // Both out of line: the gate and the console write from about 80
    // places, and inlined each carried its own copy of the polling loop
    // (1.2 KiB of flash in all). A call costs a few instructions per write,
    // next to the 86 µs a byte takes on the wire.
    #[inline(never)]
    fn write(&mut self, buf: &[u8]) -> Result<usize, UartError> {
        self.write_all(buf).map(|()| buf.len())
    }

    #[inline(never)]
    fn write_all(&mut self, buf: &[u8]) -> Result<(), UartError> {
        for &byte in buf {
            self.write_byte(byte);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), UartError> {
        while !self.tx_ready() {
            core::hint::spin_loop();
        }
        Ok(())
    }
}

impl embedded_io::WriteReady for Uart {
    fn write_ready(&mut self) -> Result<bool, UartError> {
        Ok(self.tx_ready())
    }
}

// ------------------------------------------------------------ FPGA I/O -----

const FPGAIO_LED: Reg = Reg::at(FPGAIO_BASE);
const FPGAIO_BUTTON: Reg = Reg::at(FPGAIO_BASE + 0x08);

/// Reads the FPGA I/O LED register back from the hardware (bit n = LED n; not
/// a shadow copy): what the actuators are actually driven to.
pub fn read_leds() -> u32 {
    FPGAIO_LED.read() & LED_MASK
}

/// Drives every LED (actuator) low. Used on the fail-safe paths (panic, fault).
pub fn all_leds_off() {
    FPGAIO_LED.write(0);
}

/// Reads the FPGA I/O BUTTON register (bit n = button n pressed). QEMU does not
/// model the buttons: it always reads 0.
pub fn read_buttons() -> u32 {
    FPGAIO_BUTTON.read() & BUTTON_MASK
}

/// One user LED of the FPGA I/O block: an actuator output.
///
/// `StatefulOutputPin::is_set_high` reads the hardware register back.
pub struct Led {
    mask: u32,
}

impl digital::ErrorType for Led {
    type Error = Infallible;
}

impl OutputPin for Led {
    fn set_low(&mut self) -> Result<(), Infallible> {
        // Read-modify-write: only thread mode writes LEDs (plus fail-safe paths
        // that never return), so there is no lost update.
        FPGAIO_LED.write(FPGAIO_LED.read() & !self.mask & LED_MASK);
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Infallible> {
        FPGAIO_LED.write((FPGAIO_LED.read() | self.mask) & LED_MASK);
        Ok(())
    }
}

impl StatefulOutputPin for Led {
    fn is_set_high(&mut self) -> Result<bool, Infallible> {
        Ok(FPGAIO_LED.read() & self.mask != 0)
    }

    fn is_set_low(&mut self) -> Result<bool, Infallible> {
        Ok(FPGAIO_LED.read() & self.mask == 0)
    }
}

/// One user push button of the FPGA I/O block: the placeholder approval input.
pub struct Button {
    mask: u32,
}

impl digital::ErrorType for Button {
    type Error = Infallible;
}

impl InputPin for Button {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        Ok(FPGAIO_BUTTON.read() & self.mask != 0)
    }

    fn is_low(&mut self) -> Result<bool, Infallible> {
        Ok(FPGAIO_BUTTON.read() & self.mask == 0)
    }
}

// ---------------------------------------------------------------- time -----

static MILLIS: Mutex<Cell<u64>> = Mutex::new(Cell::new(0));

#[exception]
fn SysTick() {
    critical_section::with(|cs| {
        let ms = MILLIS.borrow(cs);
        ms.set(ms.get().wrapping_add(1));
    });
}

/// Milliseconds since [`Board::take`] started SysTick (monotonic; 0 before).
pub fn now_ms() -> u64 {
    critical_section::with(|cs| MILLIS.borrow(cs).get())
}

/// SysTick reload value: one interrupt per millisecond of the core clock.
const SYST_RELOAD: u32 = SYSCLK_HZ / 1_000 - 1;

/// Core clock ticks ([`SYSCLK_HZ`]) since [`Board::take`]: the
/// millisecond count plus the SysTick counter's progress in the current
/// millisecond. For measuring short intervals (a gated action); under QEMU
/// with `-icount shift=0` one tick is 1e9 / SYSCLK_HZ guest instructions
/// (40 at 25 MHz).
pub fn clock_ticks() -> u64 {
    critical_section::with(|cs| {
        let ms = MILLIS.borrow(cs).get();
        let current = cortex_m::peripheral::SYST::get_current();
        // The counter may have wrapped inside this critical section: its
        // interrupt is then pending and the millisecond not counted yet.
        let owed = cortex_m::peripheral::SCB::is_pendst_pending() && current > SYST_RELOAD / 2;
        let ms = ms + u64::from(owed);
        ms * u64::from(SYST_RELOAD + 1) + u64::from(SYST_RELOAD - current)
    })
}

defmt::timestamp!("{=u64:ms}", now_ms());

// ------------------------------------------------------- interrupts/idle -----

/// The interrupt half of the vector table (cortex-m-rt's `device` feature):
/// one entry per external interrupt line of the board, each the default
/// handler, which serves the UART interrupts and faults on any other.
/// Sized to the board instead of cortex-m-rt's generic 240 (480 on
/// ARMv8-M) entries: 832 bytes less flash on AN385/AN386, 1 424 on AN505.
#[allow(unsafe_code)]
// SAFETY: cortex-m-rt's linker script expects exactly this symbol in this
// section when its `device` feature is on (as a PAC would define it), and
// places it right after the exception vectors; nothing else has the name.
// `DefaultHandler` is the handler cortex-m-rt defines from ours below.
#[unsafe(link_section = ".vector_table.interrupts")]
#[unsafe(no_mangle)]
static __INTERRUPTS: [unsafe extern "C" fn(); layout::IRQ_LINES] = [{
    unsafe extern "C" {
        fn DefaultHandler();
    }
    DefaultHandler
}; layout::IRQ_LINES];

/// A device interrupt this firmware enables: only built from
/// [`AGENT_IRQS`] and [`CONSOLE_IRQS`].
#[derive(Clone, Copy)]
struct Irq(u16);

#[allow(unsafe_code)]
// SAFETY: `number` returns the number an `Irq` was built with, which is
// always one of the UART interrupt numbers of `layout`, valid external
// interrupts of this board (QEMU's AN385/AN386 NVIC has 32 lines, the
// AN505's 92).
unsafe impl InterruptNumber for Irq {
    fn number(self) -> u16 {
        self.0
    }
}

/// Sleeps (`WFI`) until the next interrupt unless `pending()` is already true.
///
/// The check and the `WFI` run with interrupts masked, so a byte that arrives
/// between them still wakes the core (a pending interrupt ends `WFI` even when
/// masked). Wake-ups: UART0/UART1 RX and the 1 ms SysTick.
pub fn wait_for_interrupt_unless(pending: impl FnOnce() -> bool) {
    critical_section::with(|_| {
        if !pending() {
            cortex_m::asm::wfi();
        }
    });
}

// --------------------------------------------------------------- stack -----

/// The word cortex-m-rt's `paint-stack` feature fills the stack with at reset.
const STACK_PAINT: u32 = 0xCCCC_CCCC;

/// The deepest the stack has reached since reset, in bytes, when the image
/// was built with the `stack-paint` feature (cortex-m-rt then paints the
/// whole stack region at reset); `None` otherwise. Scans up from the bottom
/// of the stack region to the first word that is no longer paint, never past
/// the current stack pointer, so it takes a few milliseconds (the region is
/// the rest of the 4 MiB RAM).
#[allow(unsafe_code)]
pub fn stack_high_water() -> Option<u32> {
    extern "C" {
        static _stack_end: u32;
        static _stack_start: u32;
    }
    if !cfg!(feature = "stack-paint") {
        return None;
    }
    let bottom = core::ptr::addr_of!(_stack_end) as usize;
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let sp = cortex_m::register::msp::read() as usize;
    let mut addr = bottom;
    while addr < sp.min(top) {
        // SAFETY: `addr` is word-aligned (both linker symbols are, and it
        // moves in steps of 4) and lies in the stack region of mapped RAM,
        // below the current stack pointer: memory of returned frames that no
        // live Rust object or reference occupies. A volatile read of it
        // cannot alias or invalidate anything.
        let word = unsafe { core::ptr::read_volatile(addr as *const u32) };
        if word != STACK_PAINT {
            break;
        }
        addr += 4;
    }
    u32::try_from(top - addr).ok()
}

/// Ends the program. Under QEMU (semihosting enabled) QEMU exits with status
/// `code`; on a board without a debugger attached this faults and locks up.
pub fn exit(code: i32) -> ! {
    semihosting::process::exit(code)
}

/// Most bytes one UART0 RX interrupt takes; more wait for the next one (the
/// interrupt is raised again by the next byte's arrival).
const RX_PER_INTERRUPT: usize = 64;

/// UART0 RX: acknowledges the interrupt, then moves every received byte into
/// the agent link's receive queue (`crate::rx::received`), reporting the
/// UART's own overrun flag (`crate::rx::overrun`). Acknowledged first, so a
/// byte that arrives while this runs raises it again.
fn agent_rx_interrupt() {
    let uart = UART0_BASE;
    Reg::at(uart + UART_INTSTATUS).write(INT_RX);
    for _ in 0..RX_PER_INTERRUPT {
        let state = Reg::at(uart + UART_STATE).read();
        if state & STATE_RXOVERRUN != 0 {
            Reg::at(uart + UART_STATE).write(STATE_RXOVERRUN); // W1C
            crate::rx::overrun();
        }
        if state & STATE_RXFULL == 0 {
            return;
        }
        crate::rx::received((Reg::at(uart + UART_DATA).read() & 0xFF) as u8);
    }
}

// SAFETY: cortex-m-rt requires this signature to be `unsafe fn` (whatever it
// defines is called by hardware for every unhandled interrupt); the body does
// nothing unsafe.
#[allow(unsafe_code)]
#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    let irq = u16::try_from(irqn).ok();
    match irq {
        Some(n) if AGENT_IRQS.contains(&n) => agent_rx_interrupt(),
        // Only a wake-up: acknowledge the RX interrupt (level in QEMU) and
        // let thread mode read the byte.
        Some(n) if CONSOLE_IRQS.contains(&n) => Reg::at(UART1_BASE + UART_INTSTATUS).write(INT_RX),
        _ => {
            all_leds_off();
            defmt::error!("unexpected exception or interrupt {=i16}", irqn);
            exit(EXIT_FAULT)
        }
    }
}

// SAFETY: cortex-m-rt requires this signature to be `unsafe fn`; the body
// does nothing unsafe (it reads the stacked frame cortex-m-rt passes in).
#[allow(unsafe_code)]
#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    all_leds_off();
    defmt::error!(
        "HardFault: pc={=u32:#010x} lr={=u32:#010x}",
        frame.pc(),
        frame.lr()
    );
    exit(EXIT_FAULT)
}

// --------------------------------------------------------------- board -----

/// Everything the application gets from the board, handed out once.
pub struct Board {
    /// UART0: the link to the AI agent (first `-serial` of QEMU).
    pub agent: Uart,
    /// UART1: the operator console (second `-serial` of QEMU).
    pub console: Uart,
    /// FPGA I/O LED 0 (actuator 0).
    pub led0: Led,
    /// FPGA I/O LED 1 (actuator 1).
    pub led1: Led,
    /// FPGA I/O button 0 (placeholder approval input).
    #[allow(dead_code, reason = "approval input for the gate integration")]
    pub button0: Button,
    /// FPGA I/O button 1.
    #[allow(dead_code, reason = "approval input for the gate integration")]
    pub button1: Button,
}

impl Board {
    /// Initialises the board (UARTs on, LEDs off, 1 kHz SysTick, UART RX
    /// wake-up interrupts) and hands out its parts. `None` after the first call.
    pub fn take() -> Option<Self> {
        // Not `AtomicBool::swap`: a Cortex-M0 (`thumbv6m`) has no atomic
        // read-modify-write; a critical section does the same on one core.
        static TAKEN: Mutex<Cell<bool>> = Mutex::new(Cell::new(false));
        if critical_section::with(|cs| TAKEN.borrow(cs).replace(true)) {
            return None;
        }
        let core = cortex_m::Peripherals::take()?;

        all_leds_off();
        let agent = Uart::init(UART0_BASE);
        let console = Uart::init(UART1_BASE);

        let mut syst = core.SYST;
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(SYST_RELOAD);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();

        #[allow(unsafe_code)]
        // SAFETY: unmasking can break critical sections that rely on these
        // interrupts being masked; none does. Their handler (DefaultHandler,
        // the UART interrupts of `layout`) writes the UART INTCLEAR register, and for UART0
        // reads the UART and pushes into the receive queue, which it shares
        // with thread mode only through a `critical_section::Mutex` and the
        // queue's own single-producer, single-consumer atomics.
        unsafe {
            for n in AGENT_IRQS.into_iter().chain(CONSOLE_IRQS) {
                NVIC::unmask(Irq(n));
            }
        }

        Some(Self {
            agent,
            console,
            led0: Led { mask: 1 << 0 },
            led1: Led { mask: 1 << 1 },
            button0: Button { mask: 1 << 0 },
            button1: Button { mask: 1 << 1 },
        })
    }
}
