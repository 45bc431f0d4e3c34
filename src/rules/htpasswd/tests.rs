//! Tests of `htpasswd`.

use super::*;

// Vectors from Debian's `htpasswd` (apache2-utils 2.4), each with the command that made it.
/// `htpasswd -nbB -C 4 alice 'correct horse'`
const BCRYPT_2Y: &str = "alice:$2y$04$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgxi";
/// `htpasswd -nbB -C 4 colon 'pa:ss wörd'`
const BCRYPT_COLON: &str = "colon:$2y$04$73k2pz3fxLarU4tQYqnyQudWYSmfU.6IkMx8oHi1ySROJ6AXZWWP2";
/// `htpasswd -nbm bob 's3cret!'`
const APR1: &str = "bob:$apr1$Jn1yAZ6s$Uv1kZCpsxyel8wYd9qzjm/";
/// `htpasswd -nbm empty ''`
const APR1_EMPTY: &str = "empty:$apr1$GOsX34Gl$p0ny6/ZVkhiSOKLsKcrVR1";
/// `htpasswd -nbs carol 'hunter2'`
const SHA: &str = "carol:{SHA}87u9ZqY9S/F0eUBXjsPQEDUw4h0=";
/// `htpasswd -nbp dave 'plain pass'` (plain text, no prefix)
const PLAIN_P: &str = "dave:plain pass";
/// `htpasswd -nbd erin 'password'` (DES crypt)
const DES: &str = "erin:/fil87yecM2X2";
/// `htpasswd -nb2 frank 'sha two'`
const SHA256_CRYPT: &str = "frank:$5$q3c5pWdFQXN/5W61$irp.S/V7EqKTwCdB98msrKnpied06AZAEsBMI1Y65R3";
/// `htpasswd -nb5 grace 'sha five'`
const SHA512_CRYPT: &str = "grace:$6$1jPGVjlMaQVNa2oM$tg34.E7qmSs2B.3F7likXXTob4F6cnw8Czob\
                            NtNHMh5bAaE1SjPyN23ccNz7zeGP3umpjq7tl7OPC/eL3Fg1n/";
/// `htpasswd -nb5 -r 1000 heidi 'rounds'`
const SHA512_ROUNDS: &str = "heidi:$6$rounds=1000$kBlKXfZwWEGGWBCF$sLeBQKQ8DUw30aco/Yy1Q1Nv\
                             xfLK8M4qcgdxL5xraDc9IzHGkllWq9HsFgQOLOKCO9STQKd1zhfwESSz2Tn3Y1";

// Formats htpasswd does not make, from other tools (each checked with libxcrypt's crypt()).
/// libxcrypt `crypt("bee two", crypt_gensalt("$2b$", 4, NULL, 0))`
const BCRYPT_2B: &str = "ivan:$2b$04$HgPPXo/fpkQQtcpM0/xqTug4dqN8Tw93HQY/.bSQQaIJaswYlKIci";
/// libxcrypt `crypt("ay two", crypt_gensalt("$2a$", 4, NULL, 0))`
const BCRYPT_2A: &str = "judy:$2a$04$xydQE.vLsGGICubdtlDYoulTbizDW8LFJKqSmKuMxoIeobZdZdftm";
/// `openssl passwd -1 -salt saltsalt 'md5 crypt'`
const MD5_CRYPT: &str = "mallory:$1$saltsalt$o0XqEAEvoW3Z4QVblWNHY.";
/// `openssl passwd -1 -salt '' nosalt`
const MD5_CRYPT_NO_SALT: &str = "nosalt:$1$$gaZTOIXYJJCz5k0ATZKHS0";
/// `openssl passwd -apr1 -salt ab 'short salt'` (also accepted by `htpasswd -v`)
const APR1_SHORT_SALT: &str = "oscar:$apr1$ab$0iE1Uw5jyIcuhGRkN3tEJ.";
/// Python: `"{SSHA}" + b64encode(sha1(b"salted pw" + salt).digest() + salt)`, salt
/// `b"\x01\x02salty\xff"` (the format of OpenLDAP's `slappasswd`).
const SSHA: &str = "peggy:{SSHA}qWKz+QQSwC4dAgUYeLCTETWuWHwBAnNhbHR5/w==";

/// Each good line with its user, right password and a wrong one.
const GOOD: &[(&str, &str, &[u8])] = &[
    (BCRYPT_2Y, "alice", b"correct horse"),
    (BCRYPT_COLON, "colon", "pa:ss wörd".as_bytes()),
    (BCRYPT_2B, "ivan", b"bee two"),
    (BCRYPT_2A, "judy", b"ay two"),
    (APR1, "bob", b"s3cret!"),
    (APR1_EMPTY, "empty", b""),
    (APR1_SHORT_SALT, "oscar", b"short salt"),
    (MD5_CRYPT, "mallory", b"md5 crypt"),
    (MD5_CRYPT_NO_SALT, "nosalt", b"nosalt"),
    (SHA, "carol", b"hunter2"),
    (SSHA, "peggy", b"salted pw"),
    (SHA256_CRYPT, "frank", b"sha two"),
    (SHA512_CRYPT, "grace", b"sha five"),
    (SHA512_ROUNDS, "heidi", b"rounds"),
    ("trent:{PLAIN}open sesame", "trent", b"open sesame"),
];

#[test]
fn vectors_verify_right_and_refuse_wrong() {
    for (line, user, password) in GOOD {
        let file = Htpasswd::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(file.len(), 1);
        assert!(
            file.verify(user, password),
            "{line}: right password refused"
        );
        let mut wrong = password.to_vec();
        wrong.push(b'x');
        assert!(
            !file.verify(user, &wrong),
            "{line}: wrong password accepted"
        );
        assert!(!file.verify(user, b"wrong"), "{line}");
        if !password.is_empty() {
            assert!(
                !file.verify(user, &password[1..]),
                "{line}: a suffix accepted"
            );
            assert!(!file.verify(user, b""), "{line}: empty password accepted");
        }
        assert!(
            !file.verify("nobody", password),
            "{line}: another user accepted"
        );
    }
}

#[test]
fn whole_file_with_comments_blank_lines_and_crlf() {
    let mut text = String::from("# users\r\n\r\n   \n");
    for (line, _, _) in GOOD {
        text.push_str(line);
        text.push_str("\r\n");
    }
    let file = Htpasswd::parse(&text).unwrap();
    assert_eq!(file.len(), GOOD.len());
    for (_, user, password) in GOOD {
        assert!(file.verify(user, password), "{user}");
        assert!(file.contains(user));
    }
    assert!(!file.contains("# users"));
}

#[test]
fn plain_text_without_prefix_and_des_are_refused() {
    let error = Htpasswd::parse(PLAIN_P).unwrap_err();
    assert!(
        error.starts_with("line 1: unknown password hash format"),
        "{error}"
    );
    assert!(error.contains("{PLAIN}"), "{error}");
    let error = Htpasswd::parse(&format!("# made with -d\n{DES}\n")).unwrap_err();
    assert_eq!(
        error,
        "line 2: DES crypt is not supported: re-create the entry with htpasswd -B"
    );
}

#[test]
fn parse_errors_carry_line_numbers() {
    let cases = [
        ("a:{PLAIN}x\n\nno colon here\n", "line 3: no ':'"),
        ("# c\n:{PLAIN}x\n", "line 2: empty user name"),
        ("u:\n", "line 1: no password hash"),
        (
            "a:{PLAIN}x\nb:$apr1$salt$short\n",
            "line 2: a $apr1$ checksum",
        ),
        (
            "u:$apr1$waytoolongsalt$Uv1kZCpsxyel8wYd9qzjm/\n",
            "line 1: a $apr1$ salt",
        ),
        (
            "u:$apr1$Jn1yAZ6s$Uv1kZCpsxyel8wYd9qzjmz\n",
            "line 1: a $apr1$ checksum",
        ),
        (
            "u:$2x$04$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgxi",
            "line 1: $2x$",
        ),
        (
            "u:$2y$18$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgxi",
            "cost 18",
        ),
        (
            "u:$2y$+4$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgxi",
            "two-digit",
        ),
        (
            "u:$2y$04$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgx",
            "60 characters",
        ),
        (
            "u:$2y$04$F0/2lDd.pWITz8RfDQKeH.Wjt/0gbwD4G6GQ5tssvd2FwLXQ2Xgx!",
            "malformed",
        ),
        ("u:$y$j9T$salt$hash\n", "line 1: yescrypt"),
        (
            "u:$argon2id$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA\n",
            "unsupported hash format $argon2id$",
        ),
        ("u:{SHA}abc=\n", "line 1: {SHA} needs"),
        ("u:{SSHA}YWJj\n", "line 1: {SSHA} needs"),
        ("u:{PLAIN}x \n", "line 1: white space"),
        (
            "u:$5$rounds=999$abc$irp.S/V7EqKTwCdB98msrKnpied06AZAEsBMI1Y65R3",
            "rounds must",
        ),
        (
            "u:$5$rounds=01000$abc$irp.S/V7EqKTwCdB98msrKnpied06AZAEsBMI1Y65R3",
            "rounds must",
        ),
        ("u:$6$rounds=20000000$abc$x", "above 10000000"),
        (
            "u:$5$$irp.S/V7EqKTwCdB98msrKnpied06AZAEsBMI1Y65R3",
            "a $5$ salt",
        ),
        (
            "u:$5$abc$irp.S/V7EqKTwCdB98msrKnpied06AZAEsBMI1Y65R",
            "a $5$ checksum",
        ),
        ("u:$5$a$b$c$d", "a $5$ hash is"),
        // Found by the fuzz target: a prefix without its closing '$'.
        ("u:$6", "a $6$ hash is"),
        ("u:$5", "a $5$ hash is"),
        ("u:$apr1", "a $apr1$ hash is"),
        ("u:$1", "a $1$ hash is"),
        ("u:$2y", "a bcrypt hash is 60"),
        ("u:$", "unsupported hash format $$"),
    ];
    for (text, expected) in cases {
        let error = Htpasswd::parse(text).unwrap_err();
        assert!(error.contains(expected), "{text:?}: {error}");
        assert!(error.starts_with("line "), "{text:?}: {error}");
    }
}

#[test]
fn nginx_reading_comment_field_first_user_wins_nul_password() {
    // nginx ends the hash at ':'; the rest of the line is a comment.
    let file = Htpasswd::parse("u:{PLAIN}pa:ss\nu:{PLAIN}second\n").unwrap();
    assert_eq!(file.len(), 1);
    assert!(file.verify("u", b"pa"));
    assert!(!file.verify("u", b"pa:ss"));
    assert!(!file.verify("u", b"second"));
    // A NUL never matches (nginx would cut the password there).
    let file = Htpasswd::parse(&format!("{APR1}\nz:{{PLAIN}}ab\n")).unwrap();
    assert!(!file.verify("bob", b"s3cret!\0junk"));
    assert!(!file.verify("z", b"ab\0"));
    assert!(file.verify("z", b"ab"));
    // User names are exact: case and spaces count.
    assert!(!file.verify("Bob", b"s3cret!"));
    assert!(!file.verify(" bob", b"s3cret!"));
    let empty = Htpasswd::parse("# nobody\n").unwrap();
    assert!(empty.is_empty());
}

#[test]
fn debug_shows_no_hash() {
    let file = Htpasswd::parse(APR1).unwrap();
    let shown = format!("{file:?}");
    assert!(!shown.contains("apr1") && !shown.contains("bob"), "{shown}");
    assert!(shown.contains("users: 1"), "{shown}");
}

#[test]
fn md5_crypt_matches_known_encoding() {
    // The encoding of a known digest: every byte lands where MD5-crypt puts it.
    let file = Htpasswd::parse(MD5_CRYPT).unwrap();
    let Some(Entry::Md5Crypt { checksum, .. }) = file.inner.entries.get("mallory") else {
        panic!("not MD5-crypt");
    };
    assert_eq!(&md5_crypt(b"md5 crypt", false, b"saltsalt"), checksum);
    assert_eq!(&checksum[..], b"o0XqEAEvoW3Z4QVblWNHY.");
}

#[test]
fn basic_credentials_split_as_nginx_does() {
    let good = Some(("alice".to_owned(), b"correct horse".to_vec()));
    // base64("alice:correct horse") = YWxpY2U6Y29ycmVjdCBob3JzZQ==
    assert_eq!(
        basic_credentials(b"Basic YWxpY2U6Y29ycmVjdCBob3JzZQ=="),
        good
    );
    assert_eq!(
        basic_credentials(b"basic YWxpY2U6Y29ycmVjdCBob3JzZQ=="),
        good
    );
    assert_eq!(
        basic_credentials(b"BASIC YWxpY2U6Y29ycmVjdCBob3JzZQ=="),
        good
    );
    assert_eq!(
        basic_credentials(b"Basic    YWxpY2U6Y29ycmVjdCBob3JzZQ== "),
        good
    );
    assert_eq!(basic_credentials(b"Basic YWxpY2U6Y29ycmVjdCBob3JzZQ"), good);
    // Bad base64, a bad length, junk after the padding, no space, no data.
    assert_eq!(basic_credentials(b"Basic YWxp*2U6cHc="), None);
    assert_eq!(basic_credentials(b"Basic YWxpY"), None);
    assert_eq!(basic_credentials(b"Basic YWxpY2U6cHc=x"), None);
    assert_eq!(basic_credentials(b"BasicYWxpY2U6cHc="), None);
    assert_eq!(basic_credentials(b"Basic "), None);
    assert_eq!(basic_credentials(b"Basic    "), None);
    assert_eq!(basic_credentials(b"Basic"), None);
    assert_eq!(basic_credentials(b""), None);
    // Other schemes.
    assert_eq!(basic_credentials(b"Bearer YWxpY2U6cHc="), None);
    assert_eq!(basic_credentials(b"Digest username=\"alice\""), None);
    // No colon ("alice"), an empty user (":pw").
    assert_eq!(basic_credentials(b"Basic YWxpY2U="), None);
    assert_eq!(basic_credentials(b"Basic OnB3"), None);
    // The password keeps every colon after the first; an empty password is a password.
    assert_eq!(
        basic_credentials(b"Basic YWxpY2U6YTpiOmM="),
        Some(("alice".to_owned(), b"a:b:c".to_vec()))
    );
    assert_eq!(
        basic_credentials(b"Basic YWxpY2U6"),
        Some(("alice".to_owned(), Vec::new()))
    );
    // A user that is not UTF-8 (no file names it): "\xff:pw".
    assert_eq!(basic_credentials(b"Basic /zpwdw=="), None);
    // Bytes of a password stay bytes: "u:\xff\xfe".
    assert_eq!(
        basic_credentials(b"Basic dTr//g=="),
        Some(("u".to_owned(), vec![0xff, 0xfe]))
    );
}

#[test]
fn verified_cache_hits_after_verify_and_is_bounded() {
    let file = Htpasswd::parse(&format!("{BCRYPT_2Y}\n{APR1}\n")).unwrap();
    let mut cache = VerifiedCache::new(2);
    assert!(cache.is_empty());
    assert!(!cache.contains(&file, "alice", b"correct horse"));
    assert!(cache.verify(&file, "alice", b"correct horse"));
    assert!(cache.contains(&file, "alice", b"correct horse"));
    assert!(cache.verify(&file, "alice", b"correct horse"));
    assert_eq!(cache.len(), 1);
    // Failures are not remembered; neither is another password or user.
    assert!(!cache.verify(&file, "alice", b"wrong"));
    assert!(!cache.contains(&file, "alice", b"wrong"));
    assert!(!cache.contains(&file, "bob", b"correct horse"));
    assert_eq!(cache.len(), 1);
    // A clone is the same file; an edited file (a reload) is not.
    assert!(cache.contains(&file.clone(), "alice", b"correct horse"));
    let edited = Htpasswd::parse(&format!("{BCRYPT_2Y}\n")).unwrap();
    assert!(!cache.contains(&edited, "alice", b"correct horse"));
    // Bounded: the oldest goes.
    assert!(cache.verify(&file, "bob", b"s3cret!"));
    assert!(cache.verify(&edited, "alice", b"correct horse"));
    assert_eq!(cache.len(), 2);
    assert!(!cache.contains(&file, "alice", b"correct horse"));
    assert!(cache.contains(&file, "bob", b"s3cret!"));
    // insert records a success verified elsewhere.
    cache.insert(&file, "alice", b"correct horse");
    assert!(cache.contains(&file, "alice", b"correct horse"));
    assert_eq!(cache.len(), 2);
    // Capacity 0 remembers nothing but still verifies.
    let mut none = VerifiedCache::new(0);
    assert!(none.verify(&file, "bob", b"s3cret!"));
    assert!(none.is_empty());
    assert_eq!(VerifiedCache::default().len(), 0);
}

#[test]
fn verified_cache_stays_bounded_under_many_users() {
    let text: String = (0..50).map(|i| format!("u{i}:{{PLAIN}}p{i}\n")).collect();
    let file = Htpasswd::parse(&text).unwrap();
    let mut cache = VerifiedCache::new(8);
    for i in 0..50 {
        assert!(cache.verify(&file, &format!("u{i}"), format!("p{i}").as_bytes()));
        assert!(cache.len() <= 8);
    }
    assert_eq!(cache.len(), 8);
    assert!(cache.contains(&file, "u49", b"p49"));
    assert!(!cache.contains(&file, "u0", b"p0"));
    let shown = format!("{cache:?}");
    assert!(!shown.contains("p49"), "{shown}");
}

/// A scratch directory of this test run.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("slipstream-htpasswd-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn load_names_the_path() {
    let dir = scratch_dir("load");
    let missing = dir.join("missing");
    let error = Htpasswd::load(&missing).unwrap_err();
    assert!(error.starts_with(&missing.display().to_string()), "{error}");
    let bad = dir.join("bad");
    std::fs::write(&bad, "ok:{PLAIN}x\nbroken\n").unwrap();
    let error = Htpasswd::load(&bad).unwrap_err();
    assert_eq!(
        error,
        format!(
            "{}: line 2: no ':' between the user name and the password hash",
            bad.display()
        )
    );
    let good = dir.join("good");
    std::fs::write(&good, format!("{APR1}\n{SHA}\n")).unwrap();
    let file = Htpasswd::load(&good).unwrap();
    assert!(file.verify("carol", b"hunter2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs Debian's `htpasswd` with `args`; None when it is not installed.
fn htpasswd(args: &[&str]) -> Option<()> {
    let status = std::process::Command::new("htpasswd")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    assert!(status.success(), "htpasswd {args:?} failed");
    Some(())
}

#[test]
fn fresh_file_from_the_htpasswd_binary() {
    let dir = scratch_dir("binary");
    let path = dir.join("users");
    let file = path.to_str().unwrap();
    let users: [(&str, &str, &str); 6] = [
        ("-cbB", "alice", "first pass"),
        ("-bm", "bob", "second:pass"),
        ("-bs", "carol", "third"),
        ("-b2", "dave", "fourth pässword"),
        ("-b5", "erin", "fifth"),
        ("-bB", "frank", ""),
    ];
    for (flags, user, password) in users {
        let args = [flags, "-C", "4", file, user, password];
        let args: &[&str] = if flags.contains('B') {
            &args
        } else {
            &[flags, file, user, password]
        };
        if htpasswd(args).is_none() {
            // Not installed (apt-get install apache2-utils): nothing to compare with.
            return;
        }
    }
    let loaded = Htpasswd::load(&path).unwrap();
    assert_eq!(loaded.len(), users.len());
    for (_, user, password) in users {
        assert!(loaded.verify(user, password.as_bytes()), "{user}");
        assert!(!loaded.verify(user, b"not it"), "{user}");
    }
    // -d (DES) and -p (plain text) lines are refused with their line number.
    htpasswd(&["-bd", file, "grace", "des"]);
    let error = Htpasswd::load(&path).unwrap_err();
    assert!(
        error.contains("line 7: DES crypt is not supported"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fuzz_seeds_keep_their_property() {
    // tests/it/fuzz_seeds.rs replays the other targets' seeds; these are replayed here.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/htpasswd");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| crate::fuzzing::htpasswd::htpasswd(&data));
        assert!(outcome.is_ok(), "{} fails its property", path.display());
        count += 1;
    }
    assert!(count > 0, "no seeds in {}", dir.display());
}
