//! The `[http2]` section: whether TLS listeners offer `h2` by ALPN, and every limit an HTTP/2
//! client connection lives under, each with a safe default rather than the `h2` crate's raw
//! ones. h2c (prior knowledge, no TLS) is per listener: `h2c = true` in `[[listen]]`.

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::http2::guard;

/// HTTP/2 settings and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Settings {
    /// TLS listeners offer `h2` by ALPN.
    pub enabled: bool,
    /// Streams a client may have open at once on one connection.
    pub max_concurrent_streams: u32,
    /// Largest decoded header list of a request (also bounds one header block's bytes).
    pub max_header_list_size: u32,
    /// Bytes a client may send on one stream before the proxy has read them.
    pub initial_window_size: u32,
    /// Bytes a client may send on one connection, all streams together, before they are read.
    pub connection_window_size: u32,
    /// Largest frame payload the proxy accepts.
    pub max_frame_size: u32,
    /// Request body bytes read ahead before the request is served (nginx's
    /// `http2_body_preread_size`); 0 serves at once.
    pub body_preread: usize,
    /// Response bytes queued per stream for the client's connection; the response relay holds
    /// no more than this besides (one frame by default, as HAProxy's 16 KB buffer per stream).
    pub max_send_buffer: usize,
    /// Cheap-frame rates beyond which a connection gets GOAWAY(ENHANCE_YOUR_CALM).
    pub flood: guard::FloodLimits,
}

impl Http2Settings {
    /// The defaults, with the header list as large as an HTTP/1.1 head may be.
    pub fn defaults(max_request_head: usize) -> Http2Settings {
        let max_header_list_size = u32::try_from(max_request_head).unwrap_or(u32::MAX);
        Http2Settings {
            enabled: true,
            max_concurrent_streams: 128,
            max_header_list_size,
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_send_buffer: 16 * 1024,
            body_preread: 64 * 1024,
            flood: guard::FloodLimits {
                max_header_block: max_header_list_size.saturating_mul(2),
                ..guard::FloodLimits::default()
            },
        }
    }
}

/// The `[http2]` section as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileHttp2 {
    enabled: Option<bool>,
    max_concurrent_streams: Option<Spanned<u32>>,
    max_header_list_size: Option<Spanned<Size>>,
    initial_window_size: Option<Spanned<Size>>,
    connection_window_size: Option<Spanned<Size>>,
    max_frame_size: Option<Spanned<Size>>,
    max_send_buffer: Option<Spanned<Size>>,
    body_preread: Option<Spanned<Size>>,
    max_resets_per_second: Option<Spanned<u32>>,
    max_pings_per_second: Option<Spanned<u32>>,
    max_settings_per_second: Option<Spanned<u32>>,
    max_empty_frames_per_second: Option<Spanned<u32>>,
    max_header_block: Option<Spanned<Size>>,
}

/// Largest window HTTP/2 allows (RFC 9113 6.9.1).
const MAX_WINDOW: usize = (1 << 31) - 1;

impl Validator<'_> {
    /// The HTTP/2 settings; `max_request_head` sets the default header list size.
    pub(super) fn build_http2(&mut self, f: &FileHttp2, max_request_head: usize) -> Http2Settings {
        let d = Http2Settings::defaults(max_request_head);
        let max_header_list_size = self.bounded(
            &f.max_header_list_size,
            d.max_header_list_size as usize,
            (1024, 1 << 24),
            "max_header_list_size",
        ) as u32;
        let rate =
            |v: &Option<Spanned<u32>>, default: u32| v.as_ref().map_or(default, |s| *s.get_ref());
        let flood = guard::FloodLimits {
            resets_per_sec: rate(&f.max_resets_per_second, d.flood.resets_per_sec),
            pings_per_sec: rate(&f.max_pings_per_second, d.flood.pings_per_sec),
            settings_per_sec: rate(&f.max_settings_per_second, d.flood.settings_per_sec),
            empty_frames_per_sec: rate(
                &f.max_empty_frames_per_second,
                d.flood.empty_frames_per_sec,
            ),
            max_header_block: self.bounded(
                &f.max_header_block,
                max_header_list_size.saturating_mul(2) as usize,
                (1024, 1 << 26),
                "max_header_block",
            ) as u32,
        };
        for v in [
            &f.max_resets_per_second,
            &f.max_pings_per_second,
            &f.max_settings_per_second,
            &f.max_empty_frames_per_second,
        ]
        .into_iter()
        .flatten()
        {
            if *v.get_ref() == 0 {
                self.error(v.span().start, "a rate limit must be at least 1 per second");
            }
        }
        let streams = match &f.max_concurrent_streams {
            Some(s) if *s.get_ref() == 0 => {
                self.error(s.span().start, "max_concurrent_streams must be at least 1");
                d.max_concurrent_streams
            }
            Some(s) => *s.get_ref(),
            None => d.max_concurrent_streams,
        };
        Http2Settings {
            enabled: f.enabled.unwrap_or(d.enabled),
            max_concurrent_streams: streams,
            max_header_list_size,
            initial_window_size: self.bounded(
                &f.initial_window_size,
                d.initial_window_size as usize,
                (1024, MAX_WINDOW),
                "initial_window_size",
            ) as u32,
            connection_window_size: self.bounded(
                &f.connection_window_size,
                d.connection_window_size as usize,
                (65535, MAX_WINDOW),
                "connection_window_size",
            ) as u32,
            max_frame_size: self.bounded(
                &f.max_frame_size,
                d.max_frame_size as usize,
                (16384, (1 << 24) - 1),
                "max_frame_size",
            ) as u32,
            max_send_buffer: self.bounded(
                &f.max_send_buffer,
                d.max_send_buffer,
                (16384, 1 << 30),
                "max_send_buffer",
            ),
            body_preread: match &f.body_preread {
                Some(s) if matches!(s.get_ref(), Size::Bytes(0)) => 0,
                _ => self.bounded(
                    &f.body_preread,
                    d.body_preread,
                    (1, 1 << 24),
                    "body_preread",
                ),
            },
            flood,
        }
    }

    /// A size within `low..=high`, else an error naming `key` and the bounds.
    fn bounded(
        &mut self,
        v: &Option<Spanned<Size>>,
        default: usize,
        (low, high): (usize, usize),
        key: &str,
    ) -> usize {
        let n = self.size(v, default);
        if (low..=high).contains(&n) {
            return n;
        }
        let at = v.as_ref().map_or(0, |s| s.span().start);
        self.error(at, format!("{key} must be between {low} and {high} bytes"));
        default
    }
}
