//! The README's examples run as written, and so do the book's (`docs/*.md`). Every section
//! marked `<!-- readme-test: NAME -->` ... `<!-- /readme-test -->` in `README.md` or in a page
//! of `docs/` is one bash session: its `$ ...`
//! lines (with their `\` continuations) run in order, in a scratch directory that sees the
//! repository's `examples/`, `tests/` and `scripts/`, with the built `lockctl` first on PATH
//! and `REDIS_URL` naming a private Redis; what each prints (stdout and stderr, as a terminal
//! shows them) is compared with the lines the README shows under it.
//!
//! What differs between runs is masked on both sides: any number with a decimal point,
//! `127.0.0.1:<port>`, order ids (`o-<hex>`), runs of spaces (table alignment), and the order of
//! a Prometheus metric's samples (the text format leaves it free). A section
//! marked `counts` (`<!-- readme-test: NAME counts -->`) is one whose counts depend on timing
//! (who got the lock first, how many rounds a hunt took): every word with a digit in it is
//! masked too, and a comma-separated list of such words counts as one. A README line `...`
//! stands for any number of lines, and a line ending in ` ...` for any line that begins as it
//! does (what a timing-dependent round found first: the README shows one such run, cut where
//! the next run may differ). Everything else must match, word for word.
//!
//! The README names the places a reader would use; the test puts its own in their stead, in
//! the commands only (the output is masked): the Redis ports 6379, 16379 and 17501 become the
//! private Redis's (`REDIS_PORT` names it too, for the tutorial's PHP), 17601 a private
//! Valkey's, any other `127.0.0.1:<port>` a free port; the
//! PostgreSQL database `shop` a database of the test's own (dropped afterwards); and
//! `target/release/examples/shop` the shop this test build made. A command that ends in `&`
//! runs in the background: the session waits for the ports it names to answer (a
//! `lockctl run --name NAME`, for `dist_lock:NAME` to be taken) and 0.5 s more, as a reader
//! would before typing the next line, and everything it started is killed when
//! the section ends.
//!
//! When a section stops matching, the output it did print is written, in the README's form,
//! to `target/tmp/readme-<section>.txt` (the path is in the failure), to copy from.
//!
//! A test names its section, not the file it is in: a section moved between the README and a
//! page of the book is still found. Names are unique across the files (a second section of
//! one name fails every test here), and a test whose section is in no file fails naming the
//! files it read.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::support::{RedisServer, TestDb, free_port, valkey_server_program};

/// One command of a section and the lines the README says it prints.
struct Example {
    command: String,
    expected: Vec<String>,
}

/// A marked section: its name, the file it is in, whether its counts are masked, and its
/// examples in order.
struct Section {
    name: String,
    file: String,
    counts: bool,
    examples: Vec<Example>,
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

/// The documents whose examples run: `README.md`, then every `docs/*.md` sorted by name, each
/// as its path from the repository's root and its text.
fn documents() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_string))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    let mut out = vec![("README.md".to_string(), readme())];
    for page in pages {
        let text =
            std::fs::read_to_string(root.join(&page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        out.push((page, text));
    }
    out
}

/// Every marked section of the README and the book, file by file in `documents`' order; a
/// name given to two sections fails here, naming both places.
fn all_sections() -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for (file, text) in documents() {
        for section in sections(&file, &text) {
            if let Some(first) = out.iter().find(|s| s.name == section.name) {
                panic!(
                    "two sections are named {}: in {} and in {}; names must be unique across the README and docs/",
                    section.name, first.file, section.file
                );
            }
            out.push(section);
        }
    }
    out
}

/// Every marked section of `text` (the document `file`), in order. A marker is a line of its
/// own: one quoted inside a line (as the book quotes it when it explains these tests) is text.
fn sections(file: &str, text: &str) -> Vec<Section> {
    const OPEN: &str = "\n<!-- readme-test: ";
    const CLOSE: &str = "\n<!-- /readme-test -->";
    let text = format!("\n{text}");
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(OPEN) {
        let head_end = at + rest[at..].find("-->").expect("the marker's end");
        let words: Vec<&str> = rest[at + OPEN.len()..head_end].split_whitespace().collect();
        let body_end = head_end
            + rest[head_end..]
                .find(CLOSE)
                .unwrap_or_else(|| panic!("section {} of {file} has no end marker", words[0]));
        out.push(Section {
            name: words[0].to_string(),
            file: file.to_string(),
            counts: words[1..].contains(&"counts"),
            examples: examples(words[0], &rest[head_end..body_end]),
        });
        rest = &rest[body_end..];
    }
    out
}

/// The examples of one section's text: the `$ ` lines of its plain code blocks, each with the
/// lines under it (a command ending in `\` goes on to the next line).
fn examples(name: &str, text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut block: Option<bool> = None; // Some(tested?) inside a code block
    for line in text.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            block = match block {
                None => Some(matches!(lang.trim(), "" | "console")),
                Some(_) => None,
            };
            continue;
        }
        if block != Some(true) {
            continue;
        }
        let continued = out
            .last()
            .is_some_and(|e| e.expected.is_empty() && e.command.ends_with('\\'));
        if continued {
            let last = out.last_mut().unwrap();
            last.command.push('\n');
            last.command.push_str(line);
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push(Example {
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else {
            out.last_mut()
                .unwrap_or_else(|| panic!("section {name}: a block starts with output: {line}"))
                .expected
                .push(line.to_string());
        }
    }
    out
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap())
}

/// `line` with what differs between runs masked (see the module's doc).
fn masked(line: &str, counts: bool) -> String {
    static PORT: OnceLock<Regex> = OnceLock::new();
    static ORDER: OnceLock<Regex> = OnceLock::new();
    static RUN: OnceLock<Regex> = OnceLock::new();
    static DECIMAL: OnceLock<Regex> = OnceLock::new();
    static WORD: OnceLock<Regex> = OnceLock::new();
    static LIST: OnceLock<Regex> = OnceLock::new();
    static SPACE: OnceLock<Regex> = OnceLock::new();
    let s = re(&PORT, r"127\.0\.0\.1:\d+").replace_all(line, "127.0.0.1:X");
    let s = re(&ORDER, r"\bo-[0-9a-f]{6,}\b").replace_all(&s, "o-X");
    // A hunt's run id is random hex: one in 350 has no digit, which the count mask below
    // would leave as it is (CI once printed `hunt-ddcced-lock-00r1`).
    let s = re(&RUN, r"\bhunt-[0-9a-f]{6}-").replace_all(&s, "hunt-X-");
    let mut s = re(&DECIMAL, r"\d+\.\d+").replace_all(&s, "#").into_owned();
    if counts {
        s = re(&WORD, r"[A-Za-z0-9_]*[0-9][A-Za-z0-9_]*")
            .replace_all(&s, "#")
            .into_owned();
        s = re(&LIST, r"#(?:-#)*(?:, #(?:-#)*)+")
            .replace_all(&s, "#")
            .into_owned();
    }
    re(&SPACE, r"\s+")
        .replace_all(&s, " ")
        .trim_end()
        .to_string()
}

/// `lines` with each run of Prometheus samples of one metric that differ only in their labels
/// sorted: the text format leaves their order free, and the client library's differs between
/// runs.
fn label_sets_sorted(lines: Vec<String>) -> Vec<String> {
    fn metric(line: &str) -> Option<&str> {
        let name = &line[..line.find('{')?];
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        (!name.is_empty() && name.chars().all(plain)).then_some(name)
    }
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = metric(&lines[i]) else {
            out.push(lines[i].clone());
            i += 1;
            continue;
        };
        let mut j = i;
        while j < lines.len() && metric(&lines[j]) == Some(name) {
            j += 1;
        }
        let mut run = lines[i..j].to_vec();
        run.sort();
        out.extend(run);
        i = j;
    }
    out
}

/// Whether `got` is what `want` shows, a `...` line standing for any number of lines.
fn fits(want: &[String], got: &[String]) -> bool {
    match want.first() {
        None => got.is_empty(),
        Some(w) if w.trim() == "..." => (0..=got.len()).any(|k| fits(&want[1..], &got[k..])),
        Some(w) if w.ends_with(" ...") => {
            let head = &w[..w.len() - " ...".len()];
            got.first().is_some_and(|g| g.starts_with(head)) && fits(&want[1..], &got[1..])
        }
        Some(w) => got.first() == Some(w) && fits(&want[1..], &got[1..]),
    }
}

fn trimmed(mut lines: Vec<String>) -> Vec<String> {
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines
}

/// The places of one section's run: its servers, its database, its ports.
struct Place {
    redis: RedisServer,
    valkey: Option<RedisServer>,
    db: Option<TestDb>,
    ports: HashMap<u16, u16>,
}

impl Place {
    fn port(&mut self, readme: u16) -> u16 {
        match readme {
            6379 | 16379 | 17501 => self.redis.port,
            17601 => {
                self.valkey
                    .get_or_insert_with(|| {
                        RedisServer::start_program(&valkey_server_program(), &[])
                    })
                    .port
            }
            5432 | 3306 => readme,
            _ => *self.ports.entry(readme).or_insert_with(free_port),
        }
    }

    /// `printed` with the README's names back where the test's stood (the ports are masked).
    fn unlocalize(&self, printed: &str) -> String {
        let mut s = printed.replace(
            &example("shop").display().to_string(),
            "target/release/examples/shop",
        );
        // A worker names itself after the machine (`lockctl worker HOST-<pid>-<tag>`).
        if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
            let host = host.trim();
            if !host.is_empty() {
                s = s.replace(&format!("worker {host}-"), "worker myhost-");
            }
        }
        match &self.db {
            Some(db) => s.replace(&db.name, "shop"),
            None => s,
        }
    }

    /// `command` with the test's places in the README's stead.
    fn localize(&mut self, command: &str) -> String {
        static DB_URL: OnceLock<Regex> = OnceLock::new();
        static DB_NAME: OnceLock<Regex> = OnceLock::new();
        static PORT: OnceLock<Regex> = OnceLock::new();
        let mut s = command.to_string();
        if s.contains("target/release/examples/shop") {
            let shop = example("shop");
            assert!(
                shop.exists(),
                "{} was not built: `cargo test` builds the examples (`cargo test --test it` does not: `cargo build --examples` first)",
                shop.display()
            );
            s = s.replace("target/release/examples/shop", &shop.display().to_string());
        }
        if re(&DB_NAME, r"\bshop\b").is_match(&s.replace("examples/shop", "")) {
            let db = self.db.get_or_insert_with(TestDb::create);
            s = re(
                &DB_URL,
                r"(postgres://postgres@127\.0\.0\.1(?::5432)?/)shop\b",
            )
            .replace_all(&s, format!("${{1}}{}", db.name).as_str())
            .into_owned();
            s = s
                .replace("dbname=shop", &format!("dbname={}", db.name))
                .replace("-d shop", &format!("-d {}", db.name));
        }
        re(&PORT, r"(127\.0\.0\.1:|REDIS_PORT=)(\d+)")
            .replace_all(&s, |c: &regex::Captures| {
                format!("{}{}", &c[1], self.port(c[2].parse().unwrap()))
            })
            .into_owned()
    }
}

/// A binary of `cargo test`'s examples (built beside this test's profile).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples").join(name)
}

const MARK: &str = "@@readme-test@@";

/// Runs section `name` as one bash session; fails on the first example whose output differs
/// from the README, showing both.
fn run_section(name: &str) {
    let all = all_sections();
    let section = all.iter().find(|s| s.name == name).unwrap_or_else(|| {
        let files: Vec<String> = documents().into_iter().map(|(file, _)| file).collect();
        panic!("no section <!-- readme-test: {name} --> in any of {files:?}")
    });
    let file = &section.file;
    assert!(
        !section.examples.is_empty(),
        "section {name} of {file} has no examples"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    for dir in ["examples", "tests", "scripts"] {
        std::os::unix::fs::symlink(root.join(dir), work.path().join(dir)).unwrap();
    }
    let mut place = Place {
        redis: RedisServer::start(),
        valkey: None,
        db: None,
        ports: HashMap::new(),
    };
    let mut script = String::from("set +e\n");
    for ex in &section.examples {
        let command = place.localize(&ex.command);
        // The marker keeps `$?` as the command before it left it, for a README's `echo $?`.
        script.push_str(&format!(
            "__rc=$?; printf '\\n{MARK}\\n'; (exit $__rc)\n{command}\n"
        ));
        if command.trim_end().ends_with('&') && !command.trim_end().ends_with("&&") {
            for port in re_ports(&command) {
                script.push_str(&format!(
                    "for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done\n"
                ));
            }
            // A job started under the lock: the reader's next line assumes it holds it.
            if let Some(name) = re_run_name(&command) {
                script.push_str(&format!(
                    "for _ in $(seq 1200); do [ \"$(redis-cli -p {} exists 'dist_lock:{name}')\" = 1 ] && break; sleep 0.05; done\n",
                    place.redis.port
                ));
            }
            script.push_str("sleep 0.5\n");
        }
    }
    std::fs::write(work.path().join("session.sh"), &script).unwrap();
    let out_path = work.path().join("out.txt");
    let out = std::fs::File::create(&out_path).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_lockctl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("session.sh")
        .current_dir(work.path())
        .env("PATH", &path)
        .env("REDIS_URL", place.redis.url())
        .env("REDIS_PORT", place.redis.port.to_string())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("run bash");
    let deadline = Instant::now() + Duration::from_secs(600);
    let finished = loop {
        if exited_unreaped(child.id()) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the session left running (servers started with `&`) goes with it. The session's
    // shell is reaped only after: until then its pid, which is the group's id, cannot be given
    // to another process, so the signals cannot reach a process group that another test's job
    // made with a reused number (pids wrap at 32768 here; a `lockctl run` job of a concurrent
    // section was killed that way in CI).
    for sig in ["-TERM", "-KILL"] {
        let _ = Command::new("kill")
            .args([sig, "--", &format!("-{}", child.id())])
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.wait();
    let printed = place.unlocalize(&std::fs::read_to_string(&out_path).unwrap());
    let separator = format!("\n{MARK}\n");
    let mut segments = printed.split(&separator).skip(1);
    let mut transcript = String::new();
    let mut failure = None;
    for ex in &section.examples {
        let got_raw: Vec<String> = trimmed(
            segments
                .next()
                .unwrap_or("")
                .lines()
                .map(str::to_string)
                .collect(),
        );
        transcript.push_str(&format!("$ {}\n", ex.command));
        for line in &got_raw {
            transcript.push_str(line);
            transcript.push('\n');
        }
        let got = label_sets_sorted(got_raw.iter().map(|l| masked(l, section.counts)).collect());
        let want = label_sets_sorted(
            trimmed(ex.expected.clone())
                .iter()
                .map(|l| masked(l, section.counts))
                .collect(),
        );
        if failure.is_none() && !fits(&want, &got) {
            failure = Some(format!(
                "`{}` printed otherwise.\n{file} (masked):\n{}\nprinted (masked):\n{}",
                ex.command,
                want.join("\n"),
                got.join("\n")
            ));
        }
    }
    let saved = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-{name}.txt"));
    if failure.is_some() || !finished {
        let mut f = std::fs::File::create(&saved).unwrap();
        f.write_all(transcript.as_bytes()).unwrap();
    }
    assert!(
        finished,
        "section {name} of {file} did not finish within 600 s; what it printed is in {}",
        saved.display()
    );
    if let Some(f) = failure {
        panic!(
            "section {name} of {file}: {f}\n(everything it printed, in the page's form: {})",
            saved.display()
        );
    }
}

/// Whether process `pid` (a child of this one) has ended, leaving it unreaped (`WNOWAIT`).
fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid writes only into the zeroed siginfo it is given.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

/// The lock a background `lockctl run --name NAME` takes.
fn re_run_name(command: &str) -> Option<String> {
    static RUN: OnceLock<Regex> = OnceLock::new();
    re(&RUN, r"lockctl run --name ([A-Za-z0-9_{}:-]+)")
        .captures(command)
        .map(|c| c[1].to_string())
}

/// The ports a (localized) command names on 127.0.0.1.
fn re_ports(command: &str) -> Vec<u16> {
    static PORT: OnceLock<Regex> = OnceLock::new();
    re(&PORT, r"127\.0\.0\.1:(\d+)")
        .captures_iter(command)
        .map(|c| c[1].parse().unwrap())
        .collect()
}

/// The front door says which keys the main job leaves in the Redis it uses, how many, and
/// names each: the main job, run against a Redis of its own, leaves exactly those.
#[test]
fn the_main_job_leaves_the_keys_the_front_door_names_and_no_other() {
    let text = readme();
    // "... leaves that SKU's 8 keys behind (`a`, `b`, ...: what they are), ..."
    let (count, rest) = text
        .split_once("leaves that SKU's ")
        .and_then(|(_, rest)| rest.split_once(" keys"))
        .expect("the front door says how many keys the main job leaves");
    let list = rest
        .split_once("behind (")
        .and_then(|(_, r)| r.split_once(": "))
        .map(|(l, _)| l)
        .expect("the front door names the keys the main job leaves");
    let names: Vec<String> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    let count = count.trim();
    let redis = RedisServer::start();
    let out = crate::support::lockctl(
        &redis.url(),
        &["hammer", "-n", "100", "-c", "10", "--stock", "10"],
    );
    assert_eq!(
        crate::support::code(&out),
        0,
        "{}",
        crate::support::stdout(&out)
    );
    let mut left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis.raw()).unwrap();
    left.sort();
    let mut named = names.clone();
    named.sort();
    assert_eq!(left, named, "the README names {names:?}");
    assert_eq!(
        count,
        left.len().to_string(),
        "the README counts {count} keys"
    );
}

#[test]
fn the_first_ten_minutes_run_as_written() {
    run_section("first-ten-minutes");
}

#[test]
fn using_it_runs_as_written() {
    run_section("usage");
}

#[test]
fn the_side_by_side_comparison_runs_as_written() {
    run_section("side-by-side");
}

#[test]
fn the_tutorials_php_under_the_hammer_runs_as_written() {
    run_section("tutorial-php");
}

#[test]
fn a_history_judged_again_runs_as_written() {
    run_section("history");
}

#[test]
fn the_hunts_worked_examples_run_as_written() {
    run_section("hunt-examples");
}

#[test]
fn the_hunt_of_lockctls_own_strategies_runs_as_written() {
    run_section("hunt-own");
}

#[test]
fn the_homework_in_full_runs_as_written() {
    run_section("homework");
}

#[test]
fn the_orders_pipeline_runs_as_written() {
    run_section("pipeline");
}

#[test]
fn jobs_under_the_lock_run_as_written() {
    run_section("run");
}

#[test]
fn metrics_exporter_and_status_run_as_written() {
    run_section("operating");
}

#[test]
fn the_hunt_of_the_reference_shop_runs_as_written() {
    run_section("shop-hunt");
}

#[test]
fn the_readmes_hunt_of_the_tutorial_without_its_lock_runs_as_written() {
    run_section("hunt-first");
}

/// The `$ lockctl` lines of the book that no section runs: a section gets one private Redis, and
/// these need a Redis Cluster of three masters. Each names the test of `tests/it/cluster.rs`
/// that runs what it shows on such a cluster.
const RUN_ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "docs/redlock-and-cluster.md",
        "$ lockctl --cluster --redis redis://127.0.0.1:7101 hammer --sku '{sku_886}'",
        "the_hammer_passes_on_a_cluster_with_every_strategy",
    ),
    (
        "docs/redlock-and-cluster.md",
        "$ lockctl --cluster --redis redis://127.0.0.1:7101 buy sku_886",
        "a_sku_whose_keys_span_slots_is_refused_with_the_fix",
    ),
];

/// Every marked section of the README and the book has a test of its own here, every section
/// a test here names is in one of them, and every `$ lockctl` line of the README and the book
/// is inside a marked section or run elsewhere (`RUN_ELSEWHERE`, each by a test that exists).
#[test]
fn every_lockctl_example_of_the_readme_and_the_book_is_run() {
    let all = all_sections();
    let this = include_str!("readme.rs");
    for section in &all {
        assert!(
            this.contains(&format!("run_section(\"{}\")", section.name)),
            "section {} of {} has no test in tests/it/readme.rs",
            section.name,
            section.file
        );
    }
    // Built here so that this line does not count as a call.
    let call = format!("{}(\"", "run_section");
    for named in this.split(&call).skip(1) {
        let name = &named[..named.find('"').unwrap()];
        assert!(
            name == "{}" || all.iter().any(|s| s.name == name),
            "tests/it/readme.rs runs section {name}, which is in neither the README nor docs/"
        );
    }
    let cluster_tests = include_str!("cluster.rs");
    let mut elsewhere_used = vec![false; RUN_ELSEWHERE.len()];
    let mut untested = Vec::new();
    for (file, text) in documents() {
        let mut inside = false;
        for (i, line) in text.lines().enumerate() {
            if line.starts_with("<!-- readme-test: ") {
                inside = true;
            } else if line.starts_with("<!-- /readme-test -->") {
                inside = false;
            } else if line.starts_with("$ lockctl") && !inside {
                let elsewhere = RUN_ELSEWHERE
                    .iter()
                    .position(|(f, start, _)| *f == file && line.starts_with(start));
                match elsewhere {
                    Some(k) => elsewhere_used[k] = true,
                    None => untested.push(format!("{file}:{}: {line}", i + 1)),
                }
            }
        }
    }
    for ((file, start, test), used) in RUN_ELSEWHERE.iter().zip(&elsewhere_used) {
        assert!(
            *used,
            "{file} no longer shows `{start}`: drop it from RUN_ELSEWHERE"
        );
        assert!(
            cluster_tests.contains(&format!("fn {test}()")),
            "`{start}` of {file} is said to be run by {test}, which tests/it/cluster.rs does not have"
        );
    }
    assert!(
        untested.is_empty(),
        "examples outside any <!-- readme-test --> section: {untested:#?}"
    );
}

/// The README's library example is `examples/fenced_purchase.rs` as it is (its `//!` header
/// aside), which `tests/it/examples.rs` runs: the program shown is the program tested.
#[test]
fn the_readmes_library_example_is_the_fenced_purchase_example() {
    let text = readme();
    let shown = text
        .split_once("`examples/fenced_purchase.rs`:\n\n```rust\n")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .map(|(code, _)| code)
        .expect("the README shows examples/fenced_purchase.rs in a rust block");
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/fenced_purchase.rs"
    ))
    .unwrap();
    let program: String = file
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        shown, program,
        "the README's copy of examples/fenced_purchase.rs differs"
    );
}

#[test]
fn masking_hides_only_what_differs_between_runs() {
    assert_eq!(
        masked(
            "  latency     p50 2.697 ms  bought 9  redis       127.0.0.1:6379",
            false
        ),
        " latency p50 # ms bought 9 redis #.#:X"
    );
    assert_eq!(
        masked(
            "bought, 9 left (1 of sku_886, order o-1480f321573cb8f7)",
            false
        ),
        "bought, 9 left (1 of sku_886, order o-X)"
    );
    assert_eq!(
        masked(
            "  - lost orders: 4 requests were answered \"bought\" but have no row: h29c385cd-4, h29c385cd-6",
            true
        ),
        " - lost orders: # requests were answered \"bought\" but have no row: #"
    );
    assert_eq!(
        masked("lock under no fault: hunt-ddcced-lock-00r1: gone", true),
        masked("lock under no fault: hunt-4c767a-lock-00r1: gone", true)
    );
    assert_ne!(
        masked("verdict PASS (1 round)", true),
        masked("verdict FAIL (1 round)", true)
    );
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(fits(
        &lines(&["a", "...", "d"]),
        &lines(&["a", "b", "c", "d"])
    ));
    assert!(fits(&lines(&["a", "...", "d"]), &lines(&["a", "d"])));
    assert!(!fits(&lines(&["a", "...", "d"]), &lines(&["a", "b", "c"])));
    assert!(!fits(&lines(&["a", "b"]), &lines(&["a", "b", "c"])));
    assert!(fits(&lines(&["a b ..."]), &lines(&["a b c d"])));
    assert!(!fits(&lines(&["a b ..."]), &lines(&["a c d"])));
    assert!(!fits(&lines(&["a b ..."]), &lines(&[])));
    assert_eq!(
        label_sets_sorted(lines(&[
            "# TYPE m",
            "m{a=\"2\"} 1",
            "m{a=\"1\"} 2",
            "{\"b\":1}",
            "{\"a\":1}"
        ])),
        lines(&[
            "# TYPE m",
            "m{a=\"1\"} 2",
            "m{a=\"2\"} 1",
            "{\"b\":1}",
            "{\"a\":1}"
        ])
    );
}

/// Every file or directory of this repository the README or the book names in backticks
/// exists (the tutorial's PHP under `examples/tutorial-php/`, scripts, docs, tests, sources),
/// named from the repository's root: before, the README sent readers to a `tutorial/`
/// directory that was not there.
#[test]
fn every_path_the_readme_and_the_book_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, text) in documents() {
        for (i, part) in text.split('`').enumerate() {
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
                missing.push(format!("{file}: {path}"));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: is the README's and the book's form still this one?"
    );
    assert!(
        missing.is_empty(),
        "the README or the book names paths that do not exist: {missing:?}"
    );
}
