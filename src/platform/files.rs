//! Reading a file a lock URL names for its credentials (etcd's CA,
//! client certificate, key and password file; PostgreSQL's root
//! certificate and password file), the one way every backend does it.
//!
//! A plain `open(2)` of a FIFO for reading blocks until some process opens
//! it for writing, and that wait is in the kernel, where lockrun's signal
//! handlers end nothing: SIGTERM and Ctrl-C would be taken only after it.
//! So the file is opened as lockrun opens lock files, never waiting: with
//! `O_NONBLOCK` (a FIFO then opens at once, writer or not), `O_NOCTTY` (a
//! terminal named by mistake does not become ours) and `O_CLOEXEC`; then
//! the descriptor itself is asked what it is (`fstat`, so a file swapped
//! after a `stat` of the path cannot slip through), and only a regular
//! file is read. Symbolic links are followed: certificates are often
//! links (Debian's /etc/ssl/certs, Kubernetes' mounted secrets).

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::path::Path;

pub use crate::platform::not_read::NotRead;

/// What a file of this type is, for messages: `a FIFO`, `a socket`.
pub fn file_kind(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Symlink => "a symbolic link",
        FileType::Unknown => "not a regular file",
    }
}

/// Opens PATH for reading if it is a regular file (through any symbolic
/// links), never blocking; with its metadata, read from the descriptor.
pub fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), NotRead> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // A Unix socket cannot be opened at all (ENXIO): say what it is
        // rather than "no such device or address".
        Err(Errno::NXIO) => {
            return Err(match rustix::fs::stat(path) {
                Ok(st) => NotRead::NotRegular(file_kind(FileType::from_raw_mode(st.st_mode))),
                Err(_) => NotRead::Io(Errno::NXIO.into()),
            });
        }
        Err(e) => return Err(NotRead::Io(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| NotRead::Io(e.into()))?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        // Dropped unread: closing a FIFO opened for reading wakes no
        // writer into a write that succeeds, and nothing was consumed.
        return Err(NotRead::NotRegular(file_kind(file_type)));
    }
    // O_NONBLOCK stays set: on a regular file it changes nothing.
    let file = File::from(fd);
    let meta = file.metadata().map_err(NotRead::Io)?;
    Ok((file, meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::read_regular;

    #[test]
    fn a_fifo_is_refused_at_once_and_a_link_to_a_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        // mkfifo(3), not mknodat: macOS has no mknodat for FIFOs.
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only creates it.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        match read_regular(&fifo) {
            Err(NotRead::NotRegular(what)) => assert_eq!(what, "a FIFO"),
            other => panic!("{other:?}"),
        }
        let file = dir.path().join("file");
        std::fs::write(&file, "secret\n").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link).unwrap(), b"secret\n");
        assert!(matches!(
            read_regular(dir.path()),
            Err(NotRead::NotRegular("a directory"))
        ));
        assert!(matches!(
            read_regular(&dir.path().join("none")),
            Err(NotRead::Io(_))
        ));
    }
}
