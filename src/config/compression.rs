//! The `[compression]` section: how responses are compressed on routes that ask for it
//! (`compress = true` on a route, `--compress` on the one-liners): the codings offered and
//! their order, the level of each, what is worth compressing, and the static-file cache.

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::compress::{Coding, Settings};

/// The `[compression]` section as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCompression {
    algorithms: Option<Spanned<Vec<String>>>,
    gzip_level: Option<Spanned<u32>>,
    brotli_level: Option<Spanned<u32>>,
    zstd_level: Option<Spanned<i32>>,
    min_length: Option<Spanned<Size>>,
    types: Option<Spanned<Vec<String>>>,
    static_cache: Option<Spanned<Size>>,
    static_cache_max_file: Option<Spanned<Size>>,
}

impl Validator<'_> {
    /// The compression settings.
    pub(super) fn build_compression(&mut self, f: &FileCompression) -> Settings {
        let d = Settings::default();
        let mut s = Settings {
            order: d.order.clone(),
            gzip_level: self.level(f.gzip_level.as_ref(), 1, 9, d.gzip_level),
            brotli_level: self.level(f.brotli_level.as_ref(), 0, 11, d.brotli_level),
            zstd_level: self.level(f.zstd_level.as_ref(), 1, 19, d.zstd_level),
            min_length: self.size_or_zero(f.min_length.as_ref(), d.min_length as usize) as u64,
            types: d.types.clone(),
            static_cache: self.size_or_zero(f.static_cache.as_ref(), d.static_cache),
            static_cache_max_file: self
                .size(&f.static_cache_max_file, d.static_cache_max_file as usize)
                as u64,
        };
        if let Some(list) = &f.algorithms {
            s.order.clear();
            for name in list.get_ref() {
                match Coding::from_name(name.as_bytes()) {
                    Some(c) if !s.order.contains(&c) => s.order.push(c),
                    Some(_) => self.error(list.span().start, format!("{name:?} listed twice")),
                    None => self.error(
                        list.span().start,
                        format!("unknown algorithm {name:?}: use \"zstd\", \"br\" or \"gzip\""),
                    ),
                }
            }
            if s.order.is_empty() && list.get_ref().is_empty() {
                let message = "algorithms is empty: leave compress off on routes instead";
                self.error(list.span().start, message);
            }
        }
        if let Some(types) = &f.types {
            s.types.clear();
            for t in types.get_ref() {
                let t = t.trim().to_ascii_lowercase();
                if !t.contains('/') || t.matches('*').count() > 1 {
                    let message = format!(
                        "invalid media type {t:?}: use e.g. \"text/*\", \"application/json\""
                    );
                    self.error(types.span().start, message);
                }
                s.types.push(t);
            }
        }
        s
    }

    fn level<T>(&mut self, v: Option<&Spanned<T>>, min: T, max: T, default: T) -> T
    where
        T: Copy + PartialOrd + std::fmt::Display,
    {
        let Some(v) = v else { return default };
        let level = *v.get_ref();
        if level < min || level > max {
            self.error(v.span().start, format!("level must be {min} to {max}"));
            return default;
        }
        level
    }

    /// A size where 0 is allowed (off, or no minimum).
    fn size_or_zero(&mut self, v: Option<&Spanned<Size>>, default: usize) -> usize {
        match v.map(Spanned::get_ref) {
            Some(Size::Bytes(0)) => 0,
            Some(Size::Text(t)) if t.trim() == "0" => 0,
            _ => self.size(&v.cloned(), default),
        }
    }
}
