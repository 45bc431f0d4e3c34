//! Build facts for `slipstream version --verbose`: the git commit, the compiler and the target.
//! Nothing here changes the code that is built.

use std::process::Command;

fn main() {
    let run = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit =
        run("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=SLIPSTREAM_COMMIT={commit}");
    println!("cargo:rustc-env=SLIPSTREAM_RUSTC={rustc_version}");
    println!("cargo:rustc-env=SLIPSTREAM_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
    for path in [".git/HEAD", ".git/refs", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
