//! The PROXY protocol codec's property ([`crate::net::proxy_protocol`]).

use crate::net::proxy_protocol::{
    parse, write_v1, write_v1_unknown, write_v2, write_v2_local, Proxied, MAX_HEADER,
};

/// Any bytes as the start of a connection on a PROXY-protocol listener: parsing never panics;
/// a header found lies within the bytes and parses the same without what follows it; every
/// shorter prefix of a header, or of bytes still short of one, asks for more (and bytes short
/// of a header are fewer than [`MAX_HEADER`]); and what a header says, written back as v1 and
/// as v2, parses to the same [`Proxied`].
pub fn proxy_protocol(data: &[u8]) {
    let (proxied, complete) = match parse(data) {
        Ok(Some((proxied, consumed))) => {
            assert!(consumed > 0 && consumed <= data.len() && consumed <= MAX_HEADER);
            let alone = parse(&data[..consumed]);
            assert_eq!(alone, Ok(Some((proxied, consumed))), "header alone");
            (Some(proxied), consumed)
        }
        Ok(None) => {
            assert!(
                data.len() < MAX_HEADER,
                "still incomplete at {} bytes",
                data.len()
            );
            (None, data.len())
        }
        Err(_) => return,
    };
    for n in 0..complete {
        assert_eq!(parse(&data[..n]), Ok(None), "prefix of {n} bytes");
    }
    let Some(proxied) = proxied else {
        return;
    };
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    match proxied {
        Proxied::Addresses {
            source,
            destination,
        } => {
            write_v1(source, destination, &mut v1);
            write_v2(source, destination, &mut v2);
        }
        Proxied::Local => {
            write_v1_unknown(&mut v1);
            write_v2_local(&mut v2);
        }
    }
    for written in [v1, v2] {
        let again = parse(&written);
        assert_eq!(again, Ok(Some((proxied, written.len()))), "{written:?}");
    }
}

#[cfg(test)]
mod tests {
    /// The committed seeds (fuzz/seeds/proxy_protocol) hold the property.
    #[test]
    fn seeds() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/proxy_protocol");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            super::proxy_protocol(&data);
            count += 1;
        }
        assert!(count > 0, "no seeds in {}", dir.display());
    }
}
