//! nginx's `expires`: the `Expires` and `Cache-Control` fields a site or route writes on its
//! successful responses (200, 201, 204, 206, 301, 302, 303, 304, 307, 308), replacing the
//! ones the response had. Parsed at load ([`Expires::parse`]); the fields are made when a
//! response is sent ([`Expires::fields`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An `expires` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expires {
    /// `epoch`: expired since 1970, `no-cache`.
    Epoch,
    /// `max`: the end of 2037, ten years of `max-age`.
    Max,
    /// A time from now, in seconds; negative: already expired, `no-cache`.
    After(i64),
    /// `@15h30m`: the next time of day (UTC) at this many seconds past midnight.
    Daily(u32),
}

/// nginx's `max` date and age.
const MAX_DATE: &str = "Thu, 31 Dec 2037 23:55:55 GMT";
const MAX_AGE: u64 = 315_360_000;
const DAY: u64 = 86_400;

impl Expires {
    /// Parses nginx's forms: `epoch`, `max`, `off` (None), a time (`30d`, `1h30m`, `-1`,
    /// `0`), `@15h30m`; `modified` forms are refused.
    pub fn parse(text: &str) -> Result<Option<Expires>, String> {
        let text = text.trim();
        match text {
            "off" => return Ok(None),
            "epoch" => return Ok(Some(Expires::Epoch)),
            "max" => return Ok(Some(Expires::Max)),
            _ => {}
        }
        if text.starts_with("modified") {
            return Err("\"modified\" times are not supported yet".into());
        }
        if let Some(time) = text.strip_prefix('@') {
            let secs = seconds(time).filter(|s| *s < DAY).ok_or_else(|| {
                format!("{text:?}: a time of day is @HhMm, before 24h (e.g. @15h30m)")
            })?;
            return Ok(Some(Expires::Daily(secs as u32)));
        }
        let (negative, time) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let secs = seconds(time).ok_or_else(|| {
            format!("{text:?}: expires is epoch, max, off, @HhMm or a time such as 30d, 1h30m, -1")
        })?;
        // HTTP dates end with the year 9999; nginx's `max` is ten years.
        if secs > 100 * 365 * DAY {
            return Err(format!("{text:?}: at most 100 years (\"max\" is ten)"));
        }
        let secs = i64::try_from(secs).map_err(|_| format!("{text:?}: too long"))?;
        Ok(Some(Expires::After(if negative { -secs } else { secs })))
    }

    /// The field lines for a response sent at `now`.
    pub fn fields(self, now: SystemTime) -> Vec<u8> {
        let unix = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let (expires, control) = match self {
            Expires::Epoch => (
                "Thu, 01 Jan 1970 00:00:01 GMT".to_string(),
                "no-cache".to_string(),
            ),
            Expires::Max => (MAX_DATE.to_string(), format!("max-age={MAX_AGE}")),
            Expires::After(secs) if secs < 0 => {
                let then = unix.saturating_sub(secs.unsigned_abs());
                (date(then), "no-cache".to_string())
            }
            Expires::After(secs) => {
                let secs = secs.unsigned_abs();
                (date(unix.saturating_add(secs)), format!("max-age={secs}"))
            }
            Expires::Daily(at) => {
                let midnight = unix - unix % DAY;
                let mut then = midnight + u64::from(at);
                if then <= unix {
                    then += DAY;
                }
                (date(then), format!("max-age={}", then - unix))
            }
        };
        format!("Expires: {expires}\r\nCache-Control: {control}\r\n").into_bytes()
    }
}

/// An HTTP date for seconds since 1970.
fn date(unix: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(unix))
}

/// nginx's time syntax (`ngx_parse_time`: number-unit pairs with units `ms s m h d w M y`,
/// a bare number is seconds), in milliseconds: `1h30m`, `30d`, `0`. `slipstream import`
/// reads nginx's times with it too.
pub fn nginx_time_ms(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = match rest.as_bytes() {
            [b'm', b's', ..] => (1, 2),
            [b's', ..] => (1000, 1),
            [b'm', ..] => (60_000, 1),
            [b'h', ..] => (3_600_000, 1),
            [b'd', ..] => (DAY * 1000, 1),
            [b'w', ..] => (7 * DAY * 1000, 1),
            [b'M', ..] => (30 * DAY * 1000, 1),
            [b'y', ..] => (365 * DAY * 1000, 1),
            [] => (1000, 0),
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = rest[len..].trim_start();
    }
    Some(total)
}

/// An nginx time in whole seconds (milliseconds dropped).
fn seconds(text: &str) -> Option<u64> {
    nginx_time_ms(text).map(|ms| ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix)
    }

    fn text(e: &str, now: u64) -> String {
        let e = Expires::parse(e).unwrap().unwrap();
        String::from_utf8(e.fields(at(now))).unwrap()
    }

    #[test]
    fn forms_as_nginx_writes_them() {
        // 2026-11-26 00:00:00 UTC.
        let now = 1_795_651_200;
        assert_eq!(
            text("epoch", now),
            "Expires: Thu, 01 Jan 1970 00:00:01 GMT\r\nCache-Control: no-cache\r\n"
        );
        assert_eq!(
            text("max", now),
            "Expires: Thu, 31 Dec 2037 23:55:55 GMT\r\nCache-Control: max-age=315360000\r\n"
        );
        assert_eq!(
            text("1h", now),
            "Expires: Thu, 26 Nov 2026 01:00:00 GMT\r\nCache-Control: max-age=3600\r\n"
        );
        assert_eq!(
            text("0", now),
            "Expires: Thu, 26 Nov 2026 00:00:00 GMT\r\nCache-Control: max-age=0\r\n"
        );
        assert_eq!(
            text("-1", now),
            "Expires: Wed, 25 Nov 2026 23:59:59 GMT\r\nCache-Control: no-cache\r\n"
        );
        assert_eq!(
            text("@15h30m", now + 3600),
            "Expires: Thu, 26 Nov 2026 15:30:00 GMT\r\nCache-Control: max-age=52200\r\n"
        );
        // Past today's time: tomorrow's.
        assert_eq!(
            text("@0h30m", now + 3600),
            "Expires: Fri, 27 Nov 2026 00:30:00 GMT\r\nCache-Control: max-age=84600\r\n"
        );
    }

    #[test]
    fn times_and_refusals() {
        assert_eq!(Expires::parse("off"), Ok(None));
        assert_eq!(Expires::parse("30d"), Ok(Some(Expires::After(30 * 86_400))));
        assert_eq!(Expires::parse("1h30m"), Ok(Some(Expires::After(5400))));
        assert_eq!(Expires::parse("1y"), Ok(Some(Expires::After(365 * 86_400))));
        assert_eq!(Expires::parse("90"), Ok(Some(Expires::After(90))));
        assert!(Expires::parse("modified 1h").is_err());
        assert!(Expires::parse("@25h").is_err());
        assert!(Expires::parse("1x").is_err());
        assert!(Expires::parse("").is_err());
        assert!(Expires::parse("h").is_err());
        assert!(Expires::parse("99999999999999999999y").is_err());
        assert!(Expires::parse("8000y").is_err());
        assert!(Expires::parse("-8000y").is_err());
    }
}
