//! The system under test, started by the hunt (`--serve 'CMD'`): a shell command in a process
//! group of its own, waited for until its address answers, signalled only inside its own tree,
//! and stopped with everything it started.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// How long a started system may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// A running system under test.
pub struct Served {
    command: String,
    addr: SocketAddr,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// The running system's process group, shared with whoever must kill it without waiting
    /// for this value (a quit handler); 0 once it is stopped.
    group: Arc<AtomicI32>,
    /// Stopped already: nothing of it is signalled again (its pids may be someone else's).
    stopped: bool,
}

impl Served {
    /// Starts `command` with `sh -c` and waits until `addr` accepts a connection. An exit before
    /// that, or no answer within 15 s, is an error with the tail of its output.
    pub fn start(
        command: &str,
        addr: SocketAddr,
        group: Arc<AtomicI32>,
        stop: Option<&AtomicBool>,
    ) -> Result<Served, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
        let log = dir.path().join("serve.log");
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .arg("-c")
                .arg(command)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("could not start --serve '{command}': {e}"))?
        };
        group.store(child.id() as i32, Ordering::SeqCst);
        let mut served = Served {
            command: command.to_string(),
            addr,
            child,
            log,
            _dir: dir,
            group,
            stopped: false,
        };
        if let Err(e) = served.wait_ready(stop) {
            // Whatever it started before it failed goes with it.
            served.stop();
            return Err(e);
        }
        Ok(served)
    }

    fn wait_ready(&mut self, stop: Option<&AtomicBool>) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                return Err(format!(
                    "interrupted while --serve '{}' was starting",
                    self.command
                ));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "--serve '{}' exited ({status}) before {} answered; its output ends:\n{}",
                    self.command,
                    self.addr,
                    self.tail()
                ));
            }
            // Ready when its address answers and it is still running (not a server of before
            // that has not finished dying, answering for a command that exits).
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok()
                && matches!(self.child.try_wait(), Ok(None))
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tail = self.tail();
                return Err(format!(
                    "--serve '{}' never answered at {} within {} s; its output ends:\n{tail}",
                    self.command,
                    self.addr,
                    READY_WITHIN.as_secs()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines the system wrote.
    pub fn tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The process group id (the shell's pid), while the system is not stopped.
    fn group(&self) -> Option<Pid> {
        if self.stopped {
            return None;
        }
        Pid::from_raw(self.child.id() as i32)
    }

    /// Every live process of the system's tree (its group and their descendants), the shell
    /// first. Zombies are left out: they hold nothing. Nothing once it is stopped.
    pub fn processes(&self) -> Vec<i32> {
        if self.stopped {
            return Vec::new();
        }
        let root = self.child.id() as i32;
        let table = process_table();
        let mut tree = vec![root];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            tree.extend(
                table
                    .iter()
                    .filter(|p| p.ppid == parent && !p.zombie)
                    .map(|p| p.pid),
            );
            i += 1;
        }
        tree.retain(|pid| table.iter().any(|p| p.pid == *pid && !p.zombie));
        tree
    }

    /// Sends `signal` to `pid`, only if it is still of this system's tree.
    pub fn signal(&self, pid: i32, signal: Signal) -> bool {
        self.processes().contains(&pid)
            && Pid::from_raw(pid).is_some_and(|p| kill_process(p, signal).is_ok())
    }

    /// Continues every stopped process of the tree.
    pub fn continue_all(&self) {
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::CONT);
        }
        for pid in self.processes() {
            self.signal(pid, Signal::CONT);
        }
    }

    /// Stops the system and everything it started, and starts it again.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        // The old server's address must be free first: a process of its group still dying
        // would answer for the new one.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok()
        {
            thread::sleep(Duration::from_millis(20));
        }
        let again = Served::start(&self.command, self.addr, self.group.clone(), None)?;
        let old = std::mem::replace(self, again);
        drop(old);
        Ok(())
    }

    /// Stops the system: continued (a stopped process ignores SIGTERM), asked to end, then
    /// killed with its whole group after two seconds, whether or not its shell is still there
    /// (a shell that backgrounded the server has exited, its group has not). Once.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.continue_all();
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !self.processes().is_empty() {
            thread::sleep(Duration::from_millis(20));
        }
        // Descendants that left the group (a daemonising server) are still of its tree: taken
        // just before the kill, so that no pid of a process gone meanwhile is signalled.
        let tree = self.processes();
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::KILL);
        }
        for pid in tree {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let _ = self.child.wait();
        self.stopped = true;
        let _ = self.group.compare_exchange(
            self.child.id() as i32,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Kills the process group in `group` at once (continued first, so that nothing stays
/// stopped), for a process that is quitting now and cannot wait for the system's lock.
pub fn kill_group_now(group: &AtomicI32) {
    if let Some(g) = Pid::from_raw(group.load(Ordering::SeqCst)) {
        let _ = kill_process_group(g, Signal::CONT);
        let _ = kill_process_group(g, Signal::KILL);
    }
}

/// The live child processes of `parent`.
pub fn children_of(parent: i32) -> Vec<i32> {
    process_table()
        .into_iter()
        .filter(|p| p.ppid == parent && !p.zombie)
        .map(|p| p.pid)
        .collect()
}

struct Proc {
    pid: i32,
    ppid: i32,
    zombie: bool,
}

/// Every process of the machine: pid, parent and whether it is a zombie, from `/proc`.
fn process_table() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let mut fields = rest.split(' ');
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some(Proc {
            pid,
            ppid,
            zombie: state == "Z" || state == "X",
        })
    })
    .collect()
}
