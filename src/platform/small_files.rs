//! Small files lockrun writes beside its runs (the `--metrics-file` text,
//! through a temporary renamed over it) and the datagrams of `--log`: the
//! open flags, modes and identities std leaves to each OS.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Opens an existing file for reading without waiting (a FIFO at its name
/// must not hang the open), or with `create` makes it empty (mode 0644)
/// when missing.
pub fn open_without_waiting(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .mode(0o644)
        // A terminal named by mistake does not become ours.
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Creates `path` new (mode 0644), never opening what is there: no file
/// or link planted at the name is ever written through.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// Whether two answers of stat name the same file (device and inode).
pub fn same_file(a: &Metadata, b: &Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Where a file is: its device and inode, as stat gives them.
pub fn file_id(meta: &Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// A file's permission bits, to give its replacement the same.
pub fn permission_bits(meta: &Metadata) -> u32 {
    meta.mode() & 0o7777
}

pub fn set_permission_bits(file: &File, bits: u32) -> io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(bits))
}

/// Sends one datagram to the Unix socket at `path` without ever waiting;
/// every failure is dropped (a log must never hold a run up).
pub fn send_datagram(path: &Path, datagram: &[u8]) {
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    if socket.set_nonblocking(true).is_err() {
        return;
    }
    let _ = socket.send_to(datagram, path);
}

/// Where `--metrics-file PATH`'s updates lock: PATH itself (CONTRACT
/// §17), renamed over while its lock is held, which a Unix rename allows.
pub fn metrics_lock_beside(_path: &Path) -> Option<std::path::PathBuf> {
    None
}
