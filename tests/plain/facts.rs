//! `hunt --facts FILE` read as a CLI user meets it: the real binary, no server.

use std::process::Command;

/// Issue 50, item 13: `--facts /dev/zero` read until memory ran out. A facts file is read no
/// further than 1 MiB, and a longer one is a usage error (exit 2) naming the file and the
/// limit, before anything connects. The test ends at all only because the read is capped.
#[test]
fn an_endless_facts_file_is_refused_at_its_limit_naming_the_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args([
            "hunt",
            "--facts",
            "/dev/zero",
            "--url",
            "http://127.0.0.1:9/",
        ])
        // Nothing must be reached: a Redis named where none listens shows it.
        .env("REDIS_URL", "redis://127.0.0.1:9")
        .output()
        .expect("lockctl runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--facts '/dev/zero' is larger than 1 MiB"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A file just over the limit is refused the same way; one within it is read (and judged as
/// TOML).
#[test]
fn a_facts_file_over_a_mebibyte_is_refused_and_one_within_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    let line = "# a comment that makes the file long\n";
    let lines = (1024 * 1024) / line.len() + 1;
    std::fs::write(&big, line.repeat(lines)).unwrap();
    let run = |file: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(["hunt", "--facts"])
            .arg(file)
            .args(["--url", "http://127.0.0.1:9/", "--budget", "nonsense"])
            .env("REDIS_URL", "redis://127.0.0.1:9")
            .output()
            .expect("lockctl runs")
    };
    let out = run(&big);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--facts '{}' is larger than 1 MiB", big.display())),
        "{stderr}"
    );
    let small = dir.path().join("small.toml");
    std::fs::write(&small, line.repeat(lines - 2)).unwrap();
    let out = run(&small);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Read, and then the command line's own error (the --budget) is the one named.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("larger than"), "{stderr}");
    assert!(stderr.contains("nonsense"), "{stderr}");
}
