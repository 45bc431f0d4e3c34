//! A large stored body held in an anonymous memory file (memfd) instead of a heap buffer, so a
//! hit sends it with sendfile(2) as a disk-tier hit does, and nginx does from its cache files:
//! the kernel hands the socket references to the pages, where a write from a buffer copies
//! every byte. Smaller bodies stay on the heap: one write of head and body is cheaper than the
//! head's send(2) and a sendfile(2), until the body is large enough that the copy costs more
//! than splicing its pages (measured with `bench/cache.sh`: a 91 KB hit 10.2-10.4 us from the
//! heap against 10.8-11.1 us from a memory file; 160 KB 15.1-15.3 us against 14.2-14.5).
//! Each held body is one file descriptor, and so is each disk-tier file kept open between hits
//! ([`super::disk::BodyFile::open`]): their number is capped ([`Slot`]) at half of what the
//! open-file limit leaves beyond the connections' needs, at least an eighth of the limit, at
//! most 65,536; past the cap, bodies stay on the heap and files are opened per hit.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Bodies from this size on are held in a memory file (the crossover measured above).
pub const HELD_FROM: usize = 128 * 1024;

/// Descriptors the cache holds now, over every zone.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// One descriptor of the cache's budget, given back when dropped.
#[derive(Debug)]
pub struct Slot(());

impl Slot {
    /// A slot, when the cap allows another.
    pub fn take() -> Option<Slot> {
        if HELD.fetch_add(1, Relaxed) >= cap() {
            HELD.fetch_sub(1, Relaxed);
            return None;
        }
        Some(Slot(()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Relaxed);
    }
}

/// A body in a memory file.
#[derive(Debug)]
pub struct MemFile {
    /// The file (its body starts at offset 0).
    pub file: File,
    /// Its length.
    pub len: u64,
    /// Its descriptor's place in the budget.
    _slot: Slot,
}

impl MemFile {
    /// `body` in a new memory file, when it is large enough to gain from one and the cap
    /// allows another; `None` keeps it on the heap.
    pub fn hold(body: &[u8]) -> Option<MemFile> {
        if body.len() < HELD_FROM {
            return None;
        }
        let slot = Slot::take()?;
        let made = rustix::fs::memfd_create("slipstream-cache", rustix::fs::MemfdFlags::CLOEXEC)
            .map(File::from)
            .map_err(io::Error::from)
            .and_then(|mut file| file.write_all(body).map(|()| file));
        match made {
            Ok(file) => Some(MemFile {
                file,
                len: body.len() as u64,
                _slot: slot,
            }),
            Err(e) => {
                tracing::debug!("cache: a body stays on the heap: no memory file ({e})");
                None
            }
        }
    }

    /// Its bytes, read back (to compress them, or to write them to the disk tier).
    pub fn bytes(&self) -> io::Result<Vec<u8>> {
        let mut out = vec![0; self.len as usize];
        self.file.read_exact_at(&mut out, 0)?;
        Ok(out)
    }
}

/// The budget set at start ([`set_budget`]); `usize::MAX` until then.
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets how many descriptors the cache may hold (the server computes it from the open-file
/// limit and the connections' needs once it raised the limit).
pub fn set_budget(descriptors: usize) {
    BUDGET.store(descriptors.min(65_536), Relaxed);
}

/// How many descriptors the cache may hold at once: the budget set at start, else a quarter
/// of the open-file limit (connections and upstreams need the rest), at most 65,536.
fn cap() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    match BUDGET.load(Relaxed) {
        usize::MAX => *DEFAULT.get_or_init(|| {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            let soft = limit.current.unwrap_or(u64::MAX);
            (soft / 4).min(65_536) as usize
        }),
        set => set,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_body_stays_on_the_heap_and_a_large_one_reads_back_whole() {
        assert!(MemFile::hold(b"small").is_none());
        let body: Vec<u8> = (0..HELD_FROM + 7).map(|i| i as u8).collect();
        let held = MemFile::hold(&body).expect("a memory file");
        assert_eq!(held.len, body.len() as u64);
        assert_eq!(held.bytes().unwrap(), body);
    }
}
