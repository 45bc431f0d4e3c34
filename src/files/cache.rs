//! The per-worker open-file cache: a hot file costs no open, stat or close per request. An
//! entry holds the open file, its validators and the head fields they give, its precompressed
//! siblings, and, for small files, the bytes themselves. Entries are trusted for `cache_valid`,
//! then checked again by reopening the path: a file replaced, rewritten or removed is noticed
//! then. The cache is bounded (`cache_entries`; the least recently used entry goes first).
//! Nothing here is shared between threads.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Instant, SystemTime};

use super::conditional::Validators;
use super::open::{open_beneath, open_root, root_identity, Identity, OpenError, Opened};
use crate::config::{FileRoute, FilesSettings};
use crate::observe::metrics::{Counter, Shard};

/// Content codings of precompressed siblings, in the order they are preferred.
pub const CODINGS: [(&str, &str); 3] = [("br", ".br"), ("zstd", ".zst"), ("gzip", ".gz")];

/// One representation of a file: the file itself or a precompressed sibling.
#[derive(Debug)]
pub struct Representation {
    /// The open file.
    pub file: File,
    /// Its length when opened: exactly this many bytes are announced and sent.
    pub size: u64,
    /// Its validators.
    pub validators: Validators,
    /// `Last-Modified`, `ETag` and (for a sibling) `Content-Encoding` lines, ready to send.
    pub fields: Vec<u8>,
    /// The whole content, for a small file.
    pub memory: Option<Box<[u8]>>,
    stamp: Stamp,
}

/// What identifies a file's content: a change to any of these is a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A cached file with its siblings.
#[derive(Debug)]
pub struct Entry {
    /// The file as it is.
    pub identity: Representation,
    /// `Content-Type` of the file (siblings share it).
    pub content_type: String,
    /// Precompressed siblings by [`CODINGS`] order, when the route serves them.
    pub siblings: [Option<Representation>; 3],
    checked: Cell<Instant>,
    last_used: Cell<Instant>,
    root: Identity,
}

impl Entry {
    /// Whether any precompressed sibling exists (responses then carry `Vary: Accept-Encoding`).
    pub fn has_siblings(&self) -> bool {
        self.siblings.iter().any(Option::is_some)
    }
}

/// The cache key: the route's directory, the path under it, and the options that change what
/// opening finds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    path: PathBuf,
    precompressed: bool,
    out_of_root: bool,
}

struct Root {
    file: Rc<File>,
    identity: Identity,
    checked: Instant,
}

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    /// A regular file.
    File(Rc<Entry>),
    /// A directory.
    Directory(File),
}

/// One worker's open files.
#[derive(Default)]
pub struct FileCache {
    entries: RefCell<HashMap<Key, Rc<Entry>>>,
    roots: RefCell<HashMap<PathBuf, Root>>,
}

impl FileCache {
    /// Looks up `rel` under the route's directory: from the cache when the entry is fresh,
    /// otherwise by opening it.
    pub fn lookup(
        &self,
        route: &FileRoute,
        settings: &FilesSettings,
        rel: &Path,
        now: Instant,
        counters: &Shard,
    ) -> Result<Found, OpenError> {
        let (root, root_id) = self.root(&route.dir, settings, now)?;
        let key = Key {
            path: route.dir.join(rel),
            precompressed: route.precompressed,
            out_of_root: route.symlinks_out_of_root,
        };
        let cached = self.entries.borrow().get(&key).cloned();
        if let Some(entry) = cached {
            let fresh = now.duration_since(entry.checked.get()) < settings.cache_valid;
            if entry.root == root_id && (fresh || self.still_current(&entry, &root, rel, &key)) {
                entry
                    .checked
                    .set(if fresh { entry.checked.get() } else { now });
                entry.last_used.set(now);
                counters.inc(Counter::FilesCacheHits);
                return Ok(Found::File(entry));
            }
            self.entries.borrow_mut().remove(&key);
        }
        counters.inc(Counter::FilesCacheMisses);
        let (file, meta) = match open_beneath(&root, rel, key.out_of_root)? {
            Opened::Directory(d) => return Ok(Found::Directory(d)),
            Opened::File(f, m) => (f, m),
        };
        let entry = Rc::new(Entry {
            identity: representation(file, &meta, None, settings),
            content_type: content_type(rel, settings),
            siblings: if key.precompressed {
                siblings(&root, rel, key.out_of_root, settings)
            } else {
                Default::default()
            },
            checked: Cell::new(now),
            last_used: Cell::new(now),
            root: root_id,
        });
        if settings.cache_entries > 0 {
            self.insert(key, entry.clone(), settings.cache_entries);
        }
        Ok(Found::File(entry))
    }

    /// Opens a directory's entry for a listing (never cached).
    pub fn root_file(
        &self,
        route: &FileRoute,
        settings: &FilesSettings,
        now: Instant,
    ) -> Result<Rc<File>, OpenError> {
        self.root(&route.dir, settings, now).map(|(f, _)| f)
    }

    /// Files open in the cache now.
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn root(
        &self,
        dir: &Path,
        settings: &FilesSettings,
        now: Instant,
    ) -> Result<(Rc<File>, Identity), OpenError> {
        let mut roots = self.roots.borrow_mut();
        if let Some(r) = roots.get_mut(dir) {
            if now.duration_since(r.checked) < settings.cache_valid {
                return Ok((r.file.clone(), r.identity));
            }
            if root_identity(dir) == Some(r.identity) {
                r.checked = now;
                return Ok((r.file.clone(), r.identity));
            }
        }
        let (file, identity) = open_root(dir).map_err(|_| OpenError::Failed)?;
        let file = Rc::new(file);
        roots.insert(
            dir.to_path_buf(),
            Root {
                file: file.clone(),
                identity,
                checked: now,
            },
        );
        Ok((file, identity))
    }

    /// Reopens an entry's path and its siblings' and compares what is there now.
    fn still_current(&self, entry: &Entry, root: &File, rel: &Path, key: &Key) -> bool {
        let current = |rel: &Path| match open_beneath(root, rel, key.out_of_root) {
            Ok(Opened::File(_, m)) => Some(Stamp::of(&m)),
            _ => None,
        };
        if current(rel) != Some(entry.identity.stamp) {
            return false;
        }
        if !key.precompressed {
            return true;
        }
        CODINGS
            .iter()
            .zip(&entry.siblings)
            .all(|((_, ext), s)| current(&with_suffix(rel, ext)) == s.as_ref().map(|s| s.stamp))
    }

    fn insert(&self, key: Key, entry: Rc<Entry>, max: usize) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= max {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| e.last_used.get())
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                entries.remove(&k);
            }
        }
        entries.insert(key, entry);
    }
}

fn with_suffix(rel: &Path, ext: &str) -> PathBuf {
    let mut s = rel.as_os_str().to_os_string();
    s.push(ext);
    PathBuf::from(s)
}

fn siblings(
    root: &File,
    rel: &Path,
    out_of_root: bool,
    settings: &FilesSettings,
) -> [Option<Representation>; 3] {
    CODINGS.map(
        |(coding, ext)| match open_beneath(root, &with_suffix(rel, ext), out_of_root) {
            Ok(Opened::File(f, m)) => Some(representation(f, &m, Some(coding), settings)),
            _ => None,
        },
    )
}

fn representation(
    file: File,
    meta: &std::fs::Metadata,
    coding: Option<&str>,
    settings: &FilesSettings,
) -> Representation {
    let size = meta.size();
    let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let validators = Validators::new(size, mtime);
    let mut fields = Vec::with_capacity(96);
    fields.extend_from_slice(b"Last-Modified: ");
    fields.extend_from_slice(httpdate::fmt_http_date(validators.last_modified).as_bytes());
    fields.extend_from_slice(b"\r\nETag: ");
    fields.extend_from_slice(validators.etag.as_bytes());
    fields.extend_from_slice(b"\r\n");
    if let Some(c) = coding {
        fields.extend_from_slice(b"Content-Encoding: ");
        fields.extend_from_slice(c.as_bytes());
        fields.extend_from_slice(b"\r\n");
    }
    let memory = (size <= settings.memory_max_file)
        .then(|| read_whole(&file, size))
        .flatten();
    Representation {
        file,
        size,
        validators,
        fields,
        memory,
        stamp: Stamp::of(meta),
    }
}

/// Reads exactly `size` bytes, or nothing if the file changed meanwhile (it is then sent from
/// the file, where a short file closes the connection).
fn read_whole(file: &File, size: u64) -> Option<Box<[u8]>> {
    let mut buf = vec![0u8; size as usize];
    file.read_exact_at(&mut buf, 0).ok()?;
    let mut probe = [0u8; 1];
    match file.read_at(&mut probe, size) {
        Ok(0) => Some(buf.into_boxed_slice()),
        _ => None,
    }
}

/// The content type by extension: the config's map, the built-in one, then the default.
pub fn content_type(rel: &Path, settings: &FilesSettings) -> String {
    let ext = rel
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if let Some(ext) = &ext {
        if let Some(t) = settings.types.get(ext) {
            return t.clone();
        }
        if let Some(t) = mime_guess::from_ext(ext).first_raw() {
            return t.to_string();
        }
    }
    settings.default_type.clone()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bounded_least_recently_used_and_in_memory_only_when_small() {
        let dir = std::env::temp_dir().join(format!("slipstream-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.join(name), name).unwrap();
        }
        std::fs::write(dir.join("large"), vec![7u8; 20_000]).unwrap();
        let route = FileRoute::for_root(dir.clone(), false);
        let settings = FilesSettings {
            cache_entries: 2,
            cache_valid: Duration::from_secs(3600),
            ..FilesSettings::default()
        };
        let cache = FileCache::default();
        let counters = Shard::default();
        let start = Instant::now();
        let mut tick = 0;
        let mut get = |name: &str| {
            tick += 1;
            let now = start + Duration::from_millis(tick);
            match cache.lookup(&route, &settings, Path::new(name), now, &counters) {
                Ok(Found::File(e)) => e,
                other => panic!("{other:?}"),
            }
        };
        get("a");
        get("b");
        get("a"); // b is now the least recently used
        get("c"); // evicts b
        let misses = || counters.get(Counter::FilesCacheMisses);
        assert_eq!((misses(), counters.get(Counter::FilesCacheHits)), (3, 1));
        get("a");
        assert_eq!(misses(), 3, "a stayed");
        get("b");
        assert_eq!(misses(), 4, "b was evicted");
        assert_eq!(cache.len(), 2);
        assert!(get("a").identity.memory.is_some());
        assert!(get("large").identity.memory.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
