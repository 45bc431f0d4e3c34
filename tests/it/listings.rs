//! Directory listings (`list_directories`, `serve --browse`) through real sockets: sizes,
//! times, the order the URL names, breadcrumbs, the JSON form, hostile names escaped, and the
//! page loaded in a real headless Chromium, where no name runs as script.

use std::io::{BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::support::*;

/// Names that would run script, break out of an attribute or a link, or fool a path, if any
/// were written out unescaped.
const HOSTILE: [&str; 6] = [
    "<script>document.title='pwned'",
    "\"><img src=x onerror=\"document.body.dataset.pwned=1\">",
    "<svg onload=document.title='pwned'>",
    "a&b;c%2e%2e",
    "' onmouseover='alert(1)",
    "?x=1#y",
];

fn tree(name: &str) -> PathBuf {
    let dir = temp_path(&format!("listing-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let list = dir.join("pub");
    std::fs::create_dir_all(list.join("zdir/inner")).unwrap();
    let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    for (file, size, mtime) in [
        ("small.txt", 3, 1_764_000_000),
        ("big.bin", 5000, 1_700_000_000),
        ("mid.dat", 700, 1_750_000_000),
    ] {
        let f = std::fs::File::create(list.join(file)).unwrap();
        f.set_len(size).unwrap();
        f.set_modified(at(mtime)).unwrap();
    }
    for name in HOSTILE {
        std::fs::write(list.join(name), b"x").unwrap();
    }
    std::fs::write(list.join(".hidden"), b"h").unwrap();
    dir
}

fn serve(dir: &Path) -> slipstream::Server {
    proxy(&format!(
        "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n[[sites]]\ndefault = true\n\
         routes = [{{ path = \"/\", root = \"{}\", list_directories = true }}]\n",
        dir.display()
    ))
}

fn get(addr: SocketAddr, target: &str, headers: &str) -> RawResponse {
    let mut s = connect(addr);
    let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

/// Where each of `names` first appears in `page` (as a link's text), in order.
fn positions(page: &str, names: &[&str]) -> Vec<usize> {
    names
        .iter()
        .map(|n| {
            page.find(&format!(">{n}<"))
                .unwrap_or_else(|| panic!("{n}: {page}"))
        })
        .collect()
}

#[test]
fn a_listing_shows_sizes_and_times_and_sorts_as_its_url_says() {
    let dir = tree("sort");
    let proxy = serve(&dir);
    let addr = proxy.local_addrs()[0];
    let r = get(addr, "/pub/", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("vary"), Some("Accept"));
    assert!(r
        .header("content-security-policy")
        .unwrap()
        .contains("default-src 'none'"));
    let page = String::from_utf8(r.body).unwrap();
    // Directories first, then by name; the parent and every step of the path are links.
    let p = positions(&page, &["zdir/", "big.bin", "mid.dat", "small.txt"]);
    assert!(p.windows(2).all(|w| w[0] < w[1]), "{page}");
    assert!(page.contains("<a href=\"../\">../</a>"), "{page}");
    assert!(
        page.contains("<a href=\"/\">/</a><a href=\"/pub/\">pub</a>/"),
        "{page}"
    );
    // Sizes as people read them, with the exact count on hover, and times in UTC.
    assert!(page.contains("title=\"5000 bytes\">4.9 KiB<"), "{page}");
    assert!(page.contains(">2025-11-24 16:00</time>"), "{page}");
    assert!(!page.contains("hidden"), "{page}");
    // The order is in the URL: largest first, then latest first; directories stay first.
    let bigger = String::from_utf8(get(addr, "/pub/?sort=size&order=desc", "").body).unwrap();
    let p = positions(&bigger, &["zdir/", "big.bin", "mid.dat", "small.txt"]);
    assert!(p.windows(2).all(|w| w[0] < w[1]), "{bigger}");
    assert!(
        bigger.contains("href=\"?sort=size&amp;order=asc\">Size ↓</a>"),
        "{bigger}"
    );
    let later = String::from_utf8(get(addr, "/pub/?order=desc&sort=time", "").body).unwrap();
    let p = positions(&later, &["zdir/", "small.txt", "mid.dat", "big.bin"]);
    assert!(p.windows(2).all(|w| w[0] < w[1]), "{later}");
    // A nested directory's breadcrumbs.
    let inner = String::from_utf8(get(addr, "/pub/zdir/", "").body).unwrap();
    assert!(
        inner.contains("<a href=\"/pub/zdir/\">zdir</a>/"),
        "{inner}"
    );
    assert!(
        inner.contains(">inner/<") && inner.contains("1 directory, 0 files"),
        "{inner}"
    );
    proxy.shutdown();
}

#[test]
fn a_listing_answers_json_to_accept_and_escapes_every_hostile_name() {
    let dir = tree("json");
    let proxy = serve(&dir);
    let addr = proxy.local_addrs()[0];
    let r = get(
        addr,
        "/pub/?sort=size&order=desc",
        "Accept: application/json\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4 + HOSTILE.len(), "{v}");
    assert_eq!(
        (list[0]["name"].as_str(), list[0]["type"].as_str()),
        (Some("zdir"), Some("directory"))
    );
    assert_eq!(
        (list[1]["name"].as_str(), list[1]["size"].as_u64()),
        (Some("big.bin"), Some(5000))
    );
    assert_eq!(list[1]["mtime"], "Tue, 14 Nov 2023 22:13:20 GMT");
    for name in HOSTILE {
        assert!(list.iter().any(|e| e["name"] == name), "{name}: {v}");
    }
    // The page: each name escaped in text, percent-encoded in its link; no markup from a name.
    let page = String::from_utf8(get(addr, "/pub/", "").body).unwrap();
    assert!(
        page.contains("&lt;script&gt;document.title=&#39;pwned&#39;<"),
        "{page}"
    );
    assert!(
        page.contains("href=\"./%3Cscript%3Edocument.title%3D%27pwned%27\""),
        "{page}"
    );
    assert!(
        page.contains("&lt;svg onload=document.title=&#39;pwned&#39;&gt;"),
        "{page}"
    );
    assert!(
        page.contains("&quot;&gt;&lt;img src=x onerror=&quot;"),
        "{page}"
    );
    assert!(page.contains("href=\"./%3Fx%3D1%23y\""), "{page}");
    assert!(
        !page.contains("<script") && !page.contains("<img") && !page.contains("<svg"),
        "{page}"
    );
    // Each link leads to its file.
    let r = get(addr, "/pub/%3Cscript%3Edocument.title%3D%27pwned%27", "");
    assert_eq!((r.status, r.body.as_slice()), (200, b"x".as_slice()));
    let r = get(addr, "/pub/%3Fx%3D1%23y", "");
    assert_eq!((r.status, r.body.as_slice()), (200, b"x".as_slice()));
    proxy.shutdown();
}

/// The page in a real browser: the names show as text, and none ran.
#[test]
fn a_listing_in_headless_chromium_runs_no_name_as_script() {
    let dir = tree("browser");
    let proxy = serve(&dir);
    let url = format!("http://{}/pub/", proxy.local_addrs()[0]);
    let dom = crate::chromium::rendered_dom(&url, 2000);
    assert!(dom.contains("<title>Index of /pub/</title>"), "{dom}");
    assert!(
        !dom.contains("pwned=\"1\"") && !dom.contains("data-pwned"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'<"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;svg onload=document.title='pwned'&gt;"),
        "{dom}"
    );
    assert!(dom.contains("big.bin") && dom.contains("4.9 KiB"), "{dom}");
    // The page as shown (kept for the docs when SCREENSHOTS names a folder).
    if let Ok(folder) = std::env::var("SCREENSHOTS") {
        let path = format!("{folder}/listing.png");
        crate::chromium::screenshot(&url, 1000, 560, 1000, &path);
    }
    proxy.shutdown();
}

#[test]
fn a_link_out_of_the_root_is_listed_by_name_alone_unless_such_links_are_served() {
    let dir = tree("links");
    let outside = temp_path("listing-links-secret.bin");
    std::fs::File::create(&outside)
        .unwrap()
        .set_len(123_456)
        .unwrap();
    let list = dir.join("pub");
    std::os::unix::fs::symlink(&outside, list.join("away")).unwrap();
    std::os::unix::fs::symlink("big.bin", list.join("near")).unwrap();
    let json = |links_out: bool| {
        let server = proxy(&format!(
            "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n[[sites]]\ndefault = true\n\
             routes = [{{ path = \"/\", root = \"{}\", list_directories = true, \
             symlinks_out_of_root = {links_out} }}]\n",
            dir.display()
        ));
        let r = get(
            server.local_addrs()[0],
            "/pub/",
            "Accept: application/json\r\n",
        );
        server.shutdown();
        let list: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let size = |name: &str| {
            let e = list.as_array().unwrap().iter().find(|e| e["name"] == name);
            e.unwrap_or_else(|| panic!("{name} not in {list}"))["size"].as_u64()
        };
        (size("away"), size("near"))
    };
    // A link within the folder is followed either way; one out of it only when served.
    assert_eq!(json(false), (None, Some(5000)));
    assert_eq!(json(true), (Some(123_456), Some(5000)));
}

#[test]
fn a_listing_try_files_serves_for_another_url_links_where_it_says() {
    let dir = tree("try-files");
    let server = proxy(&format!(
        "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n[[sites]]\ndefault = true\n\
         routes = [{{ path = \"/\", root = \"{}\", list_directories = true, \
         try_files = [\"$uri\", \"/pub/zdir/\"] }}]\n",
        dir.display()
    ));
    // /missing/page is served the listing of /pub/zdir/: its links must not be relative to
    // /missing/.
    let r = get(server.local_addrs()[0], "/missing/page", "");
    assert_eq!(r.status, 200);
    let page = String::from_utf8(r.body).unwrap();
    assert!(
        page.contains("<a href=\"/pub/zdir/inner/\">inner/</a>"),
        "{page}"
    );
    assert!(page.contains("<a href=\"/pub/\">../</a>"), "{page}");
    server.shutdown();
}
