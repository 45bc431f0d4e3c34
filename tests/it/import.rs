//! nginx's config syntax read as nginx reads it, against Debian's nginx itself: for each
//! config, `nginx -t` and `slipstream::import` accept it alike, or refuse it with the same
//! reason on the same line.

use std::path::Path;
use std::process::Command;

use crate::support::temp_path;

/// nginx's verdict on the config at `path`: Ok, or the reason and line of its error.
fn nginx_verdict(dir: &Path, path: &Path) -> Result<(), (String, usize)> {
    let out = Command::new("/usr/sbin/nginx")
        .args(["-t", "-q", "-e", "stderr", "-p"])
        .arg(dir)
        .arg("-c")
        .arg(path)
        .output()
        .expect("nginx is installed (.ci/test-tools installs it)");
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    let line = text
        .lines()
        .find(|l| l.contains("[emerg]"))
        .unwrap_or_else(|| panic!("no [emerg] line: {text}"));
    // `... [emerg] PID#TID: REASON in FILE:LINE`
    let message = line.split_once(": ").expect("a message").1;
    let (reason, place) = message.rsplit_once(" in ").expect("a place");
    let number = place.rsplit_once(':').expect("a line").1;
    Err((reason.to_string(), number.parse().unwrap()))
}

#[test]
fn configs_are_accepted_or_refused_as_nginx_does() {
    let cases = [
        "events {}\nhttp { server { location / { return 200 \"a;b {c}\"; } } }\n",
        "events {}\nhttp {\n  map $http_x $y { default 0; ~^a 1; }\n  server {\n    set $a ${host}x;\n    \
         add_header X a#b; # a comment\n    if ($host = \"a.example\") { return 404; }\n    \
         location = /x { return 200 'it\\'s'; }\n  }\n}\n",
        "events {}\nhttp {\n  log_format main\n    '$remote_addr'\n    '$status';\n  \
         server { return 200 a}b; }\n}\n",
        "events {}\nhttp { server {\n  if ($host = \"b\"){ return 404; }\n  \
         return 200 a\"b\";# a comment after a semicolon\n  set $x \"${host}\";\n} }\n",
        "events {}\nhttp {\n",
        "events {}\n}\n",
        "events {}\nhttp { server { return 200 \"a\"b; } }\n",
        "events {}\nhttp { }\nworker_processes 1",
        "events {}\n;\n",
        "events {\n}\nhttp {\n  server {\n    location / {\n      return 200 \"unterminated;\n    }\n  }\n}\n",
    ];
    let dir = temp_path("import-syntax");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let mut refused = 0;
    for (i, text) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.conf"));
        std::fs::write(&path, text).unwrap();
        let ours = slipstream::import::parse(text.as_bytes(), 0).map_err(|e| (e.reason, e.line));
        let theirs = nginx_verdict(&dir, &path);
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "case {i}: {text}\nnginx: {theirs:?}"
        );
        if let (Err(ours), Err(theirs)) = (&ours, &theirs) {
            assert_eq!(ours, theirs, "case {i}: {text}");
            refused += 1;
        }
        // What is read is what the file says: read from disk, the same directives.
        if let Ok(directives) = &ours {
            let config = slipstream::import::read_config(&path).unwrap();
            assert_eq!(&config.directives, directives);
        }
    }
    assert_eq!(refused, 6, "the refused cases are refused by both");
}
