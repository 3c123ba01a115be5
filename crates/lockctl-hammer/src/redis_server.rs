//! Starting a `redis-server` of one's own: the one launcher behind the private server of a
//! hammer run (`--redis auto`) and the servers lockctl's tests start, so both start it the same
//! way and prove the same way that what answers is the child they started.
//!
//! The defaults are a server no one else will use: loopback only, no persistence, its files in
//! the given directory; arguments given after them override them (`--appendonly yes` for a test
//! that restarts it). Ready means it answers PING (or NOAUTH, for a server started with a
//! password) and, when it says its `process_id`, that it is the child's pid while the child
//! still runs: a server that took the port first is told apart before anything is written.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The command that starts `program` on `port` of 127.0.0.1 with its files in `dir`, then
/// `extra` (which override the defaults). Output goes to `dir/redis.log`.
pub fn command(program: &OsStr, port: u16, dir: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Who answered on a started server's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The child: it answers, and its `process_id` (when it gives one) is the child's pid.
    Ours,
    /// Nobody within the limit, or the child exited (the port was taken, say).
    Nobody,
    /// Another server, with the `process_id` it gave (if it gave one).
    Someone(Option<u32>),
}

/// Waits up to `within` for the server `child` started on `port` to answer, then asks who
/// answered. Reads only: nothing is written to a server before it is known to be the child.
pub fn wait_ready(child: &mut Child, port: u16, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return Answer::Nobody;
    };
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return Answer::Nobody;
        }
        if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            match redis::cmd("PING").query::<String>(&mut c) {
                Ok(_) => return whose(child, &mut c),
                // Started with a password: up, and (unasked) taken as the child's.
                Err(e) if e.code() == Some("NOAUTH") => return Answer::Ours,
                Err(_) => {}
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    Answer::Nobody
}

/// Whether the server on `c` is `child`: its `process_id`, asked after it answered (a child
/// that had exited could not have given the answer).
fn whose(child: &mut Child, c: &mut redis::Connection) -> Answer {
    let info: Option<redis::InfoDict> = redis::cmd("INFO").arg("server").query(c).ok();
    let pid = info.and_then(|i| i.get::<u32>("process_id"));
    let running = matches!(child.try_wait(), Ok(None));
    match pid == Some(child.id()) && running {
        true => Answer::Ours,
        false => Answer::Someone(pid),
    }
}

/// A port nobody listens on at the moment of asking (bound, then let go).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// What the server wrote to `dir/redis.log`, for a message when it never answered.
pub fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
}
