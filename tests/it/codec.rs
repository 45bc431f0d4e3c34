//! The HTTP/1.1 codec through real sockets: absolute-form targets as the upstream sees them,
//! and chunked trailer fields (validated like header fields, the forbidden ones dropped) on
//! requests and responses.

use std::io::{BufReader, Write};

use crate::support::*;

#[test]
fn absolute_form_with_an_empty_path_keeps_its_query() {
    let up = Upstream::ok(b"ok");
    let proxy = simple_proxy(up.addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(
        b"GET http://a?x=1 HTTP/1.1\r\nHost: a\r\n\r\n\
          GET http://a HTTP/1.1\r\nHost: a\r\n\r\n\
          GET http://a:8080?x HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    for _ in 0..3 {
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
    let paths: Vec<String> = up.seen().iter().map(|s| s.path().to_string()).collect();
    assert_eq!(paths, ["/?x=1", "/", "/?x"]);
    proxy.shutdown();
}
