//! The README's examples run as written: every `$ lockctl ...` line of a section marked
//! `<!-- readme-test: NAME -->` ... `<!-- /readme-test -->` is run in order, against a private
//! Redis, with the built `lockctl` first on PATH, and what it prints on stdout is compared
//! with the lines the README shows under it. Timings, ports and order ids differ between runs
//! and are masked on both sides (any number with a decimal point, `127.0.0.1:<port>`, and
//! `o-<hex>`); everything else must match, character for character.

use std::path::Path;
use std::process::Command;

use crate::support::{RedisServer, stdout};

/// One command of a section and the lines the README says it prints.
struct Example {
    command: String,
    expected: Vec<String>,
}

/// The examples of section `name`, in order.
fn examples(readme: &str, name: &str) -> Vec<Example> {
    let start = format!("<!-- readme-test: {name} -->");
    let from = readme
        .find(&start)
        .unwrap_or_else(|| panic!("no section {start}"));
    let to = from
        + readme[from..]
            .find("<!-- /readme-test -->")
            .expect("the section's end");
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    for line in readme[from..to].lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        match line.strip_prefix("$ ") {
            Some(command) => out.push(Example {
                command: command.to_string(),
                expected: Vec::new(),
            }),
            None => out
                .last_mut()
                .expect("a block that starts with a command")
                .expected
                .push(line.to_string()),
        }
    }
    out
}

/// `line` with what differs between runs masked: what follows `127.0.0.1:` (a port) and
/// `order o-` (an order id), then every number with a decimal point.
fn masked(line: &str) -> String {
    let mut s = line.to_string();
    for prefix in ["127.0.0.1:", "order o-"] {
        let mut from = 0;
        while let Some(at) = s[from..].find(prefix).map(|a| a + from) {
            let end = at + prefix.len();
            let n = s[end..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .count();
            s.replace_range(end..end + n, "X");
            from = end;
        }
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
        if j + 1 < chars.len() && chars[j] == '.' && chars[j + 1].is_ascii_digit() {
            j += 1;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            out.push('#');
        } else {
            out.extend(&chars[i..j]);
        }
        i = j;
    }
    out
}

/// Runs every example of section `name` against a private Redis; fails on the first output
/// that differs from the README, showing both.
fn run_section(name: &str) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let redis = RedisServer::start();
    let bin = Path::new(env!("CARGO_BIN_EXE_lockctl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let examples = examples(&readme, name);
    assert!(!examples.is_empty(), "section {name} has no examples");
    for ex in examples {
        let out = Command::new("sh")
            .args(["-c", &ex.command])
            .env("PATH", &path)
            .env("REDIS_URL", redis.url())
            .env("NO_COLOR", "1")
            .env("COLUMNS", "100")
            .output()
            .expect("run sh");
        let got: Vec<String> = stdout(&out).lines().map(masked).collect();
        let want: Vec<String> = ex.expected.iter().map(|l| masked(l)).collect();
        assert_eq!(
            got.join("\n"),
            want.join("\n"),
            "README section {name}: `{}` printed otherwise (stderr: {})",
            ex.command,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_first_ten_minutes_run_as_written() {
    run_section("first-ten-minutes");
}

#[test]
fn masking_hides_only_what_differs_between_runs() {
    assert_eq!(
        masked("  latency     p50 2.697 ms  bought 9  redis       127.0.0.1:6379"),
        "  latency     p50 # ms  bought 9  redis       #.#:X"
    );
    assert_eq!(
        masked("bought, 9 left (1 of sku_886, order o-1480f321573cb8f7)"),
        "bought, 9 left (1 of sku_886, order o-X)"
    );
}

/// Every file or directory of this repository the README names in backticks exists (the
/// tutorial's PHP under `examples/tutorial-php/`, scripts, docs, tests, sources): before, the
/// README sent readers to a `tutorial/` directory that was not there.
#[test]
fn every_path_the_readme_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (i, part) in readme.split('`').enumerate() {
        // Inside backticks: the odd parts.
        if i % 2 == 0 || part.contains(' ') || part.contains('{') || part.contains('*') {
            continue;
        }
        let path = part.split(':').next().unwrap_or(part);
        let repo_path = [
            "examples/",
            "tests/",
            "scripts/",
            "docs/",
            "crates/",
            "src/",
            ".ci/",
        ]
        .iter()
        .any(|p| path.starts_with(p));
        if !repo_path {
            continue;
        }
        checked += 1;
        if !root.join(path).exists() {
            missing.push(path.to_string());
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: is the README's form still this one?"
    );
    assert!(
        missing.is_empty(),
        "the README names paths that do not exist: {missing:?}"
    );
}
