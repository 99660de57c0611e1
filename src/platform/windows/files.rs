//! Reading credential files (`platform::files` on Unix) and the small
//! files `--metrics-file` writes (`platform::small_files`), with the Unix
//! signatures. Windows has no FIFOs in the file system's namespace nor
//! Unix permission bits: a credential file is read if it is a regular
//! file, and a replaced metrics file keeps the default access of its
//! directory (its ACL), which Windows gives a new file.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::path::Path;

pub use crate::platform::not_read::NotRead;

/// Opens PATH for reading if it is a regular file (through links), with
/// its metadata, read from the open handle.
pub fn open_regular(path: &Path) -> Result<(File, Metadata), NotRead> {
    let file = File::open(path).map_err(NotRead::Io)?;
    let meta = file.metadata().map_err(NotRead::Io)?;
    if meta.is_dir() {
        return Err(NotRead::NotRegular("a directory"));
    }
    if !meta.is_file() {
        return Err(NotRead::NotRegular("not a regular file"));
    }
    Ok((file, meta))
}

/// Whether others than the owner may read a credential file (a warning on
/// Unix): Windows' answer is an ACL, which lockrun does not judge.
pub fn others_may_access(_meta: &Metadata) -> bool {
    false
}

/// Opens an existing file for reading, or with `create` makes it empty
/// when missing.
pub fn open_without_waiting(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .open(path)
}

/// Creates `path` new, never opening what is there.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).open(path)
}

/// Whether two metadata name the same file. std gives no file index from
/// a path's metadata on stable Rust: the creation time and length stand
/// in, which tell a renamed-over replacement apart from the file itself.
pub fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::windows::fs::MetadataExt;
    a.creation_time() == b.creation_time() && a.file_size() == b.file_size()
}

/// Where a file is, as far as its metadata tells (see [`same_file`]).
pub fn file_id(meta: &Metadata) -> (u64, u64) {
    use std::os::windows::fs::MetadataExt;
    (meta.creation_time(), meta.file_size())
}

/// No permission bits on Windows: the replacement gets its directory's
/// default access.
pub fn permission_bits(_meta: &Metadata) -> u32 {
    0o644
}

pub fn set_permission_bits(_file: &File, _bits: u32) -> io::Result<()> {
    Ok(())
}

/// `--log syslog|journal` is refused on Windows before a run starts; no
/// datagram is ever sent.
pub fn send_datagram(_path: &Path, _datagram: &[u8]) {}

/// Where `--metrics-file PATH`'s updates lock. Not PATH itself, as on
/// Unix: Windows (and Wine) refuses to rename a file over one that is
/// open, so a writer holding PATH's lock could never replace it. A
/// hidden `DIR/.NAME.lock` beside it, never renamed, is the lock instead;
/// the collector reads only `*.prom` files, so it never reads this one.
pub fn metrics_lock_beside(path: &Path) -> Option<std::path::PathBuf> {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name()?);
    name.push(".lock");
    Some(path.with_file_name(name))
}
