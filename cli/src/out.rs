//! Standard output that a reader may close early (`… | head`), and the exit
//! codes.
//!
//! A closed pipe is not an error: the first write that meets it marks
//! stdout closed, later writes are dropped, and the command finishes the
//! work that does not print (an upload goes on) and ends with the status a
//! shell gives a process that a closed pipe stopped, 141 (128 + SIGPIPE),
//! saying nothing.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// A failure, or damage found.
pub const FAILURE: u8 = 1;
/// The command line was wrong.
pub const USAGE: u8 = 2;
/// The session, store, archive or file named does not exist.
pub const NOT_FOUND: u8 = 3;
/// Standard output was closed by its reader.
pub const CLOSED_PIPE: u8 = 141;

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write met a closed standard output.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Writes to standard output; a closed pipe marks it closed and drops this
/// and every later write. Another failure (a full disk behind a
/// redirection) is returned.
pub fn write(args: fmt::Arguments<'_>) -> io::Result<()> {
    if closed() {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// A line to standard output (see [`write()`]); `?` passes on a failure
/// other than a closed pipe.
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Standard output as a writer, for code that writes through `io::Write`:
/// a closed pipe is taken as [`write()`] takes it.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if closed() {
            return Ok(buf.len());
        }
        match io::stdout().lock().write_all(buf) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                CLOSED.store(true, Ordering::Relaxed);
                Ok(buf.len())
            }
            Err(e) => Err(e),
            Ok(()) => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if closed() {
            return Ok(());
        }
        match io::stdout().lock().flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                CLOSED.store(true, Ordering::Relaxed);
                Ok(())
            }
            other => other,
        }
    }
}

/// A wrong command line that clap could not catch: exit code 2.
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Something named that does not exist: exit code 3.
#[derive(Debug)]
pub struct NotFound(pub String);

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not found: {}", self.0)
    }
}

impl std::error::Error for NotFound {}

/// A usage error, as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// A not-found error, as an `anyhow::Error`.
pub fn not_found(what: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(NotFound(what.into()))
}

/// The exit code of a command's failure.
pub fn code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<Usage>() {
            return USAGE;
        }
        if cause.is::<NotFound>() {
            return NOT_FOUND;
        }
        if let Some(session_store::Error::NotFound { .. }) = cause.downcast_ref() {
            return NOT_FOUND;
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::BrokenPipe {
                return CLOSED_PIPE;
            }
        }
        if let Some(session_store::Error::Io { source, .. }) = cause.downcast_ref() {
            if source.kind() == io::ErrorKind::BrokenPipe {
                return CLOSED_PIPE;
            }
        }
    }
    FAILURE
}
