//! A private `redis-server` for one hammer run (`--redis auto`, or no `--redis` when nothing
//! answers at the default address): a free port, no persistence, its log and files in a fresh
//! temporary directory, stopped and removed when the run ends, on an error, on a signal, and
//! (through the parent-death signal) when lockctl itself is killed.
//!
//! Only the hammer may use one: it seeds, buys and verifies within the run. A command whose
//! effect must outlive it (`seed`, `buy`, ...) would write into a server that is about to
//! vanish, so it never gets one.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

/// How long the server may take to answer its first PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Servers started and not yet stopped: (pid, directory), for [`stop_all`].
static LIVE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// A running private server; dropping it stops it and removes its directory.
pub struct PrivateRedis {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl PrivateRedis {
    /// Starts one, or says why it cannot (not installed: how to install it). `why` says why one
    /// is wanted, for that message.
    pub fn start(why: &str) -> anyhow::Result<PrivateRedis> {
        let binary =
            std::env::var_os("LOCKCTL_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        sweep_stale();
        let mut last = String::new();
        // A free port can be taken between finding it and binding it: try a few.
        for _ in 0..5 {
            let dir = fresh_dir()?;
            let port = free_port()?;
            let spawned = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .die_with_parent()
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _ = std::fs::remove_dir_all(&dir);
                    bail!(
                        "{why}, and redis-server is not installed to start a private one: install it (apt-get install -y redis-server) or point --redis at a server"
                    );
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(anyhow!(e)).context("could not start redis-server");
                }
            };
            live().push((child.id(), dir.clone()));
            let mut server = PrivateRedis { child, dir, port };
            if server.wait_ready() {
                return Ok(server);
            }
            last = server.log();
        }
        bail!(
            "the private redis-server never answered; its log:\n{}",
            last.trim()
        )
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + READY_WITHIN;
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200))
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.join("redis.log")) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        let pid = self.child.id();
        live().retain(|(p, _)| *p != pid);
    }
}

/// Stops every private server still running and removes its directory: for a process about to
/// exit without unwinding (quitting on a second signal).
pub fn stop_all() {
    for (pid, dir) in live().drain(..) {
        // SAFETY: kill(2) on a pid this process started and has not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn live() -> std::sync::MutexGuard<'static, Vec<(u32, PathBuf)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("could not find a free port")?;
    Ok(l.local_addr()?.port())
}

/// Removes the directories of private servers whose lockctl died without cleaning up (a
/// `kill -9` cannot be caught; its server died with it, by the parent-death signal): this
/// user's own `lockctl-redis-<pid>-<hex>` directories whose pid is gone. A directory whose pid
/// is alive (even reused by another program) is left alone.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    // Who we are, as the kernel tells it (no unsafe call needed).
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m))
    else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("lockctl-redis-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == me);
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn fresh_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "lockctl-redis-{}-{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 4]>())
    ));
    std::fs::create_dir(&dir).with_context(|| {
        format!(
            "could not create '{}' for the private redis-server",
            dir.display()
        )
    })?;
    Ok(dir)
}

/// Makes a child die with this process (Linux's parent-death signal), so a `kill -9` of lockctl
/// does not leave its private server running.
trait DieWithParent {
    fn die_with_parent(&mut self) -> &mut Self;
}

impl DieWithParent for Command {
    fn die_with_parent(&mut self) -> &mut Self {
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            self.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            })
        }
    }
}
