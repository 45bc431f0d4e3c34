//! The disk tier's files, one per stored response (nginx's layout, not a log-structured
//! store: a body is sent from its file with sendfile(2), ranges are offsets, and an object is
//! streamed in while it is served, never held whole). A file is the body first, then the
//! entry's metadata (with the body's checksum), its length, a checksum and a magic trailer, so
//! a body can be written as it arrives and the metadata last. A file that does not read back
//! whole and consistent is removed and counts as a miss ([`read_entry`] never panics; a fuzz
//! target holds it to that). A body read back at start is checked against its checksum once,
//! off the worker, before its first hit ([`BodyFile::check`]): a changed byte is a miss too.
//!
//! A file's life: written under a temporary name, renamed in place once whole, unlinked when
//! its entry is evicted, purged or replaced and the last request sending it is done
//! ([`BodyFile`]'s `doomed` flag); files of entries still stored stay when the process ends, and
//! the next start reads them back ([`load`]).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;

use super::entry::Entry;
use super::freshness::Times;

/// The last bytes of every file.
const MAGIC: &[u8; 8] = b"SLPCACH2";
/// Metadata length (4) + checksum (8) + magic (8).
const TRAILER: u64 = 20;
/// Metadata larger than this is not believed.
const MAX_META: u32 = 1 << 20;

/// A stored body in a file.
#[derive(Debug)]
pub struct BodyFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its length (the body starts at offset 0).
    pub len: u64,
    /// Its entry left the cache: the file goes when the last user lets go of it.
    doomed: AtomicBool,
    /// The file kept open between hits, when the descriptor budget allowed it.
    kept: std::sync::OnceLock<Kept>,
    /// Whether its body matches the checksum its metadata carries: known for a file this
    /// process wrote, found out at the first hit for one read back at start.
    checked: tokio::sync::OnceCell<bool>,
    /// The body's checksum, for a file read back.
    body_hash: u64,
}

/// A body file's descriptor kept open, with its place in the budget.
#[derive(Debug)]
struct Kept {
    file: File,
    _slot: super::memfile::Slot,
}

/// A body file open for a hit: kept open between hits, or opened for this one.
pub enum Opened<'a> {
    /// The descriptor the body file keeps.
    Kept(&'a File),
    /// Opened now (the budget was spent), closed after the hit.
    Now(File),
}

impl std::ops::Deref for Opened<'_> {
    type Target = File;
    fn deref(&self) -> &File {
        match self {
            Opened::Kept(f) => f,
            Opened::Now(f) => f,
        }
    }
}

impl BodyFile {
    /// A body file at `path` of `len` bytes.
    pub fn new(path: PathBuf, len: u64) -> BodyFile {
        BodyFile {
            path,
            len,
            doomed: AtomicBool::new(false),
            kept: std::sync::OnceLock::new(),
            checked: tokio::sync::OnceCell::new_with(Some(true)),
            body_hash: 0,
        }
    }

    /// A body file read back from the disk, whose body is to match `body_hash`.
    fn read_back(path: PathBuf, len: u64, body_hash: u64) -> BodyFile {
        BodyFile {
            checked: tokio::sync::OnceCell::new(),
            body_hash,
            ..BodyFile::new(path, len)
        }
    }

    /// Whether the body is as it was written: for a file read back at start, its bytes are
    /// hashed once (off the worker; requests for it meanwhile wait for that one check).
    pub async fn check(&self) -> bool {
        let verify = || async {
            let (path, len, want) = (self.path.clone(), self.len, self.body_hash);
            let hashed = tokio::task::spawn_blocking(move || hash_file(&path, len));
            hashed.await.ok().flatten() == Some(want)
        };
        *self.checked.get_or_init(verify).await
    }

    /// The file open for reading. The first hit opens it and keeps the descriptor while the
    /// budget allows ([`super::memfile::Slot`]), so later hits neither open nor close it, as
    /// nginx's `open_file_cache` does; a doomed file is not found (a purge is a miss after).
    pub fn open(&self) -> io::Result<Opened<'_>> {
        if self.doomed.load(Relaxed) {
            return Err(io::ErrorKind::NotFound.into());
        }
        if let Some(kept) = self.kept.get() {
            return Ok(Opened::Kept(&kept.file));
        }
        let file = File::open(&self.path)?;
        match super::memfile::Slot::take() {
            Some(slot) => {
                let kept = self.kept.get_or_init(|| Kept { file, _slot: slot });
                Ok(Opened::Kept(&kept.file))
            }
            None => Ok(Opened::Now(file)),
        }
    }

    /// Its entry left the cache: the file is unlinked at once (a request sending it holds it
    /// open; one about to send it finds it gone and fetches again), so no restart can bring a
    /// purged response back.
    pub fn doom(&self) {
        if !self.doomed.swap(true, Relaxed) && !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Appends `entry`'s metadata trailer to a file whose body is written (`body_len` bytes,
/// whose xxh3 is `body_hash`).
pub fn write_trailer(file: &mut File, entry: &Entry, body: (u64, u64)) -> io::Result<()> {
    file.write_all(&trailer_bytes(entry, body))
}

/// The xxh3 of a file's first `len` bytes; `None` when it cannot be read or is shorter.
fn hash_file(path: &Path, len: u64) -> Option<u64> {
    let mut file = File::open(path).ok()?.take(len);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                read += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    (read == len).then(|| hasher.digest())
}

/// A unique name for a new file of key `hash` under `dir`: `ab/HASH-SEQ` (two hex digits of
/// the hash spread files over 256 directories).
pub fn file_name(dir: &Path, hash: u128) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Relaxed);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    dir.join(format!("{:02x}", hash as u8))
        .join(format!("{hash:032x}-{stamp:x}-{seq:x}"))
}

/// Writes a whole entry (its body in memory) to a new file under `dir`; the file-backed copy
/// of the entry.
pub fn write_entry(dir: &Path, hash: u128, entry: &Entry) -> io::Result<Entry> {
    let path = file_name(dir, hash);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("tmp");
    let body = entry.body_bytes()?;
    let mut file = File::create(&tmp)?;
    let hash = xxhash_rust::xxh3::xxh3_64(&body);
    let written = file
        .write_all(&body)
        .and_then(|()| write_trailer(&mut file, entry, (body.len() as u64, hash)))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(on_file(entry, BodyFile::new(path, body.len() as u64)))
}

/// A copy of `entry` whose body is `file` (its head says the file's length).
pub fn on_file(entry: &Entry, file: BodyFile) -> Entry {
    let mut head = entry.head.clone();
    crate::http1::response::remove_fields(&mut head, 0, &["content-length"]);
    let length = format!("Content-Length: {}\r\n", file.len);
    crate::http1::response::add_fields(&mut head, 0, length.as_bytes());
    Entry {
        key: entry.key.clone(),
        head,
        status: entry.status,
        body: Bytes::new(),
        file: Some(Arc::new(file)),
        mem: None,
        times: entry.times,
        lifetime: entry.lifetime,
        vary: entry.vary.clone(),
        etag: entry.etag.clone(),
        last_modified: entry.last_modified.clone(),
        no_cache: entry.no_cache,
        no_cache_fields: entry.no_cache_fields.clone(),
        no_stale: entry.no_stale,
        stale_while_revalidate: entry.stale_while_revalidate,
        stale_if_error: entry.stale_if_error,
        client_head: Default::default(),
    }
}

/// A copy of `entry` (a new head) on the same body file as an older one (a 304 freshened it).
pub fn on_same_file(entry: &Entry, file: Arc<BodyFile>) -> Entry {
    let mut copy = on_file(entry, BodyFile::new(PathBuf::new(), file.len));
    copy.file = Some(file);
    copy
}

/// A copy of `entry` (a new head) on the same memory file as an older one (a 304 freshened
/// it).
pub fn on_same_memfile(entry: &Entry, mem: Arc<super::memfile::MemFile>) -> Entry {
    let mut copy = on_file(entry, BodyFile::new(PathBuf::new(), mem.len));
    copy.file = None;
    copy.mem = Some(mem);
    copy
}

/// Reads a file's entry back (its body stays in the file); `None` when the file is not whole
/// and consistent.
pub fn read_entry(path: &Path) -> Option<Entry> {
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    if size < TRAILER {
        return None;
    }
    let mut trailer = [0u8; TRAILER as usize];
    file.seek(SeekFrom::Start(size - TRAILER)).ok()?;
    file.read_exact(&mut trailer).ok()?;
    let (meta_len, checksum, magic) = split_trailer(&trailer);
    if magic != MAGIC || meta_len > MAX_META || u64::from(meta_len) + TRAILER > size {
        return None;
    }
    let meta_start = size - TRAILER - u64::from(meta_len);
    let mut meta = vec![0u8; meta_len as usize];
    file.seek(SeekFrom::Start(meta_start)).ok()?;
    file.read_exact(&mut meta).ok()?;
    if xxhash_rust::xxh3::xxh3_64(&meta) != checksum {
        return None;
    }
    let (entry, body_len, body_hash) = decode(&meta)?;
    if body_len != meta_start {
        return None;
    }
    let file = BodyFile::read_back(path.to_path_buf(), body_len, body_hash);
    Some(on_file(&entry, file))
}

/// Reads a whole file's bytes as [`read_entry`] and [`BodyFile::check`] read the file: its
/// entry (the body is the first `len` bytes) and that length, or `None`.
pub fn parse_file(bytes: &[u8]) -> Option<(Entry, u64)> {
    let size = bytes.len() as u64;
    let trailer: &[u8; TRAILER as usize] = bytes
        .get(bytes.len().checked_sub(TRAILER as usize)?..)?
        .try_into()
        .ok()?;
    let (meta_len, checksum, magic) = split_trailer(trailer);
    if magic != MAGIC || meta_len > MAX_META || u64::from(meta_len) + TRAILER > size {
        return None;
    }
    let meta_start = size - TRAILER - u64::from(meta_len);
    let meta = &bytes[meta_start as usize..(size - TRAILER) as usize];
    if xxhash_rust::xxh3::xxh3_64(meta) != checksum {
        return None;
    }
    let (entry, body_len, body_hash) = decode(meta)?;
    let body = &bytes[..meta_start as usize];
    (body_len == meta_start && xxhash_rust::xxh3::xxh3_64(body) == body_hash)
        .then_some((entry, body_len))
}

/// The metadata, its checksum and the magic, as they end a file (for a file made in memory:
/// the fuzz target's).
pub fn trailer_bytes(entry: &Entry, body: (u64, u64)) -> Vec<u8> {
    let meta = encode(entry, body);
    let checksum = xxhash_rust::xxh3::xxh3_64(&meta);
    let mut tail = meta;
    tail.extend_from_slice(&(tail.len() as u32).to_le_bytes());
    tail.extend_from_slice(&checksum.to_le_bytes());
    tail.extend_from_slice(MAGIC);
    tail
}

fn split_trailer(t: &[u8; TRAILER as usize]) -> (u32, u64, &[u8]) {
    let meta_len = u32::from_le_bytes(t[0..4].try_into().unwrap_or_default());
    let checksum = u64::from_le_bytes(t[4..12].try_into().unwrap_or_default());
    (meta_len, checksum, &t[12..])
}

/// Every stored entry under `dir`, read back; files that do not read back (and temporary
/// files a crash left) are removed.
pub fn load(dir: &Path) -> Vec<Entry> {
    let mut entries = Vec::new();
    let Ok(subdirs) = std::fs::read_dir(dir) else {
        return entries;
    };
    for sub in subdirs.flatten() {
        let Ok(files) = std::fs::read_dir(sub.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            if !is_ours(&path) {
                // Not a file this cache writes: never touched.
                continue;
            }
            match read_entry(&path) {
                Some(e) if path.extension().is_none() => entries.push(e),
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
    entries
}

/// Whether `path` is named as this cache names its files (`HASH-STAMP-SEQ`, or that with
/// `.tmp`): 32 hex digits, a dash, then hex digits and dashes.
fn is_ours(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let name = name.strip_suffix(".tmp").unwrap_or(name);
    let (hash, rest) = name.split_at_checked(32).unwrap_or(("", ""));
    hash.bytes().all(|b| b.is_ascii_hexdigit())
        && !hash.is_empty()
        && rest.starts_with('-')
        && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The metadata as bytes: every field length-prefixed.
fn encode(e: &Entry, (body_len, body_hash): (u64, u64)) -> Vec<u8> {
    let mut m = Vec::with_capacity(e.head.len() + e.key.len() + 128);
    put_bytes(&mut m, e.key.as_bytes());
    put_bytes(&mut m, &e.head);
    m.extend_from_slice(&e.status.to_le_bytes());
    let t = &e.times;
    for n in [t.request_time, t.response_time, t.date, t.age, e.lifetime] {
        m.extend_from_slice(&n.to_le_bytes());
    }
    m.push(u8::from(e.no_cache) | u8::from(e.no_stale) << 1);
    for n in [
        e.stale_while_revalidate,
        e.stale_if_error,
        body_len,
        body_hash,
    ] {
        m.extend_from_slice(&n.to_le_bytes());
    }
    put_opt(&mut m, e.etag.as_deref());
    put_opt(&mut m, e.last_modified.as_deref());
    m.extend_from_slice(&(e.no_cache_fields.len() as u32).to_le_bytes());
    for f in &e.no_cache_fields {
        put_bytes(&mut m, f.as_bytes());
    }
    m.extend_from_slice(&(e.vary.len() as u32).to_le_bytes());
    for (name, value) in &e.vary {
        put_bytes(&mut m, name.as_bytes());
        put_opt(&mut m, value.as_deref());
    }
    m
}

fn put_bytes(m: &mut Vec<u8>, b: &[u8]) {
    m.extend_from_slice(&(b.len() as u32).to_le_bytes());
    m.extend_from_slice(b);
}

fn put_opt(m: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            m.push(1);
            put_bytes(m, b);
        }
        None => m.push(0),
    }
}

/// Reads metadata; `None` on anything short, long or malformed.
pub fn decode(meta: &[u8]) -> Option<(Entry, u64, u64)> {
    let mut r = Reader(meta);
    let key = String::from_utf8(r.bytes()?.to_vec()).ok()?;
    let head = r.bytes()?.to_vec();
    let status = u16::from_le_bytes(r.take(2)?.try_into().ok()?);
    let mut n = [0u64; 5];
    for slot in &mut n {
        *slot = r.u64()?;
    }
    let flags = r.take(1)?[0];
    let (swr, sie, body_len, body_hash) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let etag = r.opt()?;
    let last_modified = r.opt()?;
    let mut no_cache_fields = Vec::new();
    for _ in 0..r.count()? {
        no_cache_fields.push(String::from_utf8(r.bytes()?.to_vec()).ok()?);
    }
    let mut vary = Vec::new();
    for _ in 0..r.count()? {
        let name = String::from_utf8(r.bytes()?.to_vec()).ok()?;
        vary.push((name.into_boxed_str(), r.opt()?));
    }
    if !r.0.is_empty() || !(100..=599).contains(&status) || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let entry = Entry {
        key: key.into_boxed_str(),
        head,
        status,
        body: Bytes::new(),
        file: None,
        mem: None,
        times: Times {
            request_time: n[0],
            response_time: n[1],
            date: n[2],
            age: n[3],
        },
        lifetime: n[4],
        vary,
        etag,
        last_modified,
        no_cache: flags & 1 != 0,
        no_cache_fields,
        no_stale: flags & 2 != 0,
        stale_while_revalidate: swr,
        stale_if_error: sie,
        client_head: Default::default(),
    };
    Some((entry, body_len, body_hash))
}

/// A cursor over metadata bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn count(&mut self) -> Option<u32> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        // Every element takes at least four bytes: a count beyond that is a lie.
        (n as usize <= self.0.len() / 4).then_some(n)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        self.take(n as usize)
    }

    fn opt(&mut self) -> Option<Option<Vec<u8>>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(self.bytes()?.to_vec())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::{build, response_facts, Ignore, Stored};

    fn entry() -> Entry {
        let head = b"HTTP/1.1 200 OK\r\nETag: \"x\"\r\nVary: X-A\r\nCache-Control: max-age=9, no-cache=\"A\"\r\n\r\n";
        let facts = response_facts(200, head, Ignore::default());
        let s = Stored {
            key: "http://a/x",
            request_fields: b"GET / HTTP/1.1\r\nX-A: 1\r\n",
            request_time: 5,
            response_time: 6,
            lifetime: 9,
            ignore: Ignore::default(),
        };
        build(head, 200, Bytes::from_static(b"the body"), &facts, s)
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("slipstream-disk-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let d = dir("roundtrip");
        let e = entry();
        let on_disk = write_entry(&d, 42, &e).unwrap();
        let file = on_disk.file.clone().unwrap();
        assert_eq!(std::fs::read(&file.path).unwrap()[..8], *b"the body");
        let back = read_entry(&file.path).unwrap();
        assert_eq!(
            (&*back.key, &back.head, back.status),
            (&*e.key, &e.head, 200)
        );
        assert_eq!(
            (back.times, back.lifetime, back.no_cache_fields),
            (e.times, 9, e.no_cache_fields.clone())
        );
        assert_eq!((back.vary, back.etag), (e.vary.clone(), e.etag.clone()));
        assert_eq!(back.file.unwrap().len, 8);
        assert_eq!(load(&d).len(), 1);
    }

    #[test]
    fn a_truncated_or_corrupt_file_is_removed_at_load() {
        let d = dir("corrupt");
        let e = entry();
        let a = write_entry(&d, 1, &e).unwrap().file.clone().unwrap();
        let b = write_entry(&d, 2, &e).unwrap().file.clone().unwrap();
        let c = write_entry(&d, 3, &e).unwrap().file.clone().unwrap();
        let bytes = std::fs::read(&a.path).unwrap();
        std::fs::write(&a.path, &bytes[..bytes.len() - 1]).unwrap();
        let mut flipped = std::fs::read(&b.path).unwrap();
        flipped[12] ^= 1;
        std::fs::write(&b.path, &flipped).unwrap();
        let mut shorter = std::fs::read(&c.path).unwrap();
        shorter.remove(0);
        std::fs::write(&c.path, &shorter).unwrap();
        assert!(load(&d).is_empty());
        assert!(!a.path.exists() && !b.path.exists() && !c.path.exists());
    }

    #[test]
    fn a_body_changed_on_disk_fails_its_check_once_read_back() {
        let d = dir("body");
        let file = write_entry(&d, 5, &entry()).unwrap().file.clone().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(runtime.block_on(file.check()), "written here: known good");
        let intact = read_entry(&file.path).unwrap().file.unwrap();
        assert!(runtime.block_on(intact.check()), "read back and hashed");
        let mut bytes = std::fs::read(&file.path).unwrap();
        bytes[2] ^= 0x20; // "the body" becomes "thE body": same length, same metadata
        std::fs::write(&file.path, &bytes).unwrap();
        let changed = read_entry(&file.path).expect("the metadata is intact");
        let changed = changed.file.unwrap();
        assert!(!runtime.block_on(changed.check()));
        assert!(
            !runtime.block_on(changed.check()),
            "checked once, remembered"
        );
    }

    #[test]
    fn a_doomed_file_goes_at_once_and_strangers_stay() {
        let d = dir("doom");
        let on_disk = write_entry(&d, 7, &entry()).unwrap();
        let file = on_disk.file.clone().unwrap();
        let path = file.path.clone();
        let open = File::open(&path).unwrap();
        file.doom();
        assert!(!path.exists(), "unlinked while still open");
        drop(open);
        let stranger = path.parent().unwrap().join("notes.txt");
        std::fs::write(&stranger, b"mine").unwrap();
        assert!(load(&d).is_empty());
        assert!(
            stranger.exists(),
            "a file the cache did not write is left alone"
        );
    }
}
