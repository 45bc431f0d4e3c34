//! The property of the `htpasswd` fuzz target: an htpasswd file's text and a Basic
//! `Authorization` value, both from fuzzed bytes, never panic; credentials that split are
//! given back by their own clean encoding; a file that loads verifies a fixed password the same
//! with and without the per-worker memo, and never accepts a password holding NUL.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::rules::htpasswd::{basic_credentials, Htpasswd, VerifiedCache};

/// The bytes are both an `Authorization` value and (as lossy UTF-8) an htpasswd file.
pub fn htpasswd(data: &[u8]) {
    credentials(data);
    let text = String::from_utf8_lossy(data);
    let Ok(file) = Htpasswd::parse(&text) else {
        return;
    };
    assert!(file.len() <= text.split('\n').count());
    assert_eq!(file.is_empty(), file.users().next().is_none());
    let mut users: Vec<String> = file.users().map(str::to_owned).collect();
    users.truncate(16);
    users.push("user".to_owned());
    let mut cache = VerifiedCache::new(4);
    for user in &users {
        // bcrypt and slow SHA-crypt would make each run take milliseconds to seconds.
        if !file.is_cheap(user) {
            continue;
        }
        for password in [&b"password"[..], b"", b"pass\0word"] {
            let direct = file.verify(user, password);
            assert!(!(direct && password.contains(&0)), "a NUL password matched");
            assert!(!direct || file.contains(user));
            assert_eq!(cache.verify(&file, user, password), direct);
            assert_eq!(cache.contains(&file, user, password), direct);
            assert_eq!(cache.verify(&file, user, password), direct);
        }
    }
    assert!(cache.len() <= 4);
}

/// A value that splits into credentials splits the same once written cleanly again.
fn credentials(data: &[u8]) {
    let Some((user, password)) = basic_credentials(data) else {
        return;
    };
    assert!(!user.is_empty() && !user.contains(':'));
    let mut joined = user.clone().into_bytes();
    joined.push(b':');
    joined.extend_from_slice(&password);
    let clean = format!("Basic {}", STANDARD.encode(&joined));
    assert_eq!(
        basic_credentials(clean.as_bytes()),
        Some((user, password)),
        "{clean}"
    );
}
