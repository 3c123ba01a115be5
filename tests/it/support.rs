//! Test support: a private `redis-server` per test, and the real `lockctl` binary.
//!
//! Every server runs on a free port with its own temporary directory (`--save ""
//! --appendonly no`, log inside it), is waited for with a deadline, and is killed on `Drop`, so
//! tests never touch the machine's own Redis on 6379 or each other's keys.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockctl::conn::{Conn, ConnectOptions, Target};

pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// A fresh server with default settings.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A fresh server with extra `redis-server` arguments (e.g. `["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut last_log = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let port = free_port();
            let log = dir.path().join("redis.log");
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let child = spawn_server(port, dir.path(), &extra);
            let mut server = RedisServer {
                child,
                port,
                dir,
                extra,
            };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
            if !last_log.contains("Address already in use") {
                break;
            }
        }
        panic!("redis-server never answered PING; its log:\n{last_log}");
    }

    /// Kills the server and starts it again on the same port and directory (what it kept on
    /// disk, with `--appendonly yes` among its arguments, survives).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_server(self.port, self.dir.path(), &self.extra);
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        assert!(
            self.wait_ready(Duration::from_secs(10)),
            "redis-server did not come back; its log:\n{log}"
        );
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut c) = self
                .raw_client()
                .get_connection_with_timeout(Duration::from_millis(200))
            {
                // A server started with requirepass answers NOAUTH: it is up all the same.
                match redis::cmd("PING").query::<String>(&mut c) {
                    Ok(_) => return true,
                    Err(e) if e.code() == Some("NOAUTH") => return true,
                    Err(_) => {}
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn raw_client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A plain driver connection, for reading raw state behind the library's back.
    pub fn raw(&self) -> redis::Connection {
        self.raw_client()
            .get_connection()
            .expect("connect to the test server")
    }

    pub fn target(&self) -> Target {
        Target::open(&self.url(), ConnectOptions::default()).unwrap()
    }

    pub fn conn(&self) -> Conn {
        self.target().connect().expect("connect to the test server")
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the server process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_server(port: u16, dir: &std::path::Path, extra: &[String]) -> Child {
    // The defaults first: later arguments (extra) override them.
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (apt-get install -y redis-server)")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The fields the contract requires in `hammer --json`.
pub const HAMMER_FIELDS: [&str; 16] = [
    "verdict",
    "requests",
    "concurrency",
    "strategy",
    "initial_stock",
    "final_stock",
    "bought",
    "sold_qty",
    "sold_out",
    "busy",
    "lease_lost",
    "errors",
    "oversold",
    "elapsed_s",
    "throughput_rps",
    "latency_ms",
];

/// Runs the real binary against `url` (through REDIS_URL, as a user's shell would).
pub fn lockctl(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(args)
        .env("REDIS_URL", url)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("run lockctl")
}

/// A started `lockctl` child, for tests that kill it.
pub fn spawn_lockctl(url: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn lockctl")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one JSON object on stdout; fails the test if there is anything else.
pub fn json(o: &Output) -> serde_json::Value {
    let text = stdout(o);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{text}\nstderr:\n{}",
            stderr(o)
        )
    })
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
