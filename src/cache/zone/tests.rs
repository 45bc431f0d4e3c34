//! The zone's unit tests: stores, variants, purges, fetch locks and the disk tier's index.

use super::*;
use crate::cache::entry::{build, response_facts, Ignore, Stored};

fn settings() -> ZoneSettings {
    ZoneSettings {
        memory: 1 << 20,
        max_object: 1 << 16,
        inactive: Duration::from_secs(600),
        disk: None,
    }
}

fn entry(key: &str, head: &[u8], request: &[u8]) -> Entry {
    let facts = response_facts(200, head, Ignore::default());
    let s = Stored {
        key,
        request_fields: request,
        request_time: 0,
        response_time: 0,
        lifetime: 60,
        ignore: Ignore::default(),
    };
    build(head, 200, bytes::Bytes::from_static(b"x"), &facts, s)
}

#[test]
fn variants_live_side_by_side_and_replace_their_own() {
    let zone = Arc::new(Zone::new("z", settings()));
    let head = b"HTTP/1.1 200 OK\r\nVary: X-A\r\n\r\n";
    let h = hash_key("k");
    zone.store(
        h,
        Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 1\r\n")),
    );
    zone.store(
        h,
        Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 2\r\n")),
    );
    zone.store(
        h,
        Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 1\r\n")),
    );
    assert!(zone
        .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 1\r\n")
        .is_some());
    assert!(zone
        .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 2\r\n")
        .is_some());
    assert!(zone
        .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 3\r\n")
        .is_none());
    assert!(zone
        .lookup(h, "other", b"GET / HTTP/1.1\r\nX-A: 1\r\n")
        .is_none());
    assert_eq!(zone.store.get(&h).unwrap().entries.len(), 2);
}

#[test]
fn variants_stored_at_once_from_several_threads_are_all_kept() {
    let zone = Arc::new(Zone::new("z", settings()));
    let h = hash_key("k");
    let threads: Vec<_> = (0..MAX_VARIANTS)
        .map(|i| {
            let zone = zone.clone();
            std::thread::spawn(move || {
                let request = format!("GET / HTTP/1.1\r\nX-A: {i}\r\n");
                let head = b"HTTP/1.1 200 OK\r\nVary: X-A\r\n\r\n";
                zone.store(h, Arc::new(entry("k", head, request.as_bytes())));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(zone.store.get(&h).unwrap().entries.len(), MAX_VARIANTS);
}

#[test]
fn a_purge_while_the_disk_copy_is_written_leaves_nothing_on_disk() {
    let dir = std::env::temp_dir().join(format!("slipstream-zone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut with_disk = settings();
    with_disk.disk = Some((dir.clone(), 1 << 20));
    let zone = Arc::new(Zone::new("z", with_disk));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let files = || super::super::disk::load(&dir).len();
    for round in 0..20 {
        let key = format!("http://a/{round}");
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        runtime.block_on(async {
            zone.store(
                hash_key(&key),
                Arc::new(entry(&key, head, b"GET / HTTP/1.1\r\n")),
            );
            assert!(zone.remove(&key));
        });
    }
    drop(runtime); // waits for the writes
    assert!(zone.disk.as_ref().unwrap().index.iter().next().is_none());
    assert_eq!(files(), 0, "no purged response can come back at a restart");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_copy_stored_late_does_not_replace_a_newer_one() {
    let zone = Arc::new(Zone::new("z", settings()));
    let h = hash_key("k");
    let at = |time: u64| {
        let mut e = entry("k", b"HTTP/1.1 200 OK\r\n\r\n", b"GET / HTTP/1.1\r\n");
        e.times.response_time = time;
        Arc::new(e)
    };
    zone.store(h, at(10));
    zone.store(h, at(5));
    let found = zone.lookup(h, "k", b"GET / HTTP/1.1\r\n").unwrap();
    assert_eq!(found.times.response_time, 10);
    zone.store(h, at(11));
    let found = zone.lookup(h, "k", b"GET / HTTP/1.1\r\n").unwrap();
    assert_eq!(found.times.response_time, 11);
}

#[test]
fn purge_by_key_and_prefix() {
    let zone = Arc::new(Zone::new("z", settings()));
    let head = b"HTTP/1.1 200 OK\r\n\r\n";
    for key in ["http://a/x/1", "http://a/x/2", "http://a/y"] {
        zone.store(
            hash_key(key),
            Arc::new(entry(key, head, b"GET / HTTP/1.1\r\n")),
        );
    }
    assert!(zone.remove("http://a/y"));
    assert!(!zone.remove("http://a/y"));
    assert_eq!(zone.remove_where(|k| k.starts_with("http://a/x/")), 2);
    assert!(zone
        .lookup(hash_key("http://a/x/1"), "http://a/x/1", b"")
        .is_none());
}

#[test]
fn one_fetch_per_key_and_its_end_wakes_the_rest() {
    let zone = Arc::new(Zone::new("z", settings()));
    let fetch = zone.begin_fetch(7).ok().unwrap();
    let mut waiter = zone.begin_fetch(7).err().unwrap();
    assert!(zone.fetching(7));
    drop(fetch);
    assert!(!zone.fetching(7));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert!(
        rt.block_on(waiter.changed()).is_err(),
        "closed: the fetch ended"
    );
    assert!(zone.begin_fetch(7).is_ok());
}

#[test]
fn a_reload_gets_the_same_zone_back_unless_resized() {
    let a = shared("reload-test", settings());
    assert!(!Arc::ptr_eq(&a, &shared("reload-test", settings())));
    let running = [a.clone()];
    let b = keeping(&running, || shared("reload-test", settings()));
    assert!(Arc::ptr_eq(&a, &b));
    let bigger = ZoneSettings {
        memory: 2 << 20,
        ..settings()
    };
    assert!(!Arc::ptr_eq(
        &a,
        &keeping(&running, || shared("reload-test", bigger))
    ));
}
