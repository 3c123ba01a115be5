//! A private `redis-server` (or `valkey-server`) per test, and which program that is.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use lockctl_core::conn::{Conn, ConnectOptions, Target};
use lockctl_hammer::redis_server;
use redis::Commands;

use crate::programs::redis_server_program;
use crate::tools::{kill_command, signal, spawn_tool};

/// How long a started server may take to answer its first PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// How many free ports are tried before a server that never answered fails the test.
const TRIES: usize = 5;

/// A running server of the test's own; killed (continued first, if stopped) on `Drop`.
pub struct RedisServer {
    child: Child,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// The server binary it runs (`redis-server`, or another product's, such as Valkey's).
    program: PathBuf,
}

impl RedisServer {
    /// A fresh server with default settings.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A fresh server with extra `redis-server` arguments (e.g. `["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_program(&redis_server_program(), extra)
    }

    /// A fresh server of `program` (a `redis-server` or a compatible one: `valkey-server`), with
    /// extra arguments. Fails the test with the server's log if it never answers.
    pub fn start_program(program: &Path, extra: &[&str]) -> RedisServer {
        let mut last_log = String::new();
        for _ in 0..TRIES {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let port = free_port();
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let child = spawn_server(program, port, dir.path(), &extra);
            let mut server = RedisServer {
                child,
                port,
                dir,
                extra,
                program: program.to_path_buf(),
            };
            if server.wait_ready() {
                return server;
            }
            last_log = redis_server::log(server.dir.path());
            // Taken meanwhile, or (a cluster node) too high for its bus port at port + 10000:
            // either way, another free port will do.
            if !last_log.contains("Address already in use")
                && !last_log.contains("port number too high")
            {
                break;
            }
        }
        panic!(
            "{} never answered PING; its log:\n{last_log}",
            program.display()
        );
    }

    /// Kills the server and starts it again on the same port and directory (what it kept on
    /// disk, with `--appendonly yes` among its arguments, survives).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_server(&self.program, self.port, self.dir.path(), &self.extra);
        assert!(
            self.wait_ready(),
            "{} did not come back; its log:\n{}",
            self.program.display(),
            redis_server::log(self.dir.path())
        );
    }

    /// Whether the server answers, and is the child started (not a server that took the port
    /// first), within [`READY_WITHIN`].
    fn wait_ready(&mut self) -> bool {
        redis_server::wait_ready(&mut self.child, self.port, READY_WITHIN)
            == redis_server::Answer::Ours
    }

    /// Its URL, `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain driver connection, for reading raw state behind the library's back.
    pub fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("the test server's URL")
            .get_connection()
            .expect("connect to the test server")
    }

    /// The library's target for this server, with default options.
    pub fn target(&self) -> Target {
        Target::open(&self.url(), ConnectOptions::default()).expect("the test server's URL")
    }

    /// A library connection to this server.
    pub fn conn(&self) -> Conn {
        self.target().connect().expect("connect to the test server")
    }

    /// Holds the lock on `sku` the way a client that knows nothing of lockctl does (the tutorial's
    /// PHP client: a plain `SET` with a TTL): `token` for `ms` milliseconds.
    pub fn hold_lock(&self, sku: &str, token: &str, ms: u64) {
        let _: () = self
            .raw()
            .pset_ex(format!("dist_lock:{sku}"), token, ms)
            .expect("SET the lock key");
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the server process.
    pub fn signal(&self, sig: &str) {
        signal(self.child.id(), sig);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A server a failed test left stopped must still die: best effort, never a panic here.
        let _ = kill_command(self.child.id(), "CONT").output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary's own launcher (`lockctl_hammer::redis_server`), as the private server starts it: the
/// defaults first, `extra` overriding them.
fn spawn_server(program: &Path, port: u16, dir: &Path, extra: &[String]) -> Child {
    spawn_tool(&mut redis_server::command(
        program.as_os_str(),
        port,
        dir,
        extra,
    ))
}

/// A port nobody listens on at the moment of asking (bound, then let go).
pub fn free_port() -> u16 {
    redis_server::free_port().expect("a free port")
}
