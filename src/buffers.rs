//! Per-worker pool of I/O buffers. A connection borrows a buffer only while a request is in
//! flight and gives it back when idle, so an idle keep-alive connection holds no buffer, and busy
//! connections reuse memory instead of allocating per request.
//!
//! Small buffers (request heads) and large ones (whole responses) are pooled apart: handing a
//! small buffer to a large response would mean reallocating, and touching fresh pages, per
//! request.
//!
//! Short byte strings handed on as `Bytes` (an HTTP/2 response's encoded fields, a short
//! body's DATA) are cut from one shared chunk per thread ([`shared_room`], [`shared_copy`]).

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

/// Smallest read buffer handed out.
pub const MIN_BUFFER: usize = 16 * 1024;

/// Buffers a worker keeps for reuse in each size class at least; while more are lent out at
/// once (many HTTP/2 streams in flight), as many as were out at the most since the last trim,
/// so the next burst of the same size reuses memory instead of going through malloc for every
/// request. [`BufferPool::trim`] gives the surplus back once a second.
const MAX_POOLED: usize = 64;

/// Buffers up to this capacity are "small".
const SMALL: usize = 32 * 1024;

/// Whether a buffer of `capacity` comes from the pool's large class.
pub fn is_large(capacity: usize) -> bool {
    capacity > SMALL
}

/// A worker's buffer pool (single-threaded).
#[derive(Debug, Default)]
pub struct BufferPool {
    small: RefCell<Vec<Vec<u8>>>,
    large: RefCell<Vec<Vec<u8>>>,
    /// Buffers taken and not given back.
    lent: std::cell::Cell<usize>,
    /// The most buffers lent out at once since the last trim. A burst that drains keeps its
    /// buffers by this: counted against `lent` as they come back, half of them were freed, and
    /// the next burst allocated them again.
    peak: std::cell::Cell<usize>,
    /// Bytes of surplus buffers freed since malloc last gave pages back.
    freed: std::cell::Cell<usize>,
}

/// Surplus buffer bytes freed past which [`BufferPool::trim`] asks malloc to give free pages
/// back.
const RELEASE_AFTER: usize = 1024 * 1024;

impl BufferPool {
    fn class(&self, capacity: usize) -> &RefCell<Vec<Vec<u8>>> {
        if is_large(capacity) {
            &self.large
        } else {
            &self.small
        }
    }

    /// An empty buffer with at least `capacity` bytes of room.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        self.lent.set(self.lent.get() + 1);
        self.peak.set(self.peak.get().max(self.lent.get()));
        let mut buf = self.class(capacity).borrow_mut().pop().unwrap_or_default();
        if buf.capacity() < capacity {
            buf.reserve_exact(capacity);
        }
        buf
    }

    /// Returns a buffer for reuse; buffers beyond `max_capacity` are freed, and so is the
    /// surplus of a burst (more pooled than [`MAX_POOLED`] and the most lent out since the
    /// last trim).
    pub fn give(&self, mut buf: Vec<u8>, max_capacity: usize) {
        self.lent.set(self.lent.get().saturating_sub(1));
        let capacity = buf.capacity();
        if capacity == 0 || capacity > max_capacity {
            return;
        }
        let mut free = self.class(capacity).borrow_mut();
        if free.len() < MAX_POOLED.max(self.peak.get()) {
            buf.clear();
            free.push(buf);
        } else {
            self.freed.set(self.freed.get() + capacity);
        }
    }

    /// Frees pooled buffers beyond the most lent out at once since the last trim (at least
    /// [`MAX_POOLED`] stay), and starts that count again from what is lent out now; frees the
    /// head texts this thread kept and did not use since the last trim. When
    /// no buffer is lent and more than [`RELEASE_AFTER`] bytes of surplus were freed since
    /// malloc last gave pages back, asks it to give its free pages back to the kernel (the
    /// worker calls this once a second, so at most once a second): the buffers freed between
    /// the allocations of the connections that stay (each keep-alive connection's task)
    /// would otherwise stay resident as holes in the heap after a burst. Returns whether it
    /// asked.
    pub fn trim(&self) -> bool {
        self.freed.set(self.freed.get() + trim_head_texts());
        let keep = MAX_POOLED.max(self.peak.get());
        self.peak.set(self.lent.get());
        for class in [&self.small, &self.large] {
            let mut class = class.borrow_mut();
            let surplus: usize = class.iter().skip(keep).map(Vec::capacity).sum();
            self.freed.set(self.freed.get() + surplus);
            class.truncate(keep);
        }
        if self.lent.get() > 0 || self.freed.get() < RELEASE_AFTER {
            return false;
        }
        self.freed.set(0);
        release_free_memory();
        true
    }
}

/// The size of a shared chunk. Cut into many short strings, it costs one allocation where
/// each string would cost its own: with many HTTP/2 streams in flight, glibc's malloc and free
/// for each response's fields and DATA took about 1,300 instructions (its per-thread cache
/// holds seven chunks of a size, and a burst of streams frees hundreds). A chunk is freed when
/// the last string cut from it is dropped, so each string held long (frames queued for a
/// client that reads slowly) can keep up to this much resident, where alone it would keep its
/// own size: with N such strings, up to N times 16 KiB.
const SHARED_CHUNK: usize = 16 * 1024;

/// Strings longer than this get an allocation of their own.
const MOST_SHARED: usize = 2 * 1024;

thread_local! {
    /// The room left in this thread's current shared chunk.
    static SHARED: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Empty room for at least `want` bytes, cut from this thread's shared chunk (from a new
/// chunk when the current one has less left, and an allocation of its own past
/// [`MOST_SHARED`]). Split off what was written, then give the rest back with
/// [`give_back_room`].
pub fn shared_room(want: usize) -> BytesMut {
    if want > MOST_SHARED {
        return BytesMut::with_capacity(want);
    }
    let room = SHARED.with_borrow_mut(std::mem::take);
    if room.capacity() >= want {
        room
    } else {
        BytesMut::with_capacity(SHARED_CHUNK)
    }
}

/// Keeps the unused room of a [`shared_room`] for the next string (the larger of it and what
/// is kept already).
pub fn give_back_room(rest: BytesMut) {
    // The rest of an allocation larger than a chunk (a long head's own) is not kept: short
    // strings cut from it would keep all of it resident.
    if rest.capacity() > SHARED_CHUNK {
        return;
    }
    SHARED.with_borrow_mut(|room| {
        if rest.capacity() > room.capacity() {
            *room = rest;
        }
    });
}

/// `data` as `Bytes`; a short string is cut from this thread's shared chunk.
pub fn shared_copy(data: &[u8]) -> Bytes {
    if data.is_empty() {
        return Bytes::new();
    }
    if data.len() > MOST_SHARED {
        return Bytes::copy_from_slice(data);
    }
    let mut room = shared_room(data.len());
    room.extend_from_slice(data);
    give_back_room(room.split_off(data.len()));
    room.freeze()
}

/// Head texts kept for reuse per thread, at most.
const MOST_HEAD_TEXTS: usize = 256;

/// The largest head text kept for reuse.
const MOST_HEAD_TEXT: usize = 4 * 1024;

/// The least room a head's text is given, and the slack a reused one may have over what its
/// head needs: a kept text serves a head of `want` bytes when it has room for it and no more
/// than twice that plus this, so a request in flight holds about what its heads take.
const HEAD_TEXT_SLACK: usize = 256;

/// The texts of heads this thread has finished with, for its next heads.
struct HeadTexts {
    kept: Vec<Vec<u8>>,
    /// The fewest kept since the last trim: that many went unused all along.
    fewest: usize,
    /// Whether this thread writes heads (only such a thread keeps texts: one that merely
    /// drops a head, a blocking task's, would keep them for nothing).
    writes: bool,
}

thread_local! {
    static HEAD_TEXTS: RefCell<HeadTexts> = const {
        RefCell::new(HeadTexts { kept: Vec::new(), fewest: 0, writes: false })
    };
}

/// An empty buffer with room for `want` bytes of a head's text (the head a proxied request
/// sends upstream, the head its client receives): the one this thread finished with last,
/// when it is about that size. Two heads per request otherwise cost two mallocs and frees,
/// and glibc's per-thread cache holds 7 chunks of a size: with many requests finishing in one
/// turn of the loop, most went through malloc's slow path (about 350 instructions a head).
pub fn head_text(want: usize) -> Vec<u8> {
    let want = want.max(HEAD_TEXT_SLACK);
    let kept = HEAD_TEXTS.try_with(|t| {
        let mut t = t.borrow_mut();
        t.writes = true;
        let text = t.kept.pop();
        t.fewest = t.fewest.min(t.kept.len());
        text
    });
    match kept.ok().flatten() {
        Some(text) if (want..=2 * want + HEAD_TEXT_SLACK).contains(&text.capacity()) => text,
        // A kept text of another size is freed: the list follows the sizes in use.
        _ => Vec::with_capacity(want + want / 2),
    }
}

/// Keeps the buffer of a finished head for [`head_text`], on a thread that writes heads (up
/// to [`MOST_HEAD_TEXTS`]; a larger one than [`MOST_HEAD_TEXT`] is freed).
pub fn recycle_head_text(mut text: Vec<u8>) {
    if !(HEAD_TEXT_SLACK..=MOST_HEAD_TEXT).contains(&text.capacity()) {
        return;
    }
    text.clear();
    let _ = HEAD_TEXTS.try_with(|t| {
        let mut t = t.borrow_mut();
        if t.writes && t.kept.len() < MOST_HEAD_TEXTS {
            t.kept.push(text);
        }
    });
}

/// Frees the kept head texts that went unused since the last trim (the oldest, at the bottom
/// of the list); returns their bytes.
fn trim_head_texts() -> usize {
    HEAD_TEXTS
        .try_with(|t| {
            let mut t = t.borrow_mut();
            let unused = t.fewest.min(t.kept.len());
            let freed = t.kept.drain(..unused).map(|b| b.capacity()).sum();
            t.fewest = t.kept.len();
            freed
        })
        .unwrap_or(0)
}

/// Gives the free pages of malloc's heaps back to the kernel (glibc's `malloc_trim`, which
/// also releases whole free pages inside a heap, not only at its top). Elsewhere (and under
/// Miri, which cannot call into libc) there is no such call; freed memory stays with the
/// allocator.
#[allow(unsafe_code)]
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: malloc_trim takes no pointer and only changes malloc's own state.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_texts_are_reused_when_about_the_size_and_trimmed_when_unused() {
        let count = || HEAD_TEXTS.with_borrow(|t| t.kept.len());
        let first = head_text(300);
        assert!(first.capacity() >= 300);
        let at = first.as_ptr();
        let mut written = first;
        written.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        recycle_head_text(written);
        let again = head_text(320);
        assert_eq!(
            again.as_ptr(),
            at,
            "the finished head's buffer was not taken again"
        );
        assert!(again.is_empty());
        recycle_head_text(again);
        // A head four times larger does not take it (nor does a far smaller one keep a
        // large one): the small one is freed and a new one made.
        let large = head_text(1500);
        assert!(large.capacity() >= 1500);
        assert_ne!(large.as_ptr(), at);
        assert_eq!(count(), 0);
        recycle_head_text(large);
        assert!(
            head_text(100).capacity() < 1500,
            "a small head took a large buffer"
        );
        recycle_head_text(Vec::with_capacity(16));
        recycle_head_text(Vec::with_capacity(MOST_HEAD_TEXT + 1));
        assert_eq!(count(), 0, "a buffer of another size was kept");
        for _ in 0..MOST_HEAD_TEXTS + 10 {
            recycle_head_text(Vec::with_capacity(HEAD_TEXT_SLACK));
        }
        assert_eq!(count(), MOST_HEAD_TEXTS);
        // The first trim sees them all taken out since the last (none had been kept);
        // unused until the second, they are freed, except what was taken in between.
        trim_head_texts();
        assert_eq!(count(), MOST_HEAD_TEXTS);
        let _taken: Vec<_> = (0..10).map(|_| head_text(100)).collect();
        assert_eq!(trim_head_texts(), (MOST_HEAD_TEXTS - 10) * HEAD_TEXT_SLACK);
        assert_eq!(count(), 0);
        // A thread that never writes a head keeps none.
        std::thread::spawn(|| {
            recycle_head_text(Vec::with_capacity(HEAD_TEXT_SLACK));
            assert_eq!(HEAD_TEXTS.with_borrow(|t| t.kept.len()), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn short_strings_share_a_chunk_and_long_ones_do_not() {
        let a = shared_copy(b"first");
        let b = shared_copy(b"second");
        assert_eq!((&a[..], &b[..]), (&b"first"[..], &b"second"[..]));
        // Cut one after the other from the same chunk.
        assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + a.len());
        let long = shared_copy(&[7u8; MOST_SHARED + 1]);
        assert_eq!(long.len(), MOST_SHARED + 1);
        let c = shared_copy(b"third");
        assert_eq!(c.as_ptr() as usize, b.as_ptr() as usize + b.len());
        // Dropping the strings cut earlier leaves the later ones whole.
        drop((a, b));
        assert_eq!(&c[..], b"third");
        // A string that does not fit what is left starts a new chunk.
        let fill: Vec<Bytes> = (0..SHARED_CHUNK / MOST_SHARED + 1)
            .map(|_| shared_copy(&[1u8; MOST_SHARED]))
            .collect();
        let starts = fill
            .windows(2)
            .filter(|w| w[1].as_ptr() as usize != w[0].as_ptr() as usize + MOST_SHARED)
            .count();
        assert_eq!(starts, 1, "the strings did not roll over to one new chunk");
        // An empty string holds no chunk; the rest of a long string's own allocation is not
        // kept for short ones.
        assert!(shared_copy(b"").is_empty());
        give_back_room(BytesMut::with_capacity(SHARED_CHUNK * 2));
        let d = shared_copy(b"d");
        assert_eq!(
            d.as_ptr() as usize,
            fill[fill.len() - 1].as_ptr() as usize + MOST_SHARED
        );
        assert!(fill
            .iter()
            .all(|s| s.len() == MOST_SHARED && s.iter().all(|b| *b == 1)));
        assert_eq!(&c[..], b"third");
    }

    #[test]
    fn a_given_back_buffer_is_reused_from_its_own_size_class() {
        let pool = BufferPool::default();
        let mut small = pool.take(MIN_BUFFER);
        small.extend_from_slice(b"request");
        let small_at = small.as_ptr();
        let large = pool.take(SMALL + 1);
        assert!(is_large(large.capacity()));
        let large_at = large.as_ptr();
        pool.give(small, SMALL);
        pool.give(large, 4 * SMALL);
        let again = pool.take(MIN_BUFFER);
        assert_eq!(again.as_ptr(), small_at, "the small buffer was not reused");
        assert!(again.is_empty(), "a reused buffer kept its bytes");
        let large_again = pool.take(SMALL + 1);
        assert_eq!(large_again.as_ptr(), large_at);
    }

    #[test]
    fn buffers_beyond_the_limit_or_the_surplus_are_freed() {
        let pool = BufferPool::default();
        let big = pool.take(SMALL * 4);
        pool.give(big, SMALL * 2);
        assert!(
            pool.large.borrow().is_empty(),
            "kept a buffer past max_capacity"
        );
        let many: Vec<Vec<u8>> = (0..MAX_POOLED + 8).map(|_| pool.take(64)).collect();
        for buf in many {
            pool.give(buf, SMALL);
        }
        // The burst's buffers stay for a burst of the same size until the next trim; the
        // trim after that frees the surplus.
        assert_eq!(pool.small.borrow().len(), MAX_POOLED + 8);
        let again: Vec<Vec<u8>> = (0..MAX_POOLED + 8).map(|_| pool.take(64)).collect();
        assert!(pool.small.borrow().is_empty(), "the second burst allocated");
        for buf in again {
            pool.give(buf, SMALL);
        }
        assert!(!pool.trim(), "a few bytes freed asked malloc to trim");
        assert_eq!(pool.small.borrow().len(), MAX_POOLED + 8);
        assert!(!pool.trim(), "a few bytes freed asked malloc to trim");
        assert_eq!(pool.small.borrow().len(), MAX_POOLED);
    }

    #[test]
    fn a_burst_that_drains_keeps_its_buffers_for_the_next() {
        let pool = BufferPool::default();
        let burst: Vec<Vec<u8>> = (0..500).map(|_| pool.take(MIN_BUFFER)).collect();
        let first: Vec<*const u8> = burst.iter().map(Vec::as_ptr).collect();
        for buf in burst {
            pool.give(buf, SMALL);
        }
        assert_eq!(
            pool.small.borrow().len(),
            500,
            "buffers of the burst were freed"
        );
        // Counted against what was still lent out, the last half came back to a pool that
        // looked full and were freed; counted against the burst, all of them are reused.
        let next: Vec<Vec<u8>> = (0..500).map(|_| pool.take(MIN_BUFFER)).collect();
        let reused = next.iter().filter(|b| first.contains(&b.as_ptr())).count();
        assert_eq!(reused, 500);
    }

    #[test]
    fn a_burst_of_freed_buffers_gives_memory_back() {
        let pool = BufferPool::default();
        let burst: Vec<Vec<u8>> = (0..MAX_POOLED + 80)
            .map(|_| pool.take(MIN_BUFFER))
            .collect();
        for buf in burst {
            pool.give(buf, SMALL);
        }
        // The first trim after the burst keeps its buffers (another may follow); the next
        // frees the 80 beyond MAX_POOLED, 16 KiB each: more than a MiB back to malloc.
        assert!(!pool.trim(), "the burst's buffers went at its end");
        assert_eq!(pool.small.borrow().len(), MAX_POOLED + 80);
        assert!(pool.trim(), "the burst's buffers were not given back");
        assert!(!pool.trim(), "trimmed again with nothing freed since");
    }

    #[test]
    fn no_trim_while_a_burst_is_in_flight_or_for_oversized_buffers() {
        let pool = BufferPool::default();
        let mut gone: Vec<Vec<u8>> = (0..400).map(|_| pool.take(MIN_BUFFER)).collect();
        // 300 come back (kept: the burst was 400), 100 stay lent.
        let held = gone.split_off(300);
        for buf in gone {
            pool.give(buf, SMALL);
        }
        // Fewer than the surplus came back: the burst goes on.
        assert!(pool.lent.get() > MAX_POOLED);
        assert!(!pool.trim(), "trimmed in the middle of a burst");
        let mut held = held;
        let last = held.pop().unwrap();
        for buf in held {
            pool.give(buf, SMALL);
        }
        assert!(!pool.trim(), "trimmed with a request in flight");
        pool.give(last, SMALL);
        assert!(pool.trim(), "the burst ended");
        // Buffers past max_capacity are freed one by one in steady traffic: never a trim.
        let quiet = BufferPool::default();
        for _ in 0..200 {
            let big = quiet.take(SMALL * 4);
            quiet.give(big, SMALL * 2);
        }
        assert!(!quiet.trim(), "oversized buffers asked malloc to trim");
    }
}
