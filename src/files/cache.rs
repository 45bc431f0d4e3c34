//! The per-worker open-file cache: a hot file costs no open, stat or close per request. An
//! entry holds the open file, its validators and the head fields they give, its precompressed
//! siblings, and, for small files, the bytes themselves. Entries are trusted for `cache_valid`,
//! then checked again by reopening the path: a file replaced, rewritten or removed is noticed
//! then; a route directory replaced (a deploy swapping a symlink) drops its entries. The cache
//! is bounded (`cache_entries`; the least recently used entry goes first).
//! Nothing here is shared between threads.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Instant, SystemTime};

use super::conditional::Validators;
use xxhash_rust::xxh3::Xxh3DefaultBuilder;

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
pub struct CachedFile {
    /// The file as it is.
    pub identity: Representation,
    /// `Content-Type` of the file (siblings share it).
    pub content_type: String,
    /// Precompressed siblings by [`CODINGS`] order, when the route serves them.
    pub siblings: [Option<Representation>; 3],
    checked: Cell<Instant>,
    last_used: Cell<Instant>,
}

impl CachedFile {
    /// Whether any precompressed sibling exists (responses then carry `Vary: Accept-Encoding`).
    pub fn has_siblings(&self) -> bool {
        self.siblings.iter().any(Option::is_some)
    }
}

/// Entries of one route directory, in four tables by the route options that change what
/// opening finds (precompressed siblings looked up; symlinks out of the directory followed).
type Tables = [HashMap<PathBuf, Rc<CachedFile>, Xxh3DefaultBuilder>; 4];

struct Root {
    file: Rc<File>,
    identity: Identity,
    checked: Instant,
    entries: Tables,
}

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    /// A regular file.
    File(Rc<CachedFile>),
    /// A directory.
    Directory(File),
}

/// One worker's open files, by route directory, then path under it.
#[derive(Default)]
pub struct FileCache {
    roots: RefCell<HashMap<PathBuf, Root, Xxh3DefaultBuilder>>,
    len: Cell<usize>,
}

/// How a route opens files: the index of its table.
fn table_of(route: &FileRoute) -> usize {
    usize::from(route.precompressed) | usize::from(route.symlinks_out_of_root) << 1
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
        let mut roots = self.roots.borrow_mut();
        let root = self.root(&mut roots, &route.dir, settings, now)?;
        let dir = root.file.clone();
        let table = &mut root.entries[table_of(route)];
        if let Some(entry) = table.get(rel) {
            let fresh = now.duration_since(entry.checked.get()) < settings.cache_valid;
            if fresh || still_current(entry, &dir, rel, route) {
                if !fresh {
                    entry.checked.set(now);
                }
                entry.last_used.set(now);
                counters.inc(Counter::FilesCacheHits);
                return Ok(Found::File(entry.clone()));
            }
            table.remove(rel);
            self.len.set(self.len.get() - 1);
        }
        counters.inc(Counter::FilesCacheMisses);
        let (file, meta) = match open_beneath(&dir, rel, route.symlinks_out_of_root)? {
            Opened::Directory(d) => return Ok(Found::Directory(d)),
            Opened::File(f, m) => (f, m),
        };
        let entry = Rc::new(CachedFile {
            identity: representation(file, &meta, None, settings),
            content_type: content_type(rel, settings),
            siblings: if route.precompressed {
                siblings(&dir, rel, route.symlinks_out_of_root, settings)
            } else {
                Default::default()
            },
            checked: Cell::new(now),
            last_used: Cell::new(now),
        });
        if settings.cache_entries > 0 {
            if self.len.get() >= settings.cache_entries && evict_oldest(&mut roots) {
                self.len.set(self.len.get() - 1);
            }
            let table = match roots.get_mut(&route.dir) {
                Some(root) => &mut root.entries[table_of(route)],
                None => return Ok(Found::File(entry)),
            };
            if table.insert(rel.to_path_buf(), entry.clone()).is_none() {
                self.len.set(self.len.get() + 1);
            }
        }
        Ok(Found::File(entry))
    }

    /// Files open in the cache now.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The route directory's open descriptor, opened again when it was replaced (its entries
    /// are then dropped: they belong to the old directory).
    fn root<'r>(
        &self,
        roots: &'r mut HashMap<PathBuf, Root, Xxh3DefaultBuilder>,
        dir: &Path,
        settings: &FilesSettings,
        now: Instant,
    ) -> Result<&'r mut Root, OpenError> {
        let current = match roots.get_mut(dir) {
            Some(r) if now.duration_since(r.checked) < settings.cache_valid => true,
            Some(r) if root_identity(dir) == Some(r.identity) => {
                r.checked = now;
                true
            }
            _ => false,
        };
        if !current {
            let (file, identity) = open_root(dir).map_err(|_| OpenError::Failed)?;
            let root = Root {
                file: Rc::new(file),
                identity,
                checked: now,
                entries: Default::default(),
            };
            if let Some(old) = roots.insert(dir.to_path_buf(), root) {
                let dropped: usize = old.entries.iter().map(HashMap::len).sum();
                self.len.set(self.len.get() - dropped);
            }
        }
        roots.get_mut(dir).ok_or(OpenError::Failed)
    }
}

/// Removes the least recently used entry of the whole cache; false if it was empty.
fn evict_oldest(roots: &mut HashMap<PathBuf, Root, Xxh3DefaultBuilder>) -> bool {
    let oldest = roots
        .iter()
        .flat_map(|(dir, root)| {
            root.entries.iter().enumerate().flat_map(move |(t, table)| {
                table
                    .iter()
                    .map(move |(rel, e)| (e.last_used.get(), dir, t, rel))
            })
        })
        .min_by_key(|(used, ..)| *used)
        .map(|(_, dir, t, rel)| (dir.clone(), t, rel.clone()));
    oldest.is_some_and(|(dir, t, rel)| {
        roots
            .get_mut(&dir)
            .is_some_and(|root| root.entries[t].remove(&rel).is_some())
    })
}

/// Reopens an entry's path and its siblings' and compares what is there now.
fn still_current(entry: &CachedFile, dir: &File, rel: &Path, route: &FileRoute) -> bool {
    let current = |rel: &Path| match open_beneath(dir, rel, route.symlinks_out_of_root) {
        Ok(Opened::File(_, m)) => Some(Stamp::of(&m)),
        _ => None,
    };
    if current(rel) != Some(entry.identity.stamp) {
        return false;
    }
    if !route.precompressed {
        return true;
    }
    CODINGS
        .iter()
        .zip(&entry.siblings)
        .all(|((_, ext), s)| current(&with_suffix(rel, ext)) == s.as_ref().map(|s| s.stamp))
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
