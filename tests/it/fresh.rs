//! A fresh machine: the main job runs with no Redis started (a private redis-server for the
//! run), and commands whose writes must outlive them never get one.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{
    RedisServer, code, eventually, free_port, json, lockctl_unconfigured, redis_server_program,
    signal, stderr, stdout,
};

/// A default address where nothing listens.
fn nobody_home() -> String {
    format!("redis://127.0.0.1:{}", free_port())
}

/// Whether any process still runs with `dir` in its command line (a private server keeps its
/// files there).
fn process_mentions(dir: &Path) -> bool {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|cmd| String::from_utf8_lossy(&cmd).contains(&needle))
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_main_job_runs_on_a_private_server_when_nothing_answers_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["hammer", "-n", "100", "-c", "10", "--stock", "10", "--json"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("using a private redis-server on port"),
        "{}",
        stderr(&out)
    );
    let v = json(&out);
    assert_eq!(v["verdict"], "pass");
    assert_eq!(v["final_stock"], 0);
    assert_eq!(v["bought"], 10);
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
    assert!(
        !process_mentions(tmp.path()),
        "a private redis-server is still running"
    );
}

#[test]
fn redis_auto_asks_for_the_private_server_and_ctrl_c_stops_it_too() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &[
            "--redis", "auto", "hammer", "-n", "30", "--stock", "5", "--json",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["verdict"], "pass");
    assert!(leftovers(tmp.path()).is_empty());

    // Interrupted twice mid-run: the quick exit stops the private server as well.
    let child = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &[
            "--redis",
            "auto",
            "hammer",
            "-n",
            "1000",
            "-c",
            "4",
            "--stock",
            "1000",
            "--work-ms",
            "50",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Running once its private server's directory exists.
    assert!(eventually(Duration::from_secs(20), || !leftovers(
        tmp.path()
    )
    .is_empty()));
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(100));
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(
        eventually(Duration::from_secs(30), || leftovers(tmp.path()).is_empty()
            && !process_mentions(tmp.path())),
        "left behind: {:?}",
        leftovers(tmp.path())
    );
}

#[test]
fn without_redis_server_installed_the_hammer_says_how_to_get_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lockctl_unconfigured(&nobody_home(), tmp.path(), &["hammer", "--stock", "10"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("apt-get install -y redis-server"),
        "{}",
        stderr(&out)
    );
    assert!(leftovers(tmp.path()).is_empty());
}

#[test]
fn commands_whose_writes_must_last_never_start_a_private_server() {
    let tmp = tempfile::tempdir().unwrap();
    let home = nobody_home();
    for args in [
        &["seed", "sku_886", "10"][..],
        &["buy", "sku_886"],
        &["status", "sku_886"],
        &["unlock", "sku_886"],
    ] {
        let out = lockctl_unconfigured(&home, tmp.path(), args)
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("could not connect"),
            "{}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("private"), "{}", stderr(&out));
        assert!(leftovers(tmp.path()).is_empty());
    }
    let out = lockctl_unconfigured(&home, tmp.path(), &["--redis", "auto", "seed", "s", "1"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("only hammer"), "{}", stderr(&out));
}

#[test]
fn a_private_server_left_behind_by_kill_9_is_swept_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    // A pid that is certainly gone: a child that has exited and been reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let stale = tmp
        .path()
        .join(format!("lockctl-redis-{}-deadbeef", gone.id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("redis.log"), "left by a kill -9").unwrap();
    // One whose process is alive (this test) stays.
    let alive = tmp
        .path()
        .join(format!("lockctl-redis-{}-cafef00d", std::process::id()));
    std::fs::create_dir(&alive).unwrap();
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["hammer", "-n", "10", "-c", "2", "--stock", "5", "--json"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stale.exists(), "the stale directory was not swept");
    assert!(alive.exists(), "a live process's directory was removed");
    std::fs::remove_dir(&alive).unwrap();
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

/// A `redis-server` that waits a second before it starts (`LOCKCTL_REDIS_SERVER`), so that
/// whatever already answers on the port lockctl chose answers first, every time.
fn slow_redis_server(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("slow-redis-server");
    let real = redis_server_program();
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nsleep 1\nexec '{}' \"$@\"\n",
            real.display().to_string().replace('\'', r"'\''")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// What the squatter holds: its stock, its ledger and its keys.
fn squatters_books(squatter: &RedisServer) -> (Option<i64>, Vec<(String, i64)>, Vec<String>) {
    use redis::Commands;
    let mut raw = squatter.raw();
    let stock: Option<i64> = raw.get("item:stock:sku_886").unwrap();
    let mut ledger: Vec<(String, i64)> = raw.hgetall("item:orders:sku_886").unwrap();
    ledger.sort();
    let mut keys: Vec<String> = raw.keys("*").unwrap();
    keys.sort();
    (stock, ledger, keys)
}

/// Someone's Redis, with a stock and a ledger of its own.
fn squat() -> RedisServer {
    use redis::Commands;
    let squatter = RedisServer::start();
    let mut raw = squatter.raw();
    let _: () = raw.set("item:stock:sku_886", 777).unwrap();
    let _: () = raw.hset("item:orders:sku_886", "theirs-1", 1).unwrap();
    squatter
}

/// Another redis-server already listens on the port the private server was to take (forced
/// with `LOCKCTL_PRIVATE_REDIS_PORTS`): its PONG is not the private server's, so nothing is
/// written to it, and the run goes to another port, its own.
#[test]
fn a_server_squatting_the_private_port_is_not_written_to_and_another_port_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let squatter = squat();
    let before = squatters_books(&squatter);
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["hammer", "-n", "20", "-c", "2", "--stock", "5", "--json"],
    )
    .env("LOCKCTL_REDIS_SERVER", slow_redis_server(bin.path()))
    .env("LOCKCTL_PRIVATE_REDIS_PORTS", squatter.port.to_string())
    .output()
    .unwrap();
    assert_eq!(
        squatters_books(&squatter),
        before,
        "the squatter's keys changed"
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["verdict"].as_str(), v["bought"].as_u64()),
        (Some("pass"), Some(5))
    );
    let on = format!("on port {} ", squatter.port);
    assert!(
        stderr(&out).contains("using a private redis-server on port")
            && !stderr(&out).contains(&on),
        "{}",
        stderr(&out)
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

/// Every port tried is someone else's: a clear error, exit 1, no verdict, nothing written.
#[test]
fn when_every_private_port_is_squatted_the_hammer_says_so_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let squatter = squat();
    let before = squatters_books(&squatter);
    let port = squatter.port.to_string();
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["--redis", "auto", "hammer", "-n", "20", "--stock", "5"],
    )
    .env("LOCKCTL_REDIS_SERVER", slow_redis_server(bin.path()))
    .env("LOCKCTL_PRIVATE_REDIS_PORTS", [&port[..]; 5].join(","))
    .output()
    .unwrap();
    assert_eq!(
        squatters_books(&squatter),
        before,
        "the squatter's keys changed"
    );
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("PASS"));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("port {port}"))
            && err.contains("not the redis-server lockctl started"),
        "{err}"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}
