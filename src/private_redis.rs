//! A private `redis-server` for one hammer run (`--redis auto`, or no `--redis` when nothing
//! answers at the default address): a free port, no persistence, its log and files in a fresh
//! temporary directory, stopped and removed when the run ends, on an error, on a signal, and
//! (through the parent-death signal) when lockctl itself is killed.
//!
//! Only the hammer may use one: it seeds, buys and verifies within the run. A command whose
//! effect must outlive it (`seed`, `buy`, ...) would write into a server that is about to
//! vanish, so it never gets one.
//!
//! The port is free when it is chosen, not when the child binds it: another server can take it
//! in between, and its PONG looks like the child's. So a server is taken as ready only when
//! `INFO server` says its `process_id` is the child's pid and the child is still running. A
//! child not yet reaped keeps its pid (even as a zombie), so no other process can have it:
//! that answer proves the child is the one listening. Until then nothing is written; another
//! server on the port costs that port, and the next one is tried.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use lockctl_hammer::redis_server::{self, Answer};

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
    ///
    /// `LOCKCTL_REDIS_SERVER` names another binary to start (a wrapper must `exec` the server,
    /// so that the server's pid is the child's).
    pub fn start(why: &str) -> anyhow::Result<PrivateRedis> {
        let binary =
            std::env::var_os("LOCKCTL_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        sweep_stale();
        let (mut last, mut squatted) = (String::new(), 0);
        // A free port can be taken between finding it and binding it: try a few.
        for _ in 0..TRIES {
            let dir = fresh_dir()?;
            let port = free_port()?;
            let spawned = redis_server::command(&binary, port, &dir, &[])
                .process_group(0)
                .die_with_parent()
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(crate::usage::Missing::new(
                        format!(
                            "{why}, and redis-server is not installed to start a private one: install it (apt-get install -y redis-server) or point --redis at a server"
                        ),
                        1,
                    )
                    .into());
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(anyhow!(e)).context("could not start redis-server");
                }
            };
            live().push((child.id(), dir.clone()));
            let mut server = PrivateRedis { child, dir, port };
            last = match server.wait_ready() {
                Answer::Ours => return Ok(server),
                Answer::Nobody => format!(
                    "the private redis-server never answered; its log:\n{}",
                    server.log().trim()
                ),
                Answer::Someone(pid) => {
                    squatted += 1;
                    format!(
                        "could not start a private redis-server: another server answered on port {port} ({}), not the redis-server lockctl started (process {}), and nothing was written to it; {squatted} of {TRIES} tries met a server that was not lockctl's (point --redis at a server you run)",
                        pid.map_or("it did not say its process id".into(), |p| format!(
                            "process {p}"
                        )),
                        server.child.id()
                    )
                }
            };
            // Dropped here: the child is stopped and its directory removed.
        }
        bail!("{last}")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn wait_ready(&mut self) -> Answer {
        redis_server::wait_ready(&mut self.child, self.port, READY_WITHIN)
    }

    fn log(&self) -> String {
        redis_server::log(&self.dir)
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
        // A pid this process started and has not reaped.
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn live() -> std::sync::MutexGuard<'static, Vec<(u32, PathBuf)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many ports are tried before giving up.
const TRIES: usize = 5;

/// A port nobody listens on at the moment of asking.
fn free_port() -> anyhow::Result<u16> {
    redis_server::free_port().context("could not find a free port")
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
        // SAFETY: pre_exec runs between fork and exec: the closure makes one system call
        // (prctl, directly: async-signal-safe), on the child being started.
        unsafe {
            self.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))?;
                Ok(())
            })
        }
    }
}
