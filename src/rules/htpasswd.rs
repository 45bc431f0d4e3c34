//! htpasswd files and HTTP Basic credentials: what nginx's `auth_basic` and
//! `auth_basic_user_file` need, socket-free. The file is read and checked once, at config load
//! ([`Htpasswd::load`]), so a malformed or unsupported line is a load error with its line number
//! instead of a 401 or 500 for that user at run time (nginx re-reads the file on every request
//! and only then finds the line it cannot use). A request's `Authorization` value is split by
//! [`basic_credentials`] and checked with [`Htpasswd::verify`]; a worker keeps a
//! [`VerifiedCache`] so that a logged-in client's requests do not each pay for bcrypt.
//!
//! # The file, as nginx reads it
//! One `user:hash` per line; `#` at the start of a line makes it a comment; blank lines and CR
//! line ends are fine. The hash ends at the next `:` (nginx's documented `user:hash:comment`), so
//! a `{PLAIN}` password cannot hold a `:`. When a user appears twice the first line wins, as in
//! nginx. The user name is taken as written (spaces included), and it is compared exactly.
//!
//! # Hash formats
//! | format | made by | how it is checked here |
//! | --- | --- | --- |
//! | `$2y$`, `$2b$`, `$2a$` bcrypt, cost 4 to 17 | `htpasswd -B` | `bcrypt` crate |
//! | `$apr1$` (Apache MD5), `$1$` (MD5-crypt) | `htpasswd -m`, `openssl passwd -1` | this module, on `md-5` |
//! | `$5$`, `$6$` SHA-crypt, up to 10,000,000 rounds | `htpasswd -2`, `-5` | `sha-crypt` crate |
//! | `{SHA}` (base64 SHA-1), `{SSHA}` (salted) | `htpasswd -s`, `slappasswd` | `aws-lc-rs` SHA-1 |
//! | `{PLAIN}` | by hand | SHA-256 of both sides, compared |
//!
//! Refused at load, each with its reason: traditional DES crypt (13 characters, `htpasswd -d`:
//! no well-kept pure Rust crate does it, and it only reads 8 characters of a password), `$2x$`
//! (the bcrypt variant kept for an old 8-bit bug), yescrypt `$y$` and other crypt(3) formats,
//! a plain-text password without its `{PLAIN}` prefix (`htpasswd -p`; nginx would treat it as a
//! DES hash), and bcrypt costs or SHA-crypt rounds so high that each request would cost a worker
//! seconds of CPU. A password holding a NUL byte never matches (nginx's C strings would cut it
//! there, so it could match a prefix).
//!
//! Every comparison of digests is in constant time (`aws_lc_rs::constant_time`; the `bcrypt`
//! and `sha-crypt` crates compare with `subtle`). Which user names exist is not hidden: an
//! unknown user fails at once, as in nginx.
//!
//! # Crates, and why
//! - `bcrypt` (Keats/rust-bcrypt, MIT): the most used pure Rust bcrypt, maintained, built on
//!   RustCrypto's `blowfish`; it reads `$2a$`, `$2b$` and `$2y$` and truncates at 72 bytes as
//!   libxcrypt does. Default features off but `std` (no zeroize: no password is kept).
//! - `sha-crypt` (RustCrypto): `$5$` and `$6$` as glibc and libxcrypt define them; verification
//!   by its `PasswordVerifier`.
//! - `md-5` (RustCrypto), renamed `md5_digest` in Cargo.toml because the dev-dependency `md5`
//!   (another crate) has the same library name: MD5 for `$apr1$` and `$1$`, whose short
//!   algorithm (Poul-Henning Kamp's MD5-crypt; apr1 only changes the magic string) is written
//!   here from its description.
//! - `aws-lc-rs`, already in the tree through rustls: SHA-1, SHA-256, HMAC, the random key of
//!   [`VerifiedCache`] and constant-time comparison, with no new crate.
//! - `pwhash` (the only crate found with DES crypt) was not taken: it is unmaintained, and its
//!   fork is little used.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use aws_lc_rs::{constant_time, digest, hmac, rand};
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine as _};
use md5_digest::{Digest as _, Md5};
use sha_crypt::{PasswordVerifier as _, ShaCrypt};

/// The highest bcrypt cost accepted: `htpasswd -C` allows 4 to 17, and 17 already costs a
/// worker several seconds a check.
const MAX_BCRYPT_COST: u32 = 17;

/// The most SHA-crypt rounds accepted: about as slow as bcrypt's cost 17.
const MAX_SHA_CRYPT_ROUNDS: u32 = 10_000_000;

/// The fewest SHA-crypt rounds libxcrypt accepts (it refuses a hash with fewer).
const MIN_SHA_CRYPT_ROUNDS: u32 = 1_000;

/// SHA-crypt's rounds when the hash does not name them.
const DEFAULT_SHA_CRYPT_ROUNDS: u32 = 5_000;

/// crypt(3)'s base64 alphabet (MD5-crypt, SHA-crypt, DES).
const CRYPT_ALPHABET: &[u8; 64] =
    b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// What an error about an unusable hash says can be used instead.
const SUPPORTED: &str = "supported: $2y$/$2b$/$2a$ bcrypt, $apr1$, $1$, $5$, $6$, {SHA}, \
                         {SSHA}, {PLAIN}; htpasswd -B makes bcrypt";

/// The users of one htpasswd file, loaded at config load: checked once, then shared by every
/// worker (cloning shares the table).
#[derive(Clone)]
pub struct Htpasswd {
    inner: Arc<Users>,
}

/// The parsed file.
struct Users {
    /// User name to its hash.
    entries: HashMap<String, Entry>,
    /// SHA-256 of the file's text: which file this is, for [`VerifiedCache`]'s keys, so an
    /// edited file (a reload) never answers from what the old one verified.
    identity: [u8; 32],
}

/// One user's password hash, decoded at load.
enum Entry {
    /// `$2y$`, `$2b$` or `$2a$`: the whole hash, already checked to parse.
    Bcrypt(String),
    /// `$apr1$` or `$1$`.
    Md5Crypt {
        apr1: bool,
        salt: Vec<u8>,
        checksum: [u8; 22],
    },
    /// `$5$` or `$6$`: the whole hash, already checked.
    ShaCrypt { hash: String, rounds: u32 },
    /// `{SHA}`: the SHA-1 of the password.
    Sha1([u8; 20]),
    /// `{SSHA}`: the SHA-1 of the password and the salt, then the salt.
    SaltedSha1 { digest: [u8; 20], salt: Vec<u8> },
    /// `{PLAIN}`: the SHA-256 of the password (compared with the candidate's, so neither the
    /// password nor its length is compared byte by byte).
    Plain([u8; 32]),
}

impl fmt::Debug for Htpasswd {
    /// The count only: user names and hashes stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Htpasswd")
            .field("users", &self.len())
            .finish_non_exhaustive()
    }
}

impl Htpasswd {
    /// Parses the file's text; lines `user:hash`, `#` comments and blank lines skipped.
    /// Error: "line N: reason".
    pub fn parse(text: &str) -> Result<Htpasswd, String> {
        let mut entries = HashMap::new();
        for (index, raw) in text.split('\n').enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (user, entry) =
                parse_line(line).map_err(|reason| format!("line {}: {reason}", index + 1))?;
            // The first line of a user wins, as in nginx.
            entries.entry(user.to_owned()).or_insert(entry);
        }
        let identity = sha256(text.as_bytes());
        Ok(Htpasswd {
            inner: Arc::new(Users { entries, identity }),
        })
    }

    /// Reads and parses a file, for `auth_basic_user_file` at config load (the error names
    /// the path).
    pub fn load(path: &Path) -> Result<Htpasswd, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| format!("{}: not UTF-8 text: {e}", path.display()))?;
        Htpasswd::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether `user` with `password` is accepted: the check behind `auth_basic`. Runs the
    /// hash (bcrypt: milliseconds to seconds); see [`VerifiedCache`] to skip repeats.
    pub fn verify(&self, user: &str, password: &[u8]) -> bool {
        if password.contains(&0) {
            return false;
        }
        self.inner
            .entries
            .get(user)
            .is_some_and(|entry| entry.verify(password))
    }

    /// Whether the file names `user`: lets the caller log "user not found" apart from
    /// "password mismatch", as nginx does.
    pub fn contains(&self, user: &str) -> bool {
        self.inner.entries.contains_key(user)
    }

    /// How many users the file has (for logs and the admin view).
    pub fn len(&self) -> usize {
        self.inner.entries.len()
    }

    /// Whether the file has no user at all (every request would then be refused).
    pub fn is_empty(&self) -> bool {
        self.inner.entries.is_empty()
    }

    /// The user names (for the fuzz target).
    pub(crate) fn users(&self) -> impl Iterator<Item = &str> {
        self.inner.entries.keys().map(String::as_str)
    }

    /// Whether checking `user`'s password is cheap (well under a millisecond): not bcrypt, and
    /// no more SHA-crypt rounds than the minimum. The fuzz target verifies only these.
    pub(crate) fn is_cheap(&self, user: &str) -> bool {
        match self.inner.entries.get(user) {
            Some(Entry::Bcrypt(_)) => false,
            Some(Entry::ShaCrypt { rounds, .. }) => *rounds <= MIN_SHA_CRYPT_ROUNDS,
            Some(_) => true,
            None => true,
        }
    }
}

/// Splits one non-comment line into its user and decoded hash.
fn parse_line(line: &str) -> Result<(&str, Entry), String> {
    let Some((user, rest)) = line.split_once(':') else {
        return Err("no ':' between the user name and the password hash".into());
    };
    if user.is_empty() {
        return Err("empty user name".into());
    }
    // nginx ends the hash at the next ':'; what follows is a comment.
    let hash = rest.split_once(':').map_or(rest, |(hash, _)| hash);
    if hash.is_empty() {
        return Err(format!("no password hash for user {user:?}"));
    }
    if hash.ends_with([' ', '\t']) {
        return Err("white space after the password hash".into());
    }
    Ok((user, parse_hash(hash)?))
}

/// Decodes one hash, or says why it cannot be used.
fn parse_hash(hash: &str) -> Result<Entry, String> {
    if let Some(plain) = hash.strip_prefix("{PLAIN}") {
        return Ok(Entry::Plain(sha256(plain.as_bytes())));
    }
    if let Some(encoded) = hash.strip_prefix("{SHA}") {
        return parse_sha1(encoded);
    }
    if let Some(encoded) = hash.strip_prefix("{SSHA}") {
        return parse_salted_sha1(encoded);
    }
    if let Some(rest) = hash.strip_prefix('$') {
        let id = rest.split('$').next().unwrap_or_default();
        return match id {
            "2y" | "2b" | "2a" => parse_bcrypt(hash),
            "apr1" => parse_md5_crypt(hash, true),
            "1" => parse_md5_crypt(hash, false),
            "5" | "6" => parse_sha_crypt(hash, id == "6"),
            "2x" => Err(format!(
                "$2x$ bcrypt (kept for an old 8-bit bug) is not supported ({SUPPORTED})"
            )),
            "y" | "gy" => Err(format!("yescrypt is not supported ({SUPPORTED})")),
            _ => {
                let id: String = id.chars().take(16).collect();
                Err(format!("unsupported hash format ${id}$ ({SUPPORTED})"))
            }
        };
    }
    if hash.len() == 13 && hash.bytes().all(is_crypt_char) {
        return Err("DES crypt is not supported: re-create the entry with htpasswd -B".into());
    }
    Err(format!(
        "unknown password hash format ({SUPPORTED}; a plain-text password needs the {{PLAIN}} \
         prefix)"
    ))
}

/// `{SHA}`: the standard base64 of a 20-byte SHA-1 digest.
fn parse_sha1(encoded: &str) -> Result<Entry, String> {
    let bytes = STANDARD.decode(encoded).ok();
    match bytes.as_deref().map(<[u8; 20]>::try_from) {
        Some(Ok(digest)) => Ok(Entry::Sha1(digest)),
        _ => Err("{SHA} needs the base64 of a 20-byte SHA-1 digest".into()),
    }
}

/// `{SSHA}`: the standard base64 of a SHA-1 digest followed by its salt.
fn parse_salted_sha1(encoded: &str) -> Result<Entry, String> {
    let bytes = STANDARD.decode(encoded).unwrap_or_default();
    let Some((digest, salt)) = bytes.split_first_chunk::<20>() else {
        return Err("{SSHA} needs the base64 of a 20-byte SHA-1 digest and its salt".into());
    };
    Ok(Entry::SaltedSha1 {
        digest: *digest,
        salt: salt.to_vec(),
    })
}

/// `$2y$NN$` + 53 characters: checked to parse now so that verifying cannot fail later.
fn parse_bcrypt(hash: &str) -> Result<Entry, String> {
    if hash.len() != 60 {
        return Err("a bcrypt hash is 60 characters".into());
    }
    let cost_text = &hash.as_bytes()[4..6];
    if !cost_text.iter().all(u8::is_ascii_digit) || hash.as_bytes()[6] != b'$' {
        return Err("a bcrypt hash has a two-digit cost after its prefix".into());
    }
    let cost = u32::from(cost_text[0] - b'0') * 10 + u32::from(cost_text[1] - b'0');
    if !(4..=MAX_BCRYPT_COST).contains(&cost) {
        return Err(format!(
            "bcrypt cost {cost} is outside 4 to {MAX_BCRYPT_COST} (each request would take \
             too long above that)"
        ));
    }
    hash.parse::<bcrypt::HashParts>()
        .map_err(|e| format!("malformed bcrypt hash: {e}"))?;
    Ok(Entry::Bcrypt(hash.to_owned()))
}

/// `$apr1$salt$checksum` or `$1$salt$checksum`: a salt of up to 8 characters and a 22-character
/// checksum.
fn parse_md5_crypt(hash: &str, apr1: bool) -> Result<Entry, String> {
    let magic = if apr1 { "$apr1$" } else { "$1$" };
    let rest = hash.strip_prefix(magic).unwrap_or_default();
    let Some((salt, checksum)) = rest.split_once('$') else {
        return Err(format!("a {magic} hash is {magic}salt$checksum"));
    };
    if salt.len() > 8 {
        return Err(format!("a {magic} salt is at most 8 characters"));
    }
    let Some(checksum) = crypt_checksum::<22>(checksum, 4) else {
        return Err(format!(
            "a {magic} checksum is 22 characters of ./0-9A-Za-z"
        ));
    };
    Ok(Entry::Md5Crypt {
        apr1,
        salt: salt.as_bytes().to_vec(),
        checksum,
    })
}

/// `$5$[rounds=N$]salt$checksum` (43 characters) or the same with `$6$` (86 characters).
fn parse_sha_crypt(hash: &str, sha512: bool) -> Result<Entry, String> {
    let magic = if sha512 { "$6$" } else { "$5$" };
    let Some(rest) = hash.strip_prefix(magic) else {
        return Err(format!("a {magic} hash is {magic}[rounds=N$]salt$checksum"));
    };
    let fields: Vec<&str> = rest.split('$').collect();
    let (rounds, salt, checksum) = match fields.as_slice() {
        [rounds, salt, checksum] => (sha_crypt_rounds(rounds)?, *salt, *checksum),
        [salt, checksum] => (DEFAULT_SHA_CRYPT_ROUNDS, *salt, *checksum),
        _ => return Err(format!("a {magic} hash is {magic}[rounds=N$]salt$checksum")),
    };
    if salt.is_empty() || salt.len() > 16 || !salt.bytes().all(is_crypt_char) {
        return Err(format!(
            "a {magic} salt is 1 to 16 characters of ./0-9A-Za-z"
        ));
    }
    let valid = if sha512 {
        crypt_checksum::<86>(checksum, 4).is_some()
    } else {
        crypt_checksum::<43>(checksum, 16).is_some()
    };
    if !valid {
        let length = if sha512 { 86 } else { 43 };
        return Err(format!(
            "a {magic} checksum is {length} characters of ./0-9A-Za-z"
        ));
    }
    Ok(Entry::ShaCrypt {
        hash: hash.to_owned(),
        rounds,
    })
}

/// `rounds=N`, N written as libxcrypt writes it (no sign, no leading zero) and in range.
fn sha_crypt_rounds(field: &str) -> Result<u32, String> {
    let digits = field.strip_prefix("rounds=").unwrap_or_default();
    let plain = !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    let rounds = digits.parse::<u32>().ok().filter(|_| plain);
    match rounds {
        Some(n) if (MIN_SHA_CRYPT_ROUNDS..=MAX_SHA_CRYPT_ROUNDS).contains(&n) => Ok(n),
        Some(n) if n > MAX_SHA_CRYPT_ROUNDS => Err(format!(
            "SHA-crypt rounds={n} is above {MAX_SHA_CRYPT_ROUNDS} (each request would take too \
             long)"
        )),
        _ => Err(format!(
            "SHA-crypt rounds must be rounds=N with N from {MIN_SHA_CRYPT_ROUNDS} to \
             {MAX_SHA_CRYPT_ROUNDS}"
        )),
    }
}

/// A crypt(3) checksum of `N` characters from its alphabet whose last character encodes fewer
/// bits than six (its index is below `last_below`), so that some digest writes it.
fn crypt_checksum<const N: usize>(text: &str, last_below: usize) -> Option<[u8; N]> {
    let checksum = <[u8; N]>::try_from(text.as_bytes()).ok()?;
    let last = CRYPT_ALPHABET.iter().position(|&c| c == checksum[N - 1])?;
    (checksum.iter().all(|&b| is_crypt_char(b)) && last < last_below).then_some(checksum)
}

/// Whether `b` is in crypt(3)'s base64 alphabet.
fn is_crypt_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'/'
}

impl Entry {
    /// Whether `password` (free of NUL bytes) matches this hash.
    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Entry::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Entry::Md5Crypt {
                apr1,
                salt,
                checksum,
            } => equal(&md5_crypt(password, *apr1, salt), checksum),
            Entry::ShaCrypt { hash, .. } => ShaCrypt::default()
                .verify_password(password, hash.as_str())
                .is_ok(),
            Entry::Sha1(expected) => equal(&sha1(&[password]), expected),
            Entry::SaltedSha1 { digest, salt } => equal(&sha1(&[password, salt]), digest),
            Entry::Plain(expected) => equal(&sha256(password), expected),
        }
    }
}

/// Compares two digests in constant time.
fn equal(a: &[u8], b: &[u8]) -> bool {
    constant_time::verify_slices_are_equal(a, b).is_ok()
}

/// SHA-1 of the parts, one after the other.
fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut context = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    for part in parts {
        context.update(part);
    }
    let mut out = [0; 20];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// SHA-256 of `data`.
fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// MD5 of the parts, one after the other.
fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut context = Md5::new();
    for part in parts {
        context.update(part);
    }
    context.finalize().into()
}

/// MD5-crypt's checksum (22 characters) of `password` with `salt`; `apr1` only changes the
/// magic string mixed in.
fn md5_crypt(password: &[u8], apr1: bool, salt: &[u8]) -> [u8; 22] {
    let magic: &[u8] = if apr1 { b"$apr1$" } else { b"$1$" };
    let alternate = md5(&[password, salt, password]);
    let mut context = Md5::new();
    context.update(password);
    context.update(magic);
    context.update(salt);
    // As many bytes of the alternate digest as the password is long, 16 at a time.
    for chunk in password.chunks(16) {
        context.update(&alternate[..chunk.len()]);
    }
    // One byte per bit of the password's length: a zero for a set bit, else its first byte.
    let mut length = password.len();
    while length != 0 {
        context.update(if length & 1 == 1 {
            &[0][..]
        } else {
            &password[..1]
        });
        length >>= 1;
    }
    let mut digest: [u8; 16] = context.finalize().into();
    // A thousand rounds, to slow guessing.
    for round in 0..1000 {
        let mut context = Md5::new();
        context.update(if round % 2 == 1 {
            password
        } else {
            &digest[..]
        });
        if round % 3 != 0 {
            context.update(salt);
        }
        if round % 7 != 0 {
            context.update(password);
        }
        context.update(if round % 2 == 1 {
            &digest[..]
        } else {
            password
        });
        digest = context.finalize().into();
    }
    crypt_encode(&digest)
}

/// MD5-crypt's encoding of a digest: bytes in a fixed shuffled order, three at a time into four
/// characters, least significant six bits first; the last byte alone into two.
fn crypt_encode(digest: &[u8; 16]) -> [u8; 22] {
    const GROUPS: [[usize; 3]; 5] = [[0, 6, 12], [1, 7, 13], [2, 8, 14], [3, 9, 15], [4, 10, 5]];
    let mut out = [0; 22];
    let mut at = 0;
    let mut put = |mut value: u32, count: usize| {
        for _ in 0..count {
            out[at] = CRYPT_ALPHABET[(value & 0x3f) as usize];
            value >>= 6;
            at += 1;
        }
    };
    for [a, b, c] in GROUPS {
        let value = u32::from(digest[a]) << 16 | u32::from(digest[b]) << 8 | u32::from(digest[c]);
        put(value, 4);
    }
    put(u32::from(digest[11]), 2);
    out
}

/// Standard base64 as nginx decodes a Basic credential: padding optional, the unused bits of
/// the last character ignored.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// `Authorization: Basic base64(user:password)` → (user, password): the credentials
/// `auth_basic` checks. The scheme is case-insensitive and followed by one or more spaces, the
/// base64 padding is optional (as nginx reads it). None when malformed, not Basic, the user is
/// empty or not UTF-8 (no file could name it), or there is no colon.
pub fn basic_credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let scheme = value.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let mut encoded = &value[6..];
    while let [b' ', rest @ ..] = encoded {
        encoded = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = encoded {
        encoded = rest;
    }
    let end = encoded
        .iter()
        .position(|&b| b == b'=')
        .unwrap_or(encoded.len());
    let (data, padding) = encoded.split_at(end);
    if data.is_empty() || padding.len() > 2 || padding.iter().any(|&b| b != b'=') {
        return None;
    }
    let decoded = LENIENT_BASE64.decode(data).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    if colon == 0 {
        return None;
    }
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// A small per-worker memo of credentials already verified, so that bcrypt (50-100 ms at cost
/// 10-12) is not run on every request of a logged-in client.
///
/// One per worker thread, owned by it (`&mut` methods; not `Sync`, no lock): keep it in the
/// worker's state or a `thread_local!` `RefCell`. It holds keys only: HMAC-SHA256, under a
/// random key made for this cache, of the file's identity (the SHA-256 of its text), the user
/// and the password. Neither the password nor a plain hash of it is stored, and a changed file
/// never matches what the old one verified. Only successes are remembered (a stream of wrong
/// passwords cannot push the good ones out); when full, the oldest entry goes.
pub struct VerifiedCache {
    /// The HMAC key; None if the system's random source failed (then nothing is remembered).
    key: Option<hmac::Key>,
    /// The remembered keys.
    seen: HashSet<[u8; 32]>,
    /// The same keys, oldest first, for eviction.
    order: VecDeque<[u8; 32]>,
    /// The most keys kept.
    capacity: usize,
}

impl fmt::Debug for VerifiedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedCache")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Default for VerifiedCache {
    fn default() -> Self {
        VerifiedCache::new(VerifiedCache::DEFAULT_CAPACITY)
    }
}

impl VerifiedCache {
    /// The default bound: enough for a worker's logged-in clients, 32 bytes a key.
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// An empty memo that keeps at most `capacity` credentials (0: remember nothing).
    pub fn new(capacity: usize) -> VerifiedCache {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rand::SystemRandom::new()).ok();
        VerifiedCache {
            key,
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// [`Htpasswd::verify`], answered from the memo when these credentials were verified
    /// against this file before; a success is remembered.
    pub fn verify(&mut self, file: &Htpasswd, user: &str, password: &[u8]) -> bool {
        let key = self.key_of(file, user, password);
        if key.is_some_and(|k| self.seen.contains(&k)) {
            return true;
        }
        if !file.verify(user, password) {
            return false;
        }
        if let Some(key) = key {
            self.remember(key);
        }
        true
    }

    /// Whether these credentials were verified against this file before (no hashing): for a
    /// caller that runs the slow check elsewhere (a blocking thread) on a miss.
    pub fn contains(&self, file: &Htpasswd, user: &str, password: &[u8]) -> bool {
        self.key_of(file, user, password)
            .is_some_and(|k| self.seen.contains(&k))
    }

    /// Records credentials that [`Htpasswd::verify`] accepted elsewhere (see
    /// [`VerifiedCache::contains`]); call it only after a success.
    pub fn insert(&mut self, file: &Htpasswd, user: &str, password: &[u8]) {
        if let Some(key) = self.key_of(file, user, password) {
            if !self.seen.contains(&key) {
                self.remember(key);
            }
        }
    }

    /// How many credentials are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The memo key of these credentials; None when nothing is to be remembered.
    fn key_of(&self, file: &Htpasswd, user: &str, password: &[u8]) -> Option<[u8; 32]> {
        if self.capacity == 0 {
            return None;
        }
        let mut context = hmac::Context::with_key(self.key.as_ref()?);
        context.update(&file.inner.identity);
        context.update(&user.len().to_le_bytes());
        context.update(user.as_bytes());
        context.update(password);
        <[u8; 32]>::try_from(context.sign().as_ref()).ok()
    }

    /// Adds a key, dropping the oldest ones past the bound.
    fn remember(&mut self, key: [u8; 32]) {
        while self.order.len() >= self.capacity {
            match self.order.pop_front() {
                Some(old) => self.seen.remove(&old),
                None => break,
            };
        }
        self.seen.insert(key);
        self.order.push_back(key);
    }
}

#[cfg(test)]
mod tests;
