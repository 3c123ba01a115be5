//! `lockctl run -- CMD`: jobs under the lock never overlap, a lost lease stops the whole
//! process group, a dead lockctl takes its job with it, and exit codes pass through.

use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    RedisServer, Streams, code, eventually, json, lockctl, signal, spawn_lockctl_env,
    spawn_lockctl_with, stderr, stdout,
};
use redis::Commands;

/// Whether a process is gone (or a zombie nobody has reaped yet, which runs nothing).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The pid a job wrote into `file`, once it has.
fn pid_in(file: &Path) -> u32 {
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(file)
            .is_ok_and(|s| s.trim().parse::<u32>().is_ok())),
        "the job never wrote its pid"
    );
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Jobs that append `<fence> start <ns>` and `<fence> end <ns>` lines to `log`.
fn logging_job(log: &Path, sleep: &str) -> String {
    let log = log.display();
    format!(
        "echo \"$LOCKCTL_FENCE start $(date +%s%N)\" >> {log}; sleep {sleep}; echo \"$LOCKCTL_FENCE end $(date +%s%N)\" >> {log}"
    )
}

/// (fence, start ns, end ns) per job, sorted by start.
fn intervals(log: &Path) -> Vec<(u64, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (fence, what, at) = (
            f[0].parse::<u64>().unwrap(),
            f[1],
            f[2].parse::<u128>().unwrap(),
        );
        match what {
            "start" => {
                starts.insert(fence, at);
            }
            _ => out.push((fence, starts[&fence], at)),
        }
    }
    out.sort_by_key(|i| i.1);
    out
}

fn no_overlap_and_rising_fences(jobs: usize) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = logging_job(&log, "0.05");
    let children: Vec<Child> = (0..jobs)
        .map(|_| {
            spawn_lockctl_with(
                &server.url(),
                &[
                    "run",
                    "--name",
                    "nightly",
                    "--wait-ms",
                    "60000",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
                Streams::Capture,
            )
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), jobs, "{runs:?}");
    for pair in runs.windows(2) {
        let ((f1, _, end1), (f2, start2, _)) = (pair[0], pair[1]);
        assert!(end1 <= start2, "two jobs overlapped: {runs:?}");
        assert!(f2 > f1, "fences did not rise with time: {runs:?}");
    }
}

#[test]
fn two_jobs_on_one_name_never_overlap() {
    no_overlap_and_rising_fences(2);
}

#[test]
fn ten_jobs_on_one_name_never_overlap_and_their_fences_rise() {
    no_overlap_and_rising_fences(10);
}

#[test]
fn the_job_sees_its_lock_token_fence_and_deadline() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("env");
    let script = format!(
        "echo \"$LOCKCTL_LOCK_KEY $LOCKCTL_TOKEN $LOCKCTL_FENCE $LOCKCTL_LEASE_DEADLINE_MS\" > {}; sleep 0.3",
        env.display()
    );
    let child = spawn_lockctl_with(
        &server.url(),
        &[
            "run", "--name", "envjob", "--ttl-ms", "4000", "--", "sh", "-c", &script,
        ],
        Streams::Capture,
    );
    assert!(eventually(Duration::from_secs(20), || env.exists()));
    thread::sleep(Duration::from_millis(50));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let held: String = server.raw().get("dist_lock:envjob").unwrap();
    let text = std::fs::read_to_string(&env).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(f[0], "dist_lock:envjob");
    assert_eq!(f[1], held, "the token is the lock's value");
    assert_eq!(f[1].len(), 32);
    assert!(f[2].parse::<u64>().unwrap() >= 1);
    let deadline: u128 = f[3].parse().unwrap();
    assert!(
        deadline > now_ms && deadline <= now_ms + 4000,
        "{deadline} vs {now_ms}"
    );
    // While it runs, status and unlock see it as they see a SKU's lock.
    let v = json(&lockctl(&server.url(), &["status", "envjob", "--json"]));
    assert_eq!(v["lock"]["token"], held.as_str());
    assert_eq!(v["lock"]["fence"].as_u64(), f[2].parse::<u64>().ok());
    assert!(v["lock"]["held_ms"].as_u64().is_some(), "{v}");
    assert!(v["stock"].is_null());
    let out = lockctl(&server.url(), &["unlock", "envjob"]);
    assert_eq!(
        code(&out),
        3,
        "unlock without --force leaves a live job alone"
    );
    assert_eq!(code(&child.wait_with_output().unwrap()), 0);
}

/// Starts a job whose group has a grandchild (`sleep 100` in the background) and returns
/// lockctl, the grandchild's pid, and the directory holding its pid file.
fn job_with_grandchild(
    server: &RedisServer,
    name: &str,
    ttl_ms: &str,
) -> (Child, u32, tempfile::TempDir) {
    job_with_grandchild_after(server, name, ttl_ms, ":")
}

/// [`job_with_grandchild`], whose job runs the shell command `first` before anything else.
fn job_with_grandchild_after(
    server: &RedisServer,
    name: &str,
    ttl_ms: &str,
    first: &str,
) -> (Child, u32, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!(
        "{first}; sleep 100 & echo $! > {}; wait",
        pid_file.display()
    );
    let child = spawn_lockctl_env(
        &server.url(),
        &[
            "--json", "run", "--name", name, "--ttl-ms", ttl_ms, "--", "sh", "-c", &script,
        ],
        &[],
        Streams::Capture,
    );
    let grandchild = pid_in(&pid_file);
    (child, grandchild, dir)
}

#[test]
fn a_forced_unlock_stops_the_whole_group_and_exits_5() {
    let server = RedisServer::start();
    let (child, grandchild, _dir) = job_with_grandchild(&server, "forced", "1500");
    let out = lockctl(&server.url(), &["unlock", "forced", "--force"]);
    assert_eq!(code(&out), 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert_eq!(json(&out)["lease_lost"], true);
    // It no longer held the lock: it released nothing.
    assert_eq!(json(&out)["released"], false, "{}", stdout(&out));
    assert!(dead(grandchild), "the grandchild outlived the lost lease");
}

#[test]
fn a_killed_connection_stops_the_group_before_the_lease_could_end() {
    let server = RedisServer::start();
    let (child, grandchild, _dir) = job_with_grandchild(&server, "cut", "3000");
    let until: i64 = server.raw().pttl("dist_lock:cut").unwrap();
    let cut = Instant::now();
    // Every connection but this one: lockctl's and its watchdog's.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("SKIPME")
        .arg("yes")
        .arg("TYPE")
        .arg("normal")
        .query(&mut server.raw())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert!(dead(grandchild));
    // The lease the server still held ran to `until` at the latest: the group was dead by
    // then (lockctl exits only after it is), so no one else could have been granted the lock
    // while the job ran.
    assert!(
        cut.elapsed() < Duration::from_millis(until as u64),
        "the job outlived its lease: {:?} > {until} ms",
        cut.elapsed()
    );
}

/// With lockctl stopped (by the test, or by itself), its guard must kill the job's group
/// before the lease it last renewed can end on the server (when another holder could be
/// granted it); continued, lockctl reports the lease lost (exit 5).
fn the_guard_beats_the_lease(server: &RedisServer, name: &str, lockctl: Child, grandchild: u32) {
    let key = format!("dist_lock:{name}");
    let until: i64 = server.raw().pttl(&key).unwrap();
    let from = Instant::now();
    let died = eventually(Duration::from_millis(until as u64 + 3000), || {
        dead(grandchild)
    });
    let at = from.elapsed();
    let still_held: bool = server.raw().exists(&key).unwrap();
    signal(lockctl.id(), "CONT");
    let out = crate::support::finish_within(lockctl, Duration::from_secs(20), "lockctl run");
    assert!(died, "the job outlived its lease while lockctl was stopped");
    assert!(
        still_held && at < Duration::from_millis(until as u64),
        "the group died {at:?} after, the lease had {until} ms left (held: {still_held})"
    );
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert_eq!(json(&out)["lease_lost"], true, "{}", stdout(&out));
}

#[test]
fn a_paused_lockctl_cannot_let_its_job_outlive_the_lease() {
    let server = RedisServer::start();
    let (child, grandchild, _dir) = job_with_grandchild(&server, "paused", "2000");
    signal(child.id(), "STOP");
    the_guard_beats_the_lease(&server, "paused", child, grandchild);
}

#[test]
fn lockctl_paused_right_after_starting_the_job_still_cannot_let_it_outlive_the_lease() {
    // The job's first act stops lockctl (its parent), which has then had no more time than
    // the job's exec to tell the guard anything: the guard was armed before the child
    // started, and the child told it its group before the job's code ran.
    let server = RedisServer::start();
    let (child, grandchild, _dir) =
        job_with_grandchild_after(&server, "early", "1500", "kill -STOP $PPID");
    the_guard_beats_the_lease(&server, "early", child, grandchild);
}

/// Runs the shell command `line` on a terminal of its own (`script`, from bsdutils), as an
/// interactive shell would; its stdin is what is typed there.
fn on_a_terminal(line: &str) -> Child {
    std::process::Command::new("script")
        .args(["-qec", line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script (bsdutils) runs lockctl on a terminal")
}

#[test]
fn ctrl_z_stops_lockctl_with_its_job_and_the_lease_ends_the_job() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let line = format!(
        // `exec`: the job is one process. A shell that vforks its `sleep` sits in
        // uninterruptible sleep (D) while the child is stopped, and lockctl, which watches the
        // job's leader, sees no stop (found by this test on a loaded machine: 2 runs in 15).
        "{} --redis {} --json run --name tz --ttl-ms 1500 -- sh -c 'echo $$ > {}; exec sleep 100'",
        env!("CARGO_BIN_EXE_lockctl"),
        server.url(),
        pid_file.display()
    );
    let mut script = on_a_terminal(&line);
    let job = pid_in(&pid_file);
    let lockctl_pid: u32 = std::fs::read_to_string(format!("/proc/{job}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // Ctrl-Z goes to the terminal's foreground group: wait until lockctl has made that the
    // job's (on a loaded machine the job can write its pid first), or the ^Z would reach
    // lockctl's own group instead.
    let stat_field = |pid: u32, n: usize| -> Option<i64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(n)?
            .parse()
            .ok()
    };
    assert!(
        eventually(Duration::from_secs(10), || {
            // Fields after the name: state, ppid, pgrp, session, tty_nr, tpgid.
            let (pgrp, tpgid) = (stat_field(job, 2), stat_field(job, 5));
            pgrp.is_some() && pgrp == tpgid
        }),
        "the job never became the terminal's foreground"
    );
    use std::io::Write as _;
    let mut tty = script.stdin.take().unwrap();
    tty.write_all(b"\x1a").unwrap();
    tty.flush().unwrap();
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().chars().next())
            })
            .flatten()
    };
    assert!(
        eventually(Duration::from_secs(10), || state(lockctl_pid) == Some('T')),
        "lockctl did not stop with its job (lockctl {:?}, job {:?}, the terminal's foreground {:?}, the job's group {:?})",
        state(lockctl_pid),
        state(job),
        stat_field(job, 5),
        stat_field(job, 2)
    );
    // Nothing renews the lease now: the guard ends the job, and the lock ends with the lease.
    assert!(
        eventually(Duration::from_secs(10), || dead(job)),
        "the stopped job outlived its lease"
    );
    let mut raw = server.raw();
    assert!(
        eventually(Duration::from_secs(5), || !raw
            .exists::<_, bool>("dist_lock:tz")
            .unwrap_or(true)),
        "the lock is still held"
    );
    signal(lockctl_pid, "CONT");
    // script stops itself when its command stops, as a shell would show the job stopped.
    signal(script.id(), "CONT");
    drop(tty);
    let out = crate::support::finish_within(script, Duration::from_secs(20), "script");
    assert!(
        stdout(&out).contains("\"lease_lost\":true"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn killing_lockctl_kills_the_job_and_frees_the_lock_within_one_ttl() {
    let server = RedisServer::start();
    let (mut child, grandchild, _dir) = job_with_grandchild(&server, "k9", "2000");
    signal(child.id(), "KILL");
    let _ = child.wait();
    assert!(
        eventually(Duration::from_secs(5), || dead(grandchild)),
        "the job outlived lockctl"
    );
    let out = lockctl(
        &server.url(),
        &[
            "--json",
            "run",
            "--name",
            "k9",
            "--wait-ms",
            "10000",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let waited = json(&out)["waited_ms"].as_u64().unwrap();
    // One TTL (2000 ms) and the waiter's own refresh period (333 ms) at the most, with room.
    assert!(
        waited < 3500,
        "waited {waited} ms for a lock whose holder died"
    );
}

#[test]
fn exit_codes_pass_through_and_a_held_lock_is_busy_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    for (script, expected) in [
        ("exit 0", 0),
        ("exit 1", 1),
        ("exit 42", 42),
        ("kill -TERM $$", 143),
        ("kill -KILL $$", 137),
    ] {
        let out = lockctl(&url, &["run", "--name", "codes", "--", "sh", "-c", script]);
        assert_eq!(code(&out), expected, "{script}: {}", stderr(&out));
    }
    server.hold_lock("codes", "someone-else", 30_000);
    let t = Instant::now();
    let out = lockctl(&url, &["--json", "run", "--name", "codes", "--", "true"]);
    assert_eq!(code(&out), 4);
    assert_eq!(json(&out)["acquired"], false);
    assert!(t.elapsed() < Duration::from_secs(10), "--wait-ms 0 waited");
    let out = lockctl(
        &url,
        &[
            "run",
            "--name",
            "codes",
            "--grace-ms",
            "20000",
            "--",
            "true",
        ],
    );
    assert_eq!(
        code(&out),
        2,
        "a grace that cannot fit in the TTL is refused"
    );
}

#[test]
fn signals_reach_the_job_and_the_lock_is_released_after_it_exits() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("got-term");
    let ready = dir.path().join("ready");
    let script = format!(
        "trap 'echo yes > {}; exit 7' TERM; touch {}; while true; do sleep 0.05; done",
        mark.display(),
        ready.display()
    );
    let child = spawn_lockctl_with(
        &server.url(),
        &["run", "--name", "sig", "--", "sh", "-c", &script],
        Streams::Capture,
    );
    assert!(eventually(Duration::from_secs(20), || ready.exists()));
    signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 7, "the job's own code: {}", stderr(&out));
    assert!(mark.exists(), "the job never saw SIGTERM");
    assert!(!server.raw().exists::<_, bool>("dist_lock:sig").unwrap());
}

#[test]
fn with_one_of_three_lock_nodes_paused_the_job_still_runs() {
    let data = RedisServer::start();
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    nodes[1].signal("STOP");
    let mut args = Vec::new();
    for n in &nodes {
        args.extend(["--lock-node".to_string(), n.url()]);
    }
    args.extend(
        ["run", "--name", "quorum", "--", "sh", "-c", "exit 3"]
            .iter()
            .map(|s| s.to_string()),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = lockctl(&data.url(), &argv);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    nodes[1].signal("CONT");
}

#[test]
fn a_job_started_from_a_terminal_may_read_it() {
    // `script` gives lockctl a terminal, as an interactive shell would.
    let server = RedisServer::start();
    let line = format!(
        "{} --redis {} run --name tty --ttl-ms 3000 -- sh -c 'read x; echo got:$x'",
        env!("CARGO_BIN_EXE_lockctl"),
        server.url()
    );
    let mut child = on_a_terminal(&line);
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    // A job left in the background would be stopped by SIGTTIN and hang here.
    let out = crate::support::finish_within(child, Duration::from_secs(20), "lockctl run on a tty");
    assert!(stdout(&out).contains("got:hello"), "{}", stdout(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    let held: bool = server.raw().exists("dist_lock:tty").unwrap();
    assert!(!held, "the lock was not released");
}

#[test]
fn a_signal_while_waiting_leaves_the_queue_and_still_prints_json() {
    let server = RedisServer::start();
    server.hold_lock("waiting", "someone-else", 30_000);
    let child = spawn_lockctl_with(
        &server.url(),
        &[
            "--json",
            "run",
            "--name",
            "waiting",
            "--wait-ms",
            "20000",
            "--",
            "true",
        ],
        Streams::Capture,
    );
    let mut raw = server.raw();
    assert!(
        eventually(Duration::from_secs(10), || raw
            .zcard::<_, u64>("dist_lock_queue:waiting")
            .unwrap_or(0)
            > 0),
        "lockctl never queued"
    );
    signal(child.id(), "TERM");
    let out = crate::support::finish_within(child, Duration::from_secs(10), "lockctl run");
    assert_eq!(code(&out), 143, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["error_kind"], "signal", "{v}");
    assert_eq!(v["signal"], 15, "{v}");
    let left: u64 = raw.zcard("dist_lock_queue:waiting").unwrap();
    assert_eq!(left, 0, "the queue place was not given back");
}

/// A command that cannot be started exits as a shell would: 127 when there is no such
/// command, 126 when it cannot be executed, with error kind `environment` under --json; the
/// lock is given back either way.
#[test]
fn a_command_that_cannot_start_exits_127_or_126_as_a_shell_would() {
    use std::os::unix::fs::PermissionsExt;
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &["run", "--name", "nojob", "--", "no-such-command-x"],
    );
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(stderr(&out).contains("no such command"), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = script.to_str().unwrap();
    let out = lockctl(
        &server.url(),
        &["--json", "run", "--name", "nojob", "--", path],
    );
    assert_eq!(code(&out), 126, "{}", stderr(&out));
    assert!(stderr(&out).contains("not executable"), "{}", stderr(&out));
    assert_eq!(json(&out)["error_kind"], "environment", "{}", stdout(&out));
    let held: bool = server.raw().exists("dist_lock:nojob").unwrap();
    assert!(!held, "the lock was kept");
}
