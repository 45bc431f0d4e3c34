use super::*;

fn parse(raw: &[u8]) -> Result<Option<(Framing, bool, Vec<u8>)>, RequestError> {
    let mut storage = header_storage();
    let head = parse_request(raw, &mut storage, 8192)?;
    Ok(head.map(|h| {
        let mut out = Vec::new();
        h.write_upstream_head(
            &mut out,
            ForwardedFor {
                client: b"10.0.0.9",
                proto: "http",
            },
        );
        (h.framing, h.keep_alive, out)
    }))
}

/// The status the proxy answers a refused head with (through the one error mapping).
fn status(raw: &[u8]) -> u16 {
    let e = crate::error::Error::from(parse(raw).unwrap_err());
    e.answer().send.unwrap()
}

#[test]
fn simple_get_is_rewritten_with_crlf_and_forwarded_fields() {
    let (framing, ka, out) = parse(
        b"GET /a?b HTTP/1.1\nHost: example.com\nConnection: keep-alive, x-drop\nX-Drop: 1\nX-Forwarded-For: 1.2.3.4\nAccept: */*\n\n",
    )
    .unwrap()
    .unwrap();
    assert_eq!(framing, Framing::Empty);
    assert!(ka);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /a?b HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Forwarded-For: 1.2.3.4, 10.0.0.9\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n\r\n"
    );
}

#[test]
fn partial_head_needs_more() {
    assert!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
}

#[test]
fn http10_keep_alive_rules() {
    let (_, ka, _) = parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert!(!ka);
    let (_, ka, _) = parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(ka);
    let (_, ka, _) = parse(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!ka);
}

#[test]
fn framing_is_validated() {
    let cl = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(parse(cl).unwrap().unwrap().0, Framing::Length(5));
    let te = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(parse(te).unwrap().unwrap().0, Framing::Chunked);
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
        501
    );
    assert_eq!(
        status(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n"),
        400
    );
}

#[test]
fn host_rules() {
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
    let (_, _, out) = parse(b"GET http://b.example/x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(out.starts_with(b"GET /x HTTP/1.1\r\nHost: b.example\r\n"));
}

#[test]
fn absolute_form_with_an_empty_path_keeps_its_query() {
    let line = |raw: &[u8]| {
        let (_, _, out) = parse(raw).unwrap().unwrap();
        let end = out.iter().position(|b| *b == b'\r').unwrap();
        String::from_utf8(out[..end].to_vec()).unwrap()
    };
    assert_eq!(
        line(b"GET http://h?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"),
        "GET /?x=1 HTTP/1.1"
    );
    assert_eq!(
        line(b"GET http://h HTTP/1.1\r\nHost: h\r\n\r\n"),
        "GET / HTTP/1.1"
    );
    assert_eq!(
        line(b"GET http://h:8080?x HTTP/1.1\r\nHost: h\r\n\r\n"),
        "GET /?x HTTP/1.1"
    );
    assert_eq!(
        line(b"GET HTTPS://h/a?b HTTP/1.1\r\nHost: h\r\n\r\n"),
        "GET /a?b HTTP/1.1"
    );
}

#[test]
fn limits_and_targets() {
    let long_line = [b"GET /".as_slice(), &[b'a'; 9000]].concat();
    assert_eq!(status(&long_line), 414);
    let mut big = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    big.extend_from_slice(&[b'x'; 9000]);
    assert_eq!(status(&big), 431);
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status(&many), 431);
    assert_eq!(status(b"GET a HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n"),
        417
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), 400);
}
