//! A sans-IO scanner of the client's side of an HTTP/2 connection: it skips the connection
//! preface, reads each 9-byte frame header as the bytes pass by (in any split), and counts the
//! frames that cost the client almost nothing and the server real work. Each count is per
//! one-second window; crossing a limit is the verdict [`Verdict::Abuse`]. Resets are judged
//! against the streams the client opened as well: cancelling is normal (a gRPC client cancels
//! calls all day), so a reset rate over the limit is abuse only while the client has reset more
//! than half the streams it ever opened on the connection (Rapid Reset resets them all; Envoy's
//! premature-reset ratio is the same idea). The `h2` crate does the real parsing and answers
//! protocol errors; this only adds rates it does not keep.

/// The client connection preface (RFC 9113, 3.4).
pub const PREFACE_LEN: usize = 24;
/// Frame header length.
const HEADER_LEN: usize = 9;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const CONTINUATION: u8 = 0x9;

/// END_STREAM on DATA and HEADERS; ACK on SETTINGS and PING.
const FLAG_END_STREAM_OR_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;

/// What one connection may send per second, and the most bytes one header block may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimits {
    /// RST_STREAM frames (Rapid Reset, CVE-2023-44487), while they are also more than half
    /// the streams the client opened.
    pub resets_per_sec: u32,
    /// PING frames that are not acknowledgements, while they are also more than the streams
    /// the client opened in the same second (a busy gRPC client measures the link with a PING
    /// per burst of answers; a PING flood opens nothing).
    pub pings_per_sec: u32,
    /// SETTINGS frames that are not acknowledgements.
    pub settings_per_sec: u32,
    /// DATA without payload or END_STREAM, HEADERS or CONTINUATION without payload or
    /// END_HEADERS: frames that carry nothing.
    pub empty_frames_per_sec: u32,
    /// Bytes of one header block across HEADERS and its CONTINUATION frames (the CONTINUATION
    /// flood, CVE-2024-27316).
    pub max_header_block: u32,
}

impl Default for FloodLimits {
    fn default() -> Self {
        FloodLimits {
            resets_per_sec: 100,
            pings_per_sec: 20,
            settings_per_sec: 20,
            empty_frames_per_sec: 100,
            max_header_block: 64 * 1024,
        }
    }
}

/// Whether the connection may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing crossed a limit.
    Ok,
    /// A limit was crossed: the name of what was flooded.
    Abuse(&'static str),
}

/// Where the scanner is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Inside the preface, this many bytes seen.
    Preface(usize),
    /// Inside a frame header, this many bytes seen.
    Header(usize),
    /// Inside a payload, this many bytes left.
    Payload(u32),
}

/// Frame counts of the current window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    resets: u32,
    pings: u32,
    /// Streams opened in this window.
    opened: u32,
    settings: u32,
    empty: u32,
}

/// Scans one connection's inbound bytes.
#[derive(Debug, Clone)]
pub struct FrameGuard {
    limits: FloodLimits,
    position: Position,
    header: [u8; HEADER_LEN],
    /// Bytes of the header block in progress, when one is open.
    block: Option<u32>,
    counts: Counts,
    /// Streams the client opened and reset over the connection's life.
    opened: u64,
    reset: u64,
    /// The highest stream the client opened (a HEADERS on a higher one opens a new stream).
    last_stream: u32,
    /// Start of the current window, in the caller's milliseconds.
    window_start: u64,
    verdict: Verdict,
    /// Bytes of the last fed slice before the frame that crossed a limit.
    innocent: usize,
}

impl FrameGuard {
    /// A guard for a connection whose first bytes are the client preface.
    pub fn new(limits: FloodLimits) -> FrameGuard {
        FrameGuard {
            limits,
            position: Position::Preface(0),
            header: [0; HEADER_LEN],
            block: None,
            counts: Counts::default(),
            opened: 0,
            reset: 0,
            last_stream: 0,
            window_start: 0,
            verdict: Verdict::Ok,
            innocent: 0,
        }
    }

    /// Takes the next bytes the client sent, at `now_ms` (any monotonic millisecond clock).
    /// Once abuse is found the verdict stays.
    pub fn feed(&mut self, mut bytes: &[u8], now_ms: u64) -> Verdict {
        let total = bytes.len();
        if now_ms.saturating_sub(self.window_start) >= 1000 {
            self.window_start = now_ms;
            self.counts = Counts::default();
        }
        while !bytes.is_empty() && self.verdict == Verdict::Ok {
            match self.position {
                Position::Preface(seen) => {
                    let take = (PREFACE_LEN - seen).min(bytes.len());
                    bytes = &bytes[take..];
                    self.position = match seen + take {
                        PREFACE_LEN => Position::Header(0),
                        n => Position::Preface(n),
                    };
                }
                Position::Header(seen) => {
                    let take = (HEADER_LEN - seen).min(bytes.len());
                    self.header[seen..seen + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if seen + take < HEADER_LEN {
                        self.position = Position::Header(seen + take);
                        continue;
                    }
                    self.verdict = self.frame();
                    if self.verdict != Verdict::Ok {
                        self.innocent = (total - bytes.len()).saturating_sub(HEADER_LEN);
                    }
                    let len = self.length();
                    self.position = if len == 0 {
                        Position::Header(0)
                    } else {
                        Position::Payload(len)
                    };
                }
                Position::Payload(left) => {
                    let take = left.min(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
                    bytes = &bytes[take as usize..];
                    self.position = match left - take {
                        0 => Position::Header(0),
                        n => Position::Payload(n),
                    };
                }
            }
        }
        self.verdict
    }

    /// After [`Verdict::Abuse`]: how many bytes of the slice that found it came before the
    /// frame that crossed the limit (the bytes that may still be processed).
    pub fn innocent_len(&self) -> usize {
        self.innocent
    }

    /// The payload length of the frame header just read.
    fn length(&self) -> u32 {
        u32::from_be_bytes([0, self.header[0], self.header[1], self.header[2]])
    }

    /// Counts the frame whose header was just read.
    fn frame(&mut self) -> Verdict {
        let (len, kind, flags) = (self.length(), self.header[3], self.header[4]);
        let flag = |f: u8| flags & f == f;
        let limits = self.limits;
        let c = &mut self.counts;
        let over = |n: &mut u32, max: u32| {
            *n += 1;
            *n > max
        };
        let stream = u32::from_be_bytes([
            self.header[5] & 0x7f,
            self.header[6],
            self.header[7],
            self.header[8],
        ]);
        if kind == HEADERS && stream > self.last_stream {
            self.last_stream = stream;
            self.opened += 1;
            c.opened = c.opened.saturating_add(1);
        }
        if kind == RST_STREAM {
            self.reset += 1;
        }
        let mostly_resets = self.reset * 2 > self.opened;
        match kind {
            RST_STREAM if over(&mut c.resets, limits.resets_per_sec) && mostly_resets => {
                return Verdict::Abuse("RST_STREAM")
            }
            PING if !flag(FLAG_END_STREAM_OR_ACK)
                && over(&mut c.pings, limits.pings_per_sec)
                && c.pings > c.opened =>
            {
                return Verdict::Abuse("PING")
            }
            SETTINGS
                if !flag(FLAG_END_STREAM_OR_ACK)
                    && over(&mut c.settings, limits.settings_per_sec) =>
            {
                return Verdict::Abuse("SETTINGS")
            }
            _ => {}
        }
        let empty = len == 0
            && match kind {
                DATA => !flag(FLAG_END_STREAM_OR_ACK),
                HEADERS | CONTINUATION => !flag(FLAG_END_HEADERS),
                _ => false,
            };
        if empty && over(&mut c.empty, limits.empty_frames_per_sec) {
            return Verdict::Abuse("empty frames");
        }
        if kind == HEADERS || (kind == CONTINUATION && self.block.is_some()) {
            let total = self.block.unwrap_or(0).saturating_add(len);
            if total > limits.max_header_block {
                return Verdict::Abuse("CONTINUATION");
            }
            self.block = (!flag(FLAG_END_HEADERS)).then_some(total);
        }
        Verdict::Ok
    }
}

/// The client connection preface (RFC 9113, 3.4).
pub const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn connection(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        for f in frames {
            bytes.extend_from_slice(f);
        }
        bytes
    }

    #[test]
    fn ordinary_traffic_passes_in_any_split() {
        let mut frames = vec![frame(SETTINGS, 0, 0, &[0; 6]), frame(SETTINGS, 1, 0, &[])];
        for id in (1..200).step_by(2) {
            frames.push(frame(HEADERS, 0x4, id, &[0x82; 20]));
            frames.push(frame(DATA, 1, id, &[7; 100]));
        }
        frames.push(frame(PING, 0, 0, &[0; 8]));
        let bytes = connection(&frames);
        for chunk in [1, 2, 9, 10, 4096] {
            let mut guard = FrameGuard::new(FloodLimits::default());
            for piece in bytes.chunks(chunk) {
                assert_eq!(guard.feed(piece, 0), Verdict::Ok, "chunk {chunk}");
            }
            assert_eq!(guard.position, Position::Header(0));
        }
    }

    #[test]
    fn rapid_reset_pings_settings_and_empty_frames_are_abuse_beyond_their_rate() {
        let cases: [(Vec<u8>, &str); 4] = [
            (frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]), "RST_STREAM"),
            (frame(PING, 0, 0, &[0; 8]), "PING"),
            (frame(SETTINGS, 0, 0, &[]), "SETTINGS"),
            (frame(DATA, 0, 1, &[]), "empty frames"),
        ];
        for (one, name) in cases {
            let limits = FloodLimits::default();
            let mut guard = FrameGuard::new(limits);
            assert_eq!(guard.feed(PREFACE, 0), Verdict::Ok);
            let mut verdict = Verdict::Ok;
            for i in 0..200u64 {
                // Spread over one second: a second later the count starts again.
                verdict = guard.feed(&one, i * 4);
                if verdict != Verdict::Ok {
                    break;
                }
            }
            assert_eq!(verdict, Verdict::Abuse(name));
            // The same frames at a lower rate pass.
            let mut slow = FrameGuard::new(limits);
            slow.feed(PREFACE, 0);
            for i in 0..200u64 {
                assert_eq!(slow.feed(&one, i * 100), Verdict::Ok, "{name}");
            }
        }
    }

    #[test]
    fn resets_among_many_completed_streams_pass_and_rapid_reset_does_not() {
        let reset = |id| frame(RST_STREAM, 0, id, &[0, 0, 0, 8]);
        let open = |id| frame(HEADERS, 0x5, id, &[0x82; 20]);
        // A client cancelling one call in three, 900 calls in one second.
        let mut cancelling = FrameGuard::new(FloodLimits::default());
        cancelling.feed(PREFACE, 0);
        for (n, id) in (1..1800u32).step_by(2).enumerate() {
            assert_eq!(cancelling.feed(&open(id), 0), Verdict::Ok);
            if n % 3 == 0 {
                assert_eq!(cancelling.feed(&reset(id), 0), Verdict::Ok, "call {n}");
            }
        }
        // Then cancels 120 of those still open in the next second (over the rate, but 420 of
        // 900 in all is not more than half).
        for id in (1..1800u32).step_by(6).take(120) {
            assert_eq!(cancelling.feed(&reset(id + 2), 1000), Verdict::Ok);
        }
        // Rapid Reset: each stream opened and reset at once.
        let mut attack = FrameGuard::new(FloodLimits::default());
        attack.feed(PREFACE, 0);
        let mut verdict = Verdict::Ok;
        for id in (1..1000u32).step_by(2) {
            attack.feed(&open(id), 0);
            verdict = attack.feed(&reset(id), 0);
            if verdict != Verdict::Ok {
                assert_eq!(id, 2 * 100 + 1, "cut at the limit");
                break;
            }
        }
        assert_eq!(verdict, Verdict::Abuse("RST_STREAM"));
        // Trailers (HEADERS on an open stream) open nothing.
        let mut trailers = FrameGuard::new(FloodLimits::default());
        trailers.feed(PREFACE, 0);
        trailers.feed(&open(1), 0);
        trailers.feed(&open(1), 0);
        assert_eq!(trailers.opened, 1);
    }

    #[test]
    fn a_busy_grpc_clients_pings_pass_and_a_ping_flood_does_not() {
        let ping = frame(PING, 0, 0, &[0; 8]);
        let open = |id| frame(HEADERS, 0x5, id, &[0x82; 20]);
        // grpc-go under load: a PING (its bandwidth probe) for every few calls, 300 a second.
        let mut busy = FrameGuard::new(FloodLimits::default());
        busy.feed(PREFACE, 0);
        for (n, id) in (1..2400u32).step_by(2).enumerate() {
            assert_eq!(busy.feed(&open(id), 0), Verdict::Ok);
            if n % 4 == 0 {
                assert_eq!(busy.feed(&ping, 0), Verdict::Ok, "call {n}");
            }
        }
        // A flood: PINGs and nothing else, cut at the limit.
        let mut flood = FrameGuard::new(FloodLimits::default());
        flood.feed(PREFACE, 0);
        for n in 1..=20 {
            assert_eq!(flood.feed(&ping, 0), Verdict::Ok, "ping {n}");
        }
        assert_eq!(flood.feed(&ping, 0), Verdict::Abuse("PING"));
        // Opening a stream now and then does not buy a flood.
        let mut sly = FrameGuard::new(FloodLimits::default());
        sly.feed(PREFACE, 0);
        let mut verdict = Verdict::Ok;
        for n in 0..100u32 {
            if n % 10 == 0 {
                sly.feed(&open(2 * n + 1), 0);
            }
            verdict = sly.feed(&ping, 0);
            if verdict != Verdict::Ok {
                break;
            }
        }
        assert_eq!(verdict, Verdict::Abuse("PING"));
    }

    #[test]
    fn acknowledgements_are_not_counted() {
        let mut guard = FrameGuard::new(FloodLimits::default());
        guard.feed(PREFACE, 0);
        for _ in 0..1000 {
            assert_eq!(guard.feed(&frame(PING, 1, 0, &[0; 8]), 0), Verdict::Ok);
            assert_eq!(guard.feed(&frame(SETTINGS, 1, 0, &[]), 0), Verdict::Ok);
        }
    }

    #[test]
    fn an_endless_header_block_is_abuse() {
        let mut guard = FrameGuard::new(FloodLimits::default());
        guard.feed(PREFACE, 0);
        assert_eq!(
            guard.feed(&frame(HEADERS, 0, 1, &[0; 16384]), 0),
            Verdict::Ok
        );
        let more = frame(CONTINUATION, 0, 1, &[0; 16384]);
        for _ in 0..3 {
            // Up to 64 KB in all.
            assert_eq!(guard.feed(&more, 0), Verdict::Ok);
        }
        assert_eq!(guard.feed(&more, 0), Verdict::Abuse("CONTINUATION"));
        // A block that ends in time resets the count.
        let mut ok = FrameGuard::new(FloodLimits::default());
        ok.feed(PREFACE, 0);
        for id in (1..100).step_by(2) {
            ok.feed(&frame(HEADERS, 0, id, &[0; 16384]), 0);
            assert_eq!(
                ok.feed(&frame(CONTINUATION, 4, id, &[0; 16384]), 0),
                Verdict::Ok
            );
        }
    }
}
