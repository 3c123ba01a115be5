//! Words the documentation keeps to one meaning.
//!
//! "The seed" once meant the tutorial lockctl started from (its PHP client, its flow, its
//! `finally`), which clashes with `stock::seed`, `lockctl seed`, the seed record and the
//! hunt's `--seed` (issue 43). The tutorial is "the tutorial"; a seed is a seed.

use std::path::{Path, PathBuf};

/// The repository's text that documents it: the README, docs/, every crate's sources, doc
/// examples and scripts, the binary's sources, the examples and the tests.
fn documented_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = vec![root.join("README.md")];
    let mut dirs: Vec<PathBuf> = ["docs", "crates", "src", "examples", "tests", "scripts"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    dirs.push(path);
                }
                continue;
            }
            let text_like = path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ["rs", "md", "lua", "php", "toml", "py", "sh"].contains(&e));
            if text_like || path.extension().is_none() {
                found.push(path);
            }
        }
    }
    found
}

/// No possessive of "the seed" (the tutorial's PHP client, flow, `GET`, `finally`, one try, lease)
/// nor a line that defines "The seed" with a colon: the tutorial is called the tutorial. A
/// stock seed's own things are "that seed's" or "this seed's", and the seed record is named so.
#[test]
fn the_tutorial_is_called_the_tutorial_not_the_seed() {
    // Built here so that this file does not name them.
    let possessive = format!("the {}'s", "seed");
    let defined = format!("The {}:", "seed");
    let mut found = Vec::new();
    for path in documented_files() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if line.to_lowercase().contains(&possessive) || line.contains(&defined) {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "\"the seed\" where the tutorial is meant (or a seed's own thing without 'that' or \
         'this'):\n{}",
        found.join("\n")
    );
}
