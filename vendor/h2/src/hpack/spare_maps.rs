//! Header maps kept for reuse (slipstream's change 7).
//!
//! Every HEADERS frame received is decoded into a new `HeaderMap`, which allocates twice (its
//! index table and its entries) with its first field; the map goes to the application in the
//! request or response and is freed with it. An application that is done with a map can hand
//! it back with [`recycle_header_map`]: it is cleared (its memory kept) and the next frame
//! decoded on that thread fills it instead of allocating. A thread keeps at most
//! [`SPARE_MAPS`] maps, none with room for more than [`KEPT_CAPACITY`] names or that held
//! more than [`KEPT_CAPACITY`] values.

use http::HeaderMap;
use std::cell::RefCell;

/// How many cleared maps a thread keeps.
const SPARE_MAPS: usize = 128;

/// Maps that grew past this many names, or held more values, are freed, not kept.
const KEPT_CAPACITY: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// A map for a frame's fields: a spare one, or a new one (which allocates nothing yet).
pub(crate) fn header_map() -> HeaderMap {
    SPARE
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Hands back a map the application is done with: cleared and kept for the next frame
/// decoded on this thread, unless the thread keeps enough already or the map is large. Its
/// values are counted too (`len`: a name's repeated values are held apart from the names that
/// `capacity` counts, and clearing keeps their room), so the map must come with every value
/// it was decoded with: one whose fields were removed may hold room that neither counts.
pub fn recycle_header_map(mut map: HeaderMap) {
    let capacity = map.capacity();
    if capacity == 0 || capacity > KEPT_CAPACITY || map.len() > KEPT_CAPACITY {
        return;
    }
    map.clear();
    let _ = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < SPARE_MAPS {
            spare.push(map);
        }
    });
}
