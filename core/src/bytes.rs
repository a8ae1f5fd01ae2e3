//! The core's one byte cursor, writer and checksum for its stored records
//! (the ledger's [`crate::budget::Record`], the device's run record and
//! audit entries, [`crate::resume`]): little-endian integers, every access
//! in bounds, CRC-32 (ISO-HDLC) last.

use core::marker::PhantomData;

use crate::ident::Identifier;

/// The records' checksum: CRC-32 (ISO-HDLC).
pub(crate) const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// A record's error, as the cursor and the writer report it.
pub(crate) trait Malformed {
    /// The bytes do not hold the fields: `len` is the buffer's length
    /// (reading) or where the write would end (writing).
    fn length(len: usize) -> Self;
    /// A field out of its range.
    fn field(what: &'static str) -> Self;
}

/// A cursor writing into a buffer; a write past its end is refused (`E`'s
/// [`Malformed::length`], at the end the write would reach).
pub(crate) struct Writer<'a, E> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) at: usize,
    error: PhantomData<E>,
}

impl<'a, E: Malformed> Writer<'a, E> {
    /// A writer at the start of `buf`.
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            at: 0,
            error: PhantomData,
        }
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) -> Result<(), E> {
        let end = self.at + bytes.len();
        self.buf
            .get_mut(self.at..end)
            .ok_or(E::length(end))?
            .copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }

    /// `text` as its length (a byte) and its bytes.
    pub(crate) fn text(&mut self, text: &str) -> Result<(), E> {
        let len = u8::try_from(text.len()).map_err(|_| E::field("identifier"))?;
        self.put(&[len])?;
        self.put(text.as_bytes())
    }
}

/// A cursor reading a buffer; a read past its end is refused (`E`'s
/// [`Malformed::length`], with the buffer's length).
pub(crate) struct Cursor<'a, E> {
    pub(crate) buf: &'a [u8],
    pub(crate) at: usize,
    error: PhantomData<E>,
}

impl<'a, E: Malformed> Cursor<'a, E> {
    /// A cursor at byte `at` of `buf`.
    pub(crate) const fn new(buf: &'a [u8], at: usize) -> Self {
        Self {
            buf,
            at,
            error: PhantomData,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], E> {
        let out = self
            .buf
            .get(self.at..self.at + n)
            .ok_or(E::length(self.buf.len()))?;
        self.at += n;
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, E> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, E> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, E> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    /// An identifier stored as its length (a byte) and its bytes; one that
    /// is not is the field `what`.
    pub(crate) fn ident(&mut self, what: &'static str) -> Result<Identifier, E> {
        let len = usize::from(self.u8()?);
        let bytes = self.take(len)?;
        core::str::from_utf8(bytes)
            .ok()
            .and_then(|t| Identifier::new(t).ok())
            .ok_or(E::field(what))
    }
    pub(crate) fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}
