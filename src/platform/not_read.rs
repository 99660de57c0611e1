//! Why a credential file was not read: the one answer of
//! `platform::open_regular`/`read_regular` on every OS (Unix's
//! `platform::files`, Windows' `platform::windows::files`).

use std::io::{self, Read};
use std::path::Path;

/// The whole content of PATH, read as `platform::open_regular` opens it
/// (one definition for every OS: only the opening differs).
pub fn read_regular(path: &Path) -> Result<Vec<u8>, NotRead> {
    let (mut file, meta) = super::open_regular(path)?;
    let mut content = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(1 << 20));
    file.read_to_end(&mut content).map_err(NotRead::Io)?;
    Ok(content)
}

/// Why a credential file was not read.
#[derive(Debug)]
pub enum NotRead {
    /// It could not be opened or read (the OS error says why).
    Io(io::Error),
    /// It is not a regular file: what it is, in words (`a FIFO`).
    NotRegular(&'static str),
}

impl std::fmt::Display for NotRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotRead::Io(e) => write!(f, "{e}"),
            NotRead::NotRegular(what) => write!(
                f,
                "it is {what}, not a regular file (lockrun reads credentials only from regular files, so that it never waits on a FIFO or a device; copy the content into a file)"
            ),
        }
    }
}
