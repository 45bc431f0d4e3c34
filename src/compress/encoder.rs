//! The three encoders behind one type, on well-kept crates: gzip by `flate2` on the zlib-rs
//! backend, brotli by `brotli`, zstd by `zstd` (libzstd). An [`Encoder`] compresses a body as it
//! arrives, with bounded memory (its state and the output not yet taken), and can flush so
//! that what was written so far can be decoded (server-sent events, long polls);
//! [`compress_whole`] compresses a body that is all in memory, sized for it.

use std::cell::RefCell;
use std::io::{self, Write};

use super::{Coding, Settings};

/// brotli's window for streamed bodies (2^19 = 512 KB): a bound on its memory per response.
const BROTLI_STREAM_WINDOW: u32 = 19;
/// zstd's window for streamed bodies (2^19 = 512 KB), well under the 8 MB RFC 9659 requires
/// decoders to support.
const ZSTD_STREAM_WINDOW: u32 = 19;
/// brotli's internal buffer.
const BROTLI_BUFFER: usize = 16 * 1024;

/// A body being compressed.
pub enum Encoder {
    /// gzip.
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// brotli.
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    /// zstd.
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    /// An encoder for a streamed body.
    pub fn new(coding: Coding, settings: &Settings) -> io::Result<Encoder> {
        Ok(match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(settings.gzip_level),
            )),
            Coding::Br => Encoder::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                settings.brotli_level,
                BROTLI_STREAM_WINDOW,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), settings.zstd_level)?;
                e.window_log(ZSTD_STREAM_WINDOW)?;
                e.include_checksum(false)?;
                Encoder::Zstd(e)
            }
        })
    }

    /// Compresses `data` (output may wait inside the encoder until a flush).
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(data),
            Encoder::Br(e) => e.write_all(data),
            Encoder::Zstd(e) => e.write_all(data),
        }
    }

    /// Makes everything written so far decodable from the output.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.flush(),
            Encoder::Br(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }

    /// The compressed bytes produced so far and not yet taken.
    pub fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Br(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        }
    }

    /// Ends the stream; returns the output not yet taken, with the end of the stream.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Br(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

thread_local! {
    /// This worker's gzip state for whole bodies, with its level: reset, not rebuilt, per
    /// response (building one allocates and clears some 270 KB of tables).
    static GZIP: RefCell<Option<(u32, flate2::Compress)>> = const { RefCell::new(None) };
    /// This worker's zstd context for whole bodies, with its level.
    static ZSTD: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
}

/// Compresses a whole body in one go.
pub fn compress_whole(coding: Coding, settings: &Settings, data: &[u8]) -> io::Result<Vec<u8>> {
    match coding {
        Coding::Gzip => gzip_whole(settings.gzip_level, data),
        Coding::Br => {
            // The window need not be larger than the body.
            let bits = usize::BITS - data.len().max(1).leading_zeros();
            let window = bits.clamp(16, 22);
            let out = Vec::with_capacity(data.len() / 3 + 64);
            let params = brotli::enc::BrotliEncoderParams {
                quality: settings.brotli_level as i32,
                lgwin: window as i32,
                size_hint: data.len(),
                ..Default::default()
            };
            let buffer = BROTLI_BUFFER.min(data.len().max(1024));
            let mut e = brotli::CompressorWriter::with_params(out, buffer, &params);
            e.write_all(data)?;
            Ok(e.into_inner())
        }
        Coding::Zstd => ZSTD.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_none_or(|(l, _)| *l != settings.zstd_level) {
                let mut c = zstd::bulk::Compressor::new(settings.zstd_level)?;
                c.include_checksum(false)?;
                *slot = Some((settings.zstd_level, c));
            }
            let (_, c) = slot.as_mut().expect("set above");
            let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
            c.compress_to_buffer(data, &mut out)?;
            Ok(out)
        }),
    }
}

fn gzip_whole(level: u32, data: &[u8]) -> io::Result<Vec<u8>> {
    GZIP.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some((l, c)) if *l == level => c.reset(),
            _ => {
                *slot = Some((
                    level,
                    flate2::Compress::new_gzip(flate2::Compression::new(level), 15),
                ));
            }
        }
        let (_, c) = slot.as_mut().expect("set above");
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        loop {
            let done = c.total_in() as usize;
            let status = c
                .compress_vec(&data[done..], &mut out, flate2::FlushCompress::Finish)
                .map_err(io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                return Ok(out);
            }
            out.reserve(out.capacity().max(4096));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap(),
        }
        out
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"<p>slipstream compresses text</p>\n"[i % 34] ^ (i / 997) as u8 & 1)
            .collect()
    }

    #[test]
    fn whole_and_streamed_round_trip() {
        let s = Settings::default();
        let body = sample(100_000);
        for coding in Coding::ALL {
            let whole = compress_whole(coding, &s, &body).unwrap();
            assert!(whole.len() < body.len() / 4, "{coding:?} {}", whole.len());
            assert_eq!(decode(coding, &whole), body, "{coding:?}");
            let mut e = Encoder::new(coding, &s).unwrap();
            let mut out = Vec::new();
            for piece in body.chunks(7_000) {
                e.write(piece).unwrap();
                out.append(e.output());
            }
            out.extend(e.finish().unwrap());
            assert_eq!(decode(coding, &out), body, "{coding:?}");
            assert_eq!(
                decode(coding, &compress_whole(coding, &s, b"").unwrap()),
                b""
            );
        }
    }

    #[test]
    fn a_flush_makes_what_was_written_decodable() {
        let s = Settings::default();
        for coding in Coding::ALL {
            let mut e = Encoder::new(coding, &s).unwrap();
            e.write(b"data: first event\n\n").unwrap();
            e.flush().unwrap();
            let first = std::mem::take(e.output());
            assert!(!first.is_empty(), "{coding:?}");
            // A streaming decoder gets the event before the stream ends.
            let mut got = vec![0u8; 64];
            let n = match coding {
                Coding::Gzip => flate2::read::GzDecoder::new(&first[..]).read(&mut got),
                Coding::Br => brotli::Decompressor::new(&first[..], 4096).read(&mut got),
                Coding::Zstd => zstd::stream::read::Decoder::new(&first[..])
                    .unwrap()
                    .read(&mut got),
            }
            .unwrap();
            assert_eq!(&got[..n], b"data: first event\n\n", "{coding:?}");
        }
    }
}
