//! Scripts that every Redis-compatible server accepts: every key a script touches is one it
//! declared in KEYS (Dragonfly refuses the others, and a Valkey or Redis cluster can only
//! route what it is told), and no script carries a shebang line an older server rejects.
//!
//! Two ways of looking, each able to fail on its own:
//! - the sources: every Lua text in the workspace's code, read as text, may not build a key
//!   inside the script (a `..` or a literal in a command's key position);
//! - the server: MONITOR shows each command a script runs (`[0 lua] ...`) right after the
//!   script's own call; the server itself (`COMMAND GETKEYS`) says which of its arguments are
//!   keys, and each must be among the keys that call declared. A workload of every strategy,
//!   with contention (the FIFO hand-off and its wake lists), lost leases, the orders stream,
//!   the worker, status, the escape hatch and `run` exercises the scripts.

use std::collections::HashSet;

use redis::Commands;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{RedisServer, TestDb, lockctl, redis_cli_program};

/// Every Lua text in the workspace's sources: the `.lua` files, and any raw string literal
/// that calls Redis.
fn lua_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src"), root.join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs" || e == "lua") {
                files.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // A `.lua` file is one Lua text, whole (a script's parts are composed from them).
        if file.extension().is_some_and(|e| e == "lua") {
            out.push((file.display().to_string(), text));
            continue;
        }
        for (open, close) in [("r\"", "\""), ("r#\"", "\"#")] {
            let mut rest = text.as_str();
            while let Some(at) = rest.find(open) {
                let body = &rest[at + open.len()..];
                let Some(end) = body.find(close) else { break };
                let lua = &body[..end];
                if lua.contains("redis.call") || lua.contains("redis.pcall") {
                    out.push((file.display().to_string(), lua.to_string()));
                }
                rest = &body[end + close.len()..];
            }
        }
    }
    out
}

/// The first key argument of each `redis.call('CMD', ...)` / `redis.pcall` in `lua` that is
/// built in the script: returns `(command, argument)` for each such call.
fn keys_built_inside(lua: &str) -> Vec<(String, String)> {
    let call = regex::Regex::new(r"redis\.p?call\(\s*'([A-Za-z]+)'\s*(?:,\s*([^,)]+))?").unwrap();
    // Commands whose first argument is a subcommand or takes no key.
    let keyless = [
        "TIME", "XINFO", "XGROUP", "OBJECT", "SCRIPT", "CLUSTER", "INFO", "PING",
    ];
    let mut bad = Vec::new();
    for c in call.captures_iter(lua) {
        let cmd = c[1].to_ascii_uppercase();
        let Some(arg) = c.get(2).map(|m| m.as_str().trim()) else {
            continue;
        };
        if keyless.contains(&cmd.as_str()) {
            continue;
        }
        if arg.contains("..") || arg.starts_with('\'') || arg.starts_with('"') {
            bad.push((cmd, arg.to_string()));
        }
    }
    bad
}

#[test]
fn no_script_builds_a_key_inside_itself_or_carries_a_shebang() {
    let sources = lua_sources();
    assert!(
        sources.len() >= 15,
        "only {} Lua texts found: has the code's form changed?",
        sources.len()
    );
    let mut bad = Vec::new();
    for (file, lua) in &sources {
        if lua.trim_start().starts_with("#!") {
            bad.push(format!(
                "{file}: a shebang line ({})",
                lua.lines().next().unwrap()
            ));
        }
        for (cmd, arg) in keys_built_inside(lua) {
            bad.push(format!("{file}: {cmd} on a key built in the script: {arg}"));
        }
    }
    assert!(
        bad.is_empty(),
        "scripts that name keys they did not declare:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_source_check_catches_a_key_built_inside_a_script() {
    // The negative control: the hand-off as it was written before every key was declared.
    let before = "redis.call('RPUSH', WP .. token, fence)\nredis.call('GET', KEYS[1])\n\
                  redis.call('DEL', 'dist_lock:x')\nredis.call('XINFO', 'GROUPS', KEYS[1])";
    let found = keys_built_inside(before);
    assert_eq!(
        found,
        vec![
            ("RPUSH".to_string(), "WP .. token".to_string()),
            ("DEL".to_string(), "'dist_lock:x'".to_string())
        ]
    );
}

/// The tokens of one MONITOR line after its `[db client]` part: `"GET" "k"` -> [GET, k].
fn monitor_args(line: &str) -> Option<(bool, Vec<Vec<u8>>)> {
    let close = line.find("] ")?;
    let from_lua = line[..close].ends_with(" lua");
    let mut args = Vec::new();
    let mut bytes = line[close + 2..].bytes().peekable();
    while let Some(b) = bytes.next() {
        if b != b'"' {
            continue;
        }
        let mut arg = Vec::new();
        while let Some(b) = bytes.next() {
            match b {
                b'"' => break,
                b'\\' => match bytes.next()? {
                    b'x' => {
                        let hex: String = [bytes.next()?, bytes.next()?]
                            .iter()
                            .map(|&c| c as char)
                            .collect();
                        arg.push(u8::from_str_radix(&hex, 16).ok()?);
                    }
                    b'n' => arg.push(b'\n'),
                    b'r' => arg.push(b'\r'),
                    b't' => arg.push(b'\t'),
                    b'a' => arg.push(7),
                    b'b' => arg.push(8),
                    other => arg.push(other),
                },
                other => arg.push(other),
            }
        }
        args.push(arg);
    }
    Some((from_lua, args))
}

#[test]
fn every_key_a_script_touches_on_the_server_is_one_it_declared() {
    let redis = RedisServer::start();
    let url = redis.url();
    let db = TestDb::create();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("monitor.txt");
    let mut monitor = Command::new(redis_cli_program())
        .args(["-p", &redis.port.to_string(), "monitor"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli monitor");
    std::thread::sleep(Duration::from_millis(300));

    let ok = |args: &[&str]| {
        let out = lockctl(&url, args);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "lockctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&["db", "init", "--db", &db.url]);
    for strategy in ["lock", "fenced", "atomic", "batch", "naive"] {
        let sku = format!("scripts_{strategy}");
        // naive records no orders: it is the negative control.
        let queue: &[&str] = if strategy == "naive" {
            &[]
        } else {
            &["--queue"]
        };
        let hammer = [
            "hammer",
            "--sku",
            &sku,
            "-n",
            "60",
            "-c",
            "8",
            "--stock",
            "40",
            "--strategy",
            strategy,
            "--wait-ms",
            "5000",
            "--users",
            "5",
            "--limit",
            "20",
        ];
        ok(&[&hammer[..], queue].concat());
        let buy = [
            "buy",
            &sku,
            "--strategy",
            strategy,
            "--user",
            "u1",
            "--limit",
            "30",
        ];
        ok(&[&buy[..], queue].concat());
        ok(&["status", &sku]);
    }
    // Buckets: one user buys everything, so the other buckets lend theirs (take, deliver,
    // the move counter, drained marks), under every strategy that buys buckets.
    for strategy in ["lock", "fenced", "atomic", "batch"] {
        let sku = format!("scripts_bk_{strategy}");
        ok(&[
            "hammer",
            "--sku",
            &sku,
            "-n",
            "50",
            "-c",
            "6",
            "--stock",
            "30",
            "--buckets",
            "3",
            "--strategy",
            strategy,
            "--users",
            "1",
            "--limit",
            "1000",
            "--queue",
        ]);
        ok(&["status", &sku]);
    }
    // Leases shorter than the work: expiry, the expiry poker's hand-off, lease_lost.
    ok(&[
        "hammer",
        "--sku",
        "scripts_lease",
        "-n",
        "8",
        "-c",
        "4",
        "--stock",
        "4",
        "--strategy",
        "lock",
        "--ttl-ms",
        "60",
        "--work-ms",
        "100",
        "--wait-ms",
        "3000",
    ]);
    // The watchdog's renewals.
    ok(&[
        "buy",
        "scripts_lock",
        "--strategy",
        "fenced",
        "--ttl-ms",
        "300",
        "--work-ms",
        "400",
        "--watchdog",
    ]);
    ok(&[
        "worker",
        "--db",
        &db.url,
        "--sku",
        "scripts_lock",
        "--sku",
        "scripts_batch",
        "--once",
    ]);
    ok(&["status", "scripts_lock", "--db", &db.url]);
    ok(&["unlock", "scripts_lock", "--force"]);
    ok(&["run", "--name", "scripts_job", "--", "true"]);
    ok(&["seed", "scripts_lock", "5"]);
    std::thread::sleep(Duration::from_millis(500));
    let _ = monitor.kill();
    let _ = monitor.wait();

    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    let mut raw = redis.raw();
    let keys_of = |raw: &mut redis::Connection, args: &[Vec<u8>]| -> Vec<Vec<u8>> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS");
        for a in args {
            cmd.arg(a.as_slice());
        }
        // A command without key arguments is an error here: no keys.
        cmd.query::<Vec<Vec<u8>>>(raw).unwrap_or_default()
    };
    let mut declared: Option<(String, HashSet<Vec<u8>>)> = None;
    let (mut scripts, mut inside) = (0, 0);
    let mut commands_seen = HashSet::new();
    let mut undeclared = Vec::new();
    for line in text.lines() {
        let Some((from_lua, args)) = monitor_args(line) else {
            continue;
        };
        let Some(name) = args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_uppercase())
        else {
            continue;
        };
        if !from_lua {
            declared = matches!(name.as_str(), "EVALSHA" | "EVAL").then(|| {
                scripts += 1;
                (
                    line.to_string(),
                    keys_of(&mut raw, &args).into_iter().collect(),
                )
            });
            continue;
        }
        inside += 1;
        commands_seen.insert(name.clone());
        let Some((call, keys)) = &declared else {
            undeclared.push(format!("{line} (after no script call)"));
            continue;
        };
        for key in keys_of(&mut raw, &args) {
            if !keys.contains(&key) {
                undeclared.push(format!(
                    "{} touched '{}', not declared by: {}",
                    name,
                    String::from_utf8_lossy(&key),
                    &call[..call.len().min(300)]
                ));
            }
        }
    }
    undeclared.sort();
    undeclared.dedup();
    assert!(
        undeclared.is_empty(),
        "{} command(s) inside scripts touched undeclared keys; the first:\n{}",
        undeclared.len(),
        undeclared[..undeclared.len().min(10)].join("\n")
    );
    // The workload did reach the scripts, and the hand-off's commands among them.
    assert!(
        scripts > 300 && inside > 2000,
        "{scripts} script calls, {inside} commands inside"
    );
    for cmd in ["RPUSH", "ZADD", "XADD", "DECRBY", "PEXPIRE", "INCR"] {
        assert!(
            commands_seen.contains(cmd),
            "no script ran {cmd}: {commands_seen:?}"
        );
    }
}

/// The lock's own script text, as lockctl sends it: the prelude, the queue's functions, the
/// carried key bound, then the script `name` (`lua/<name>.lua`, read from the source, so the
/// test runs the real scripts step by step).
fn lock_script(name: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/lockctl-core/src/lock/lua");
    let file = |n: &str| std::fs::read_to_string(dir.join(format!("{n}.lua"))).unwrap();
    format!(
        "{}{}CARRY = KEYS[9]\n{}",
        file("prelude"),
        file("queue"),
        file(name)
    )
}

/// A grant heard on the head list can never be heard again by the same token: a late second
/// call (NOTIFY) for it is refused, and claiming the grant takes the head-list message too, so
/// a Redlock waiter that lost its round and queues again with the same token does not take the
/// old grant for a new one (found by an attack session, replayed here with the real scripts).
#[test]
fn a_grant_heard_on_the_head_list_is_never_heard_twice() {
    let redis = RedisServer::start();
    let mut c = redis.raw();
    let s = "r1";
    let keys: Vec<String> = [
        "dist_lock:",
        "dist_lock_fence:",
        "dist_lock_queue:",
        "dist_lock_waiting:",
        "dist_lock_grant:",
    ]
    .iter()
    .map(|p| format!("{p}{s}"))
    .chain([
        format!("dist_lock_wake:{s}:head"),
        format!("dist_lock_wake:{s}:listener"),
    ])
    .collect();
    let wp = format!("dist_lock_wake:{s}:");
    let (t, h, u) = ("a".repeat(32), "b".repeat(32), "c".repeat(32));
    let run = |c: &mut redis::Connection, name: &str, wake: &str, args: &[&str]| -> redis::Value {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(lock_script(name)).arg(keys.len() + 2);
        cmd.arg(&keys).arg(wake).arg(format!("item:stock:{s}"));
        cmd.arg(args);
        cmd.query(c).unwrap()
    };
    let _: () = c.set(format!("item:stock:{s}"), 10).unwrap();
    let wake = |tok: &str| format!("{wp}{tok}");
    run(
        &mut c,
        "acquire",
        &wake(&h),
        &[&h, "5000", "1", "1000", &wp],
    );
    // T queues behind H at rank 0: it listens on the head list.
    run(
        &mut c,
        "acquire",
        &wake(&t),
        &[&t, "5000", "1", "1000", &wp],
    );
    // H releases knowing no next waiter: the grant goes to the head list.
    run(
        &mut c,
        "release",
        &format!("{wp}-"),
        &[&h, "0", "0", "0", &wp],
    );
    let head: Vec<String> = c.lrange(&keys[5], 0, -1).unwrap();
    assert!(
        head.len() == 1 && head[0].starts_with(&format!("{t}:")),
        "{head:?}"
    );
    // A late second call for T is refused: the head list already tells it.
    let pushed = run(&mut c, "notify", &wake(&t), &[&t, "0", "0", "0", &wp]);
    assert_eq!(pushed, redis::Value::Int(0));
    // T claims at its refresh: the head-list message goes with the claim.
    run(
        &mut c,
        "acquire",
        &wake(&t),
        &[&t, "5000", "1", "1000", &wp],
    );
    assert!(!c.exists::<_, bool>(&keys[5]).unwrap());
    // T gives the lock back (a lost Redlock round), U takes it, T queues again, same token.
    run(
        &mut c,
        "release",
        &format!("{wp}-"),
        &[&t, "0", "0", "0", &wp],
    );
    run(
        &mut c,
        "acquire",
        &wake(&u),
        &[&u, "5000", "1", "1000", &wp],
    );
    run(
        &mut c,
        "acquire",
        &wake(&t),
        &[&t, "5000", "1", "1000", &wp],
    );
    let heard: Option<(String, String)> = redis::cmd("BLPOP")
        .arg(wake(&t))
        .arg(&keys[5])
        .arg(0.3)
        .query(&mut c)
        .unwrap();
    assert_eq!(heard, None, "T heard a grant while U holds the lock");
    let holder: String = c.get(&keys[0]).unwrap();
    assert_eq!(holder, u);
}
