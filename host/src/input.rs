//! Bounded reading of input files: nothing a user hands the command line is
//! read whole before its size is known to be within a limit.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

/// Why an input could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file or stream could not be opened or read.
    Io(std::io::Error),
    /// The input is longer than the limit; it was not read whole.
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
}

/// The name a path is reported under: `<stdin>` for `-`.
pub fn display_name(path: &Path) -> Cow<'_, str> {
    if path == Path::new("-") {
        Cow::Borrowed("<stdin>")
    } else {
        path.to_string_lossy()
    }
}

/// Reads at most `limit` bytes from `reader`: it reads `limit + 1` bytes at
/// most, so an endless input (`/dev/zero`) is refused without being read whole.
pub fn read_bounded(reader: impl Read, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// Reads the file at `path` (`-`: standard input) of at most `limit` bytes.
/// A regular file known to be larger is refused before reading; a FIFO
/// (whose opening would wait for a writer forever), a socket or a directory
/// is refused before it is opened. A device is read, bounded (`/dev/zero` is
/// refused as too large once `limit` bytes are read).
pub fn read_path(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    if path == Path::new("-") {
        return read_bounded(std::io::stdin().lock(), limit);
    }
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    if waits_or_is_no_file(&meta) {
        return Err(ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file that can be read (a FIFO, a socket or a directory); give - to read standard input",
        )));
    }
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    if file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() > limit)
    {
        return Err(ReadError::TooLarge { limit });
    }
    read_bounded(file, limit)
}

/// A directory, a FIFO or a socket: what [`read_path`] refuses to open.
fn waits_or_is_no_file(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        kind.is_dir() || kind.is_fifo() || kind.is_socket()
    }
    #[cfg(not(unix))]
    {
        meta.is_dir()
    }
}

/// The read bytes as UTF-8 text, or the one-line reason they are not.
pub(crate) fn text_of(read: Result<Vec<u8>, ReadError>, what: &str) -> Result<String, String> {
    let bytes = read.map_err(|e| match e {
        ReadError::Io(e) => format!("cannot read: {e}"),
        ReadError::TooLarge { limit } => format!(
            "larger than {} MiB, the limit for {what}; refused",
            limit >> 20
        ),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (an invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}
