//! A fresh machine: the main job runs with no Redis started (a private redis-server for the
//! run), and commands whose writes must outlive them never get one.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{
    code, eventually, free_port, json, lockctl_unconfigured, redis_server_program, signal, stderr,
    stdout,
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

/// Servers that took the port lockctl chose for its private one, between its choice and its
/// `redis-server`'s start (the race the private server's start defends against): started by
/// [`squatting_redis_server`], killed on `Drop`.
struct Squatters {
    dir: tempfile::TempDir,
}

impl Squatters {
    /// The ports and pids of the squatters started so far.
    fn started(&self) -> Vec<(u16, u32)> {
        let list = std::fs::read_to_string(self.dir.path().join("squatters")).unwrap_or_default();
        list.lines()
            .map(|l| {
                let (port, pid) = l.split_once(' ').expect("a 'port pid' line");
                (port.parse().unwrap(), pid.parse().unwrap())
            })
            .collect()
    }

    /// Every squatter's keys: none, unless someone wrote to it.
    fn keys(&self) -> Vec<String> {
        use redis::Commands;
        let mut keys = Vec::new();
        for (port, _) in self.started() {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
            let found: Vec<String> = client.get_connection().unwrap().keys("*").unwrap();
            keys.extend(found.into_iter().map(|k| format!("{port}: {k}")));
        }
        keys
    }
}

impl Drop for Squatters {
    fn drop(&mut self) {
        for (_, pid) in self.started() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
    }
}

/// A `redis-server` for `LOCKCTL_REDIS_SERVER` before which another server takes the port it
/// is given and answers there (on the first start only, or on `every` start), while it is
/// still starting; a start not squatted is the real `redis-server`.
fn squatting_redis_server(every: bool) -> (std::path::PathBuf, Squatters) {
    use std::os::unix::fs::PermissionsExt;
    let squatters = Squatters {
        dir: tempfile::tempdir().unwrap(),
    };
    let dir = squatters.dir.path();
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let (real, cli, list) = (
        quote(&redis_server_program()),
        quote(&crate::support::redis_cli_program()),
        quote(&dir.join("squatters")),
    );
    let when = if every { "true" } else { "[ ! -e {list} ]" }.replace("{list}", &list);
    // A squatted start stays a server slow to start (it never binds) until lockctl, having
    // seen who answers, kills it.
    let script = format!(
        "#!/bin/sh\n\
         # lockctl runs it as: THIS --port PORT ...\n\
         if {when}; then\n\
         \x20 {real} --port \"$2\" --bind 127.0.0.1 --save '' --appendonly no --dir {dir} \\\n\
         \x20   --logfile {dir}/squatter-\"$2\".log </dev/null >/dev/null 2>&1 &\n\
         \x20 squatter=$!\n\
         \x20 echo \"$2 $squatter\" >> {list}\n\
         \x20 until {cli} -p \"$2\" ping >/dev/null 2>&1; do kill -0 $squatter || exit 1; done\n\
         \x20 exec sleep 3600\n\
         fi\n\
         exec {real} \"$@\"\n",
        dir = quote(dir),
    );
    let path = dir.join("squatting-redis-server");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (path, squatters)
}

/// Another redis-server took the port the private server was to take, between lockctl's choice
/// of it and its own server's start: its PONG is not the private server's, so nothing is
/// written to it, and the run goes to another port, its own.
#[test]
fn a_server_squatting_the_private_port_is_not_written_to_and_another_port_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let (wrapper, squatters) = squatting_redis_server(false);
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["hammer", "-n", "20", "-c", "2", "--stock", "5", "--json"],
    )
    .env("LOCKCTL_REDIS_SERVER", &wrapper)
    .output()
    .unwrap();
    let squatted = squatters.started();
    assert_eq!(squatted.len(), 1, "{}", stderr(&out));
    assert_eq!(
        squatters.keys(),
        Vec::<String>::new(),
        "written to a squatter"
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["verdict"].as_str(), v["bought"].as_u64()),
        (Some("pass"), Some(5))
    );
    let on = format!("on port {} ", squatted[0].0);
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
    let (wrapper, squatters) = squatting_redis_server(true);
    let out = lockctl_unconfigured(
        &nobody_home(),
        tmp.path(),
        &["--redis", "auto", "hammer", "-n", "20", "--stock", "5"],
    )
    .env("LOCKCTL_REDIS_SERVER", &wrapper)
    .output()
    .unwrap();
    assert_eq!(
        squatters.keys(),
        Vec::<String>::new(),
        "written to a squatter"
    );
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("PASS"));
    let err = stderr(&out);
    let last = squatters.started().last().map(|(port, _)| *port);
    assert!(
        last.is_some_and(|port| err.contains(&format!("port {port} ")))
            && err.contains("not the redis-server lockctl started"),
        "{err}"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}
