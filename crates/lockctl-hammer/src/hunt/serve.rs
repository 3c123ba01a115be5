//! The system under test, started by the hunt (`--serve 'CMD'`): a shell command in a process
//! group of its own, waited for until its address answers, signalled only inside its own tree,
//! and stopped with everything it started.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
}

impl Served {
    /// Starts `command` with `sh -c` and waits until `addr` accepts a connection. An exit before
    /// that, or no answer within 15 s, is an error with the tail of its output.
    pub fn start(command: &str, addr: SocketAddr) -> Result<Served, String> {
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
        let mut served = Served {
            command: command.to_string(),
            addr,
            child,
            log,
            _dir: dir,
        };
        served.wait_ready()?;
        Ok(served)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "--serve '{}' exited ({status}) before {} answered; its output ends:\n{}",
                    self.command,
                    self.addr,
                    self.tail()
                ));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tail = self.tail();
                self.stop();
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
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The process group id (the shell's pid).
    fn group(&self) -> Option<Pid> {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Every live process of the system's tree (its group and their descendants), the shell
    /// first. Zombies are left out: they hold nothing.
    pub fn processes(&self) -> Vec<i32> {
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
        let again = Served::start(&self.command, self.addr)?;
        let old = std::mem::replace(self, again);
        drop(old);
        Ok(())
    }

    /// Stops the system: continued (a stopped process ignores SIGTERM), asked to end, then
    /// killed with its whole group after two seconds.
    pub fn stop(&mut self) {
        let tree = self.processes();
        self.continue_all();
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            thread::sleep(Duration::from_millis(20));
        }
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::KILL);
        }
        // Descendants that left the group (a daemonising server) are still of its tree.
        for pid in tree {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            self.stop();
        }
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
