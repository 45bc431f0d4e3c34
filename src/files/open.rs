//! Opening a path under a route's directory, safely: `openat2(2)` with `RESOLVE_BENEATH`
//! refuses any resolution that leaves the directory, through `..` or a symlink, in the kernel,
//! with no race between a check and the open. Routes that allow symlinks out of the directory
//! open with plain resolution (magic links such as `/proc/self/fd/N` stay refused). Where
//! openat2 is missing (Linux before 5.6, some sandboxes) a file is opened normally and kept only
//! if the kernel reports its real path under the directory.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};

/// What opening a path found.
#[derive(Debug)]
pub enum Opened {
    /// A regular file, with its metadata.
    File(File, std::fs::Metadata),
    /// A directory.
    Directory(File),
}

/// Why a path could not be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Nothing there (or a file where a directory was needed).
    NotFound,
    /// There, but not to be served: permissions, a symlink out of the directory, or a special
    /// file (FIFO, device, socket).
    Forbidden,
    /// The file system failed (EIO, out of descriptors, ...).
    Failed,
}

/// A directory's identity, to notice it was replaced (a deploy swapping a symlink).
pub type Identity = (u64, u64);

/// Opens the route directory itself, for use as the base of [`open_beneath`].
pub fn open_root(dir: &Path) -> io::Result<(File, Identity)> {
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    let m = file.metadata()?;
    Ok((file, (m.dev(), m.ino())))
}

/// The identity `dir` has now, following symlinks.
pub fn root_identity(dir: &Path) -> Option<Identity> {
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Opens `rel` (relative, already normalized) under the directory `root`.
pub fn open_beneath(root: &File, rel: &Path, out_of_root: bool) -> Result<Opened, OpenError> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    // O_NONBLOCK: opening a FIFO must not block the worker (it is then refused below).
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let resolve = if out_of_root {
        ResolveFlags::NO_MAGICLINKS
    } else {
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
    };
    let fd = match openat2(root, rel, flags, Mode::empty(), resolve) {
        Ok(fd) => fd,
        // Kernels before 5.6, and sandboxes that filter openat2, have no RESOLVE_BENEATH.
        Err(rustix::io::Errno::NOSYS) => open_verified(root, rel, flags, out_of_root)?,
        Err(e) => return Err(classify(e)),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(|_| OpenError::Failed)?;
    if meta.is_dir() {
        Ok(Opened::Directory(file))
    } else if meta.is_file() {
        Ok(Opened::File(file, meta))
    } else {
        Err(OpenError::Forbidden)
    }
}

/// Without openat2: opens with ordinary resolution, then asks the kernel where the file really
/// is (`/proc/self/fd`) and refuses it unless that is under the directory.
fn open_verified(
    root: &File,
    rel: &Path,
    flags: OFlags,
    out_of_root: bool,
) -> Result<OwnedFd, OpenError> {
    let fd = rustix::fs::openat(root, rel, flags, Mode::empty()).map_err(classify)?;
    if out_of_root {
        return Ok(fd);
    }
    let real = |fd: std::os::fd::BorrowedFd<'_>| {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
    };
    let (Ok(dir), Ok(file)) = (real(root.as_fd()), real(fd.as_fd())) else {
        return Err(OpenError::Failed);
    };
    if file.starts_with(&dir) {
        Ok(fd)
    } else {
        Err(OpenError::Forbidden)
    }
}

fn classify(e: rustix::io::Errno) -> OpenError {
    use rustix::io::Errno;
    match e {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => OpenError::NotFound,
        // EXDEV: the resolution would leave the directory; ELOOP: a magic link or a loop.
        Errno::ACCESS | Errno::PERM | Errno::XDEV | Errno::LOOP => OpenError::Forbidden,
        _ => OpenError::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_out_of_the_root_are_refused_unless_allowed() {
        let base = std::env::temp_dir().join(format!("slipstream-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(base.join("secret"), "s").unwrap();
        std::fs::write(root.join("sub/in.txt"), "i").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/in.txt", root.join("inside")).unwrap();
        let (dir, _) = open_root(&root).unwrap();
        let open = |p: &str, out| {
            open_beneath(&dir, Path::new(p), out).map(|o| match o {
                Opened::File(_, m) => m.len(),
                Opened::Directory(_) => u64::MAX,
            })
        };
        assert_eq!(open("out", false), Err(OpenError::Forbidden));
        assert_eq!(open("out", true), Ok(1));
        assert_eq!(open("inside", false), Ok(1));
        assert_eq!(open("sub", false), Ok(u64::MAX));
        assert_eq!(open("", false), Ok(u64::MAX));
        assert_eq!(open("../secret", false), Err(OpenError::Forbidden));
        assert_eq!(open("missing", false), Err(OpenError::NotFound));
        assert_eq!(open("sub/in.txt/x", false), Err(OpenError::NotFound));
        // The fallback for kernels without openat2 draws the same line.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let verified = |p: &str, out| open_verified(&dir, Path::new(p), flags, out).map(drop);
        assert_eq!(verified("out", false), Err(OpenError::Forbidden));
        assert_eq!(verified("../secret", false), Err(OpenError::Forbidden));
        assert_eq!(verified("out", true), Ok(()));
        assert_eq!(verified("inside", false), Ok(()));
        assert_eq!(verified("missing", false), Err(OpenError::NotFound));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
