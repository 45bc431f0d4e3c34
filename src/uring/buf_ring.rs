//! The memory of the ring's registered buffer ring (the provided buffers that waiting reads
//! land in): allocated page-aligned here, registered and filled by [`super::driver`].

use std::cell::Cell;
use std::io;

use super::driver::PROVIDED_COUNT;

/// The memory of a registered buffer ring: `PROVIDED_COUNT` entries, page-aligned, and the
/// tail this thread has published.
pub(super) struct BufRing {
    pub(super) base: *mut io_uring::types::BufRingEntry,
    pub(super) tail: Cell<u16>,
}

impl BufRing {
    fn layout() -> std::alloc::Layout {
        let size =
            usize::from(PROVIDED_COUNT) * std::mem::size_of::<io_uring::types::BufRingEntry>();
        std::alloc::Layout::from_size_align(size, 4096).expect("a valid layout")
    }

    pub(super) fn new() -> io::Result<BufRing> {
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(BufRing::layout()) };
        if base.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufRing {
            base: base.cast(),
            tail: Cell::new(0),
        })
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: allocated in `BufRing::new` with this layout, and no longer registered.
            unsafe { std::alloc::dealloc(self.base.cast(), BufRing::layout()) };
        }
    }
}
