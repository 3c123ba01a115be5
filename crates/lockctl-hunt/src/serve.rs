//! The system under test, started by the hunt (`--serve 'CMD'`): a shell command in a process
//! group of its own, waited for until its address answers, signalled only inside its own tree,
//! and stopped with everything it started.
//!
//! A daemon leaves both the tree and the group (`redis-server --daemonize yes`, `setsid -f`).
//! Two things keep it in reach: every process the command starts inherits a tag of this system
//! in its environment ([`TAG_VAR`]), and when this process is a child subreaper (which the
//! program sets, not this module: it is process-wide) an orphan comes back to it as a child
//! that was not there before the system started. Both count as the system's ("strays"): they
//! are paused, killed and stopped with it, and reaped.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::ServeError;
use lockctl_hammer::http::{Got, Probe};
use rustix::process::{Pid, Signal, WaitOptions, kill_process, kill_process_group, waitpid};

/// How long a started system may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// How long a `--ready` URL's certificate must be refused on end before the hunt says so and
/// stops (a server still starting may show another certificate for a moment).
const REFUSED_FOR: Duration = Duration::from_secs(3);

/// The environment variable that tags every process a system started: its value is the
/// system's [`Reach`] tag.
pub const TAG_VAR: &str = "LOCKCTL_SERVE_TAG";

/// What it takes to find and kill a system's processes without the [`Served`] itself (a quit
/// handler that cannot wait for its lock): its process group, its tag, and this process's
/// children from before it started.
pub struct Reach {
    /// The running system's process group; 0 once it is stopped.
    group: AtomicI32,
    /// The tag its processes carry in their environment.
    tag: String,
    /// This process's children when the system was started: not the system's.
    before: Mutex<Vec<i32>>,
}

impl Reach {
    /// A new, unique tag, and nothing running yet.
    pub fn new() -> Reach {
        Reach {
            group: AtomicI32::new(0),
            tag: format!("{:032x}", rand::random::<u128>()),
            before: Mutex::new(Vec::new()),
        }
    }

    /// Kills the system at once (continued first, so that nothing stays stopped): its process
    /// group and every stray, for a process that is quitting now and cannot wait for the
    /// system's lock.
    pub fn kill_now(&self) {
        if let Some(g) = Pid::from_raw(self.group.load(Ordering::SeqCst)) {
            let _ = kill_process_group(g, Signal::CONT);
            let _ = kill_process_group(g, Signal::KILL);
        }
        let before = self
            .before
            .try_lock()
            .map(|b| b.clone())
            .unwrap_or_default();
        for pid in strays(&self.tag, &before, None) {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::CONT);
                let _ = kill_process(p, Signal::KILL);
            }
        }
    }
}

impl Default for Reach {
    fn default() -> Reach {
        Reach::new()
    }
}

/// A running system under test.
pub struct Served {
    command: String,
    addr: SocketAddr,
    /// Ready when this GET is answered 2xx; `None`: when `addr` accepts a connection.
    ready: Option<Probe>,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// Its process group, tag and this process's other children, shared with whoever must
    /// kill it without waiting for this value (a quit handler).
    reach: Arc<Reach>,
    /// Stopped already: nothing of it is signalled again (its pids may be someone else's).
    stopped: bool,
}

impl Served {
    /// Starts `command` with `sh -c` and waits until it is ready: `ready` answered 2xx when
    /// given, else `addr` accepting a connection. An exit before that, or no readiness within
    /// 15 s, is an error with the tail of its output (and the last answer to `ready`).
    pub fn start(
        command: &str,
        addr: SocketAddr,
        ready: Option<Probe>,
        reach: Arc<Reach>,
        stop: Option<&AtomicBool>,
    ) -> Result<Served, ServeError> {
        let dir = tempfile::tempdir().map_err(ServeError::TempDir)?;
        let log = dir.path().join("serve.log");
        let out = std::fs::File::create(&log).map_err(ServeError::Log)?;
        let err = out.try_clone().map_err(ServeError::Log)?;
        if let Ok(mut before) = reach.before.lock() {
            *before = children_of(me());
        }
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .arg("-c")
                .arg(command)
                .env(TAG_VAR, &reach.tag)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|source| ServeError::Spawn {
                    command: command.to_string(),
                    source,
                })?
        };
        reach.group.store(child.id() as i32, Ordering::SeqCst);
        let mut served = Served {
            command: command.to_string(),
            addr,
            ready,
            child,
            log,
            _dir: dir,
            reach,
            stopped: false,
        };
        if let Err(e) = served.wait_ready(stop) {
            // Whatever it started before it failed goes with it.
            served.stop();
            return Err(e);
        }
        Ok(served)
    }

    fn wait_ready(&mut self, stop: Option<&AtomicBool>) -> Result<(), ServeError> {
        let deadline = Instant::now() + READY_WITHIN;
        let mut last = String::from("no answer");
        // Since when every answer to `ready` has been a refused certificate.
        let mut refused_since: Option<Instant> = None;
        loop {
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                return Err(ServeError::Interrupted {
                    command: self.command.clone(),
                });
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ServeError::Exited {
                    command: self.command.clone(),
                    status,
                    addr: self.addr,
                    tail: self.tail(),
                });
            }
            // Ready when it says so (or its address answers) and it is still running (not a
            // server of before that has not finished dying, answering for a command that
            // exits).
            let answered = self.answers(&mut refused_since, &mut last)?;
            if answered && matches!(self.child.try_wait(), Ok(None)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tail = self.tail();
                let (command, within_s) = (self.command.clone(), READY_WITHIN.as_secs());
                return Err(match &self.ready {
                    None => ServeError::NeverAnswered {
                        command,
                        addr: self.addr,
                        within_s,
                        tail,
                    },
                    Some(probe) => ServeError::NotReady {
                        command,
                        within_s,
                        ready: probe.shown_url().to_string(),
                        last,
                        tail,
                    },
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the system answers now: `ready` answered 2xx, or without it its address
    /// accepting a connection. `last` keeps what the last look found, `refused_since` since
    /// when `ready`'s certificate has been refused on end; refused for [`REFUSED_FOR`], it is
    /// the error.
    fn answers(
        &self,
        refused_since: &mut Option<Instant>,
        last: &mut String,
    ) -> Result<bool, ServeError> {
        Ok(match &self.ready {
            None => TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok(),
            Some(probe) => {
                let got = probe.get(Duration::from_secs(2));
                if !matches!(got, Got::Refused { .. }) {
                    *refused_since = None;
                }
                match got {
                    Got::Answer { status, .. } if (200..300).contains(&status) => true,
                    Got::Answer { status, body } => {
                        *last = format!("HTTP {status}: '{}'", body.escape_debug());
                        false
                    }
                    Got::Nothing(why) => {
                        *last = why;
                        false
                    }
                    // A certificate refused for a few seconds on end is the facts' (the CA
                    // not named, another name), not a server still starting (a proxy may show
                    // a default certificate while it warms up): said then, not in 15 s.
                    Got::Refused { message, hint } => {
                        let since = *refused_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= REFUSED_FOR {
                            return Err(ServeError::ReadyRefused {
                                ready: probe.shown_url().to_string(),
                                message,
                                hint,
                            });
                        }
                        *last = message;
                        false
                    }
                }
            }
        })
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

    /// Whether the process `--serve` started (the shell, or what it `exec`ed) has exited by
    /// itself, looked at for up to `within`: its pid, command and how it ended. `None` while
    /// it runs, and once it is stopped (its end is then the hunt's doing). A forking server's
    /// children come and go with their requests, so only this first process says the system
    /// is gone: it must run as long as the system serves (one that ends before it is ready is
    /// refused at the start).
    pub fn exited(&mut self, within: Duration) -> Option<SystemExit> {
        if self.stopped {
            return None;
        }
        let deadline = Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return Some(SystemExit {
                        pid: self.child.id(),
                        command: self.command.clone(),
                        status,
                    });
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    /// The process group id (the shell's pid), while the system is not stopped.
    fn group(&self) -> Option<Pid> {
        if self.stopped {
            return None;
        }
        Pid::from_raw(self.child.id() as i32)
    }

    /// Every live process of the system: its shell's tree, the shell first, then the strays
    /// (see the module's note) and their descendants. Zombies are left out: they hold nothing.
    /// Nothing once it is stopped.
    pub fn processes(&self) -> Vec<i32> {
        if self.stopped {
            return Vec::new();
        }
        self.tree_in(&process_table())
    }

    /// [`Self::processes`], from `table`.
    fn tree_in(&self, table: &[Proc]) -> Vec<i32> {
        let root = self.child.id() as i32;
        let mut roots = vec![root];
        for pid in strays_in(table, &self.reach.tag, &self.before(), Some(root)) {
            if !roots.contains(&pid) {
                roots.push(pid);
            }
        }
        live(table, descendants(table, roots))
    }

    /// Stops the system's process group at once (one signal), has `choose` pick from its
    /// processes as they stand still, sends `signal` to the picked ones still of its tree, and
    /// continues the rest of the group; says which it reached. A forking server's request
    /// handlers live for one request: looked at first and signalled after, on a loaded machine
    /// (a look at `/proc` takes tens of milliseconds there), the handler that held the lock had
    /// often answered and exited, and the fault stopped nothing (a clean-clone CI run: 43 of 81
    /// pauses). Frozen first, the holder of the moment is among the processes chosen from.
    /// A stray outside the group is not frozen, and is signalled as before.
    pub fn freeze_and_signal(
        &self,
        signal: Signal,
        choose: impl FnOnce(&[i32]) -> Vec<i32>,
    ) -> Vec<i32> {
        let Some(group) = self.group() else {
            return Vec::new();
        };
        let froze = kill_process_group(group, Signal::STOP).is_ok();
        let table = process_table();
        let tree = self.tree_in(&table);
        let picked = choose(&tree);
        let reached: Vec<i32> = picked
            .iter()
            .copied()
            .filter(|pid| tree.contains(pid))
            .filter(|pid| Pid::from_raw(*pid).is_some_and(|p| kill_process(p, signal).is_ok()))
            .collect();
        if froze {
            for p in table.iter().filter(|p| p.group == group.as_raw_pid()) {
                if !reached.contains(&p.pid)
                    && let Some(pid) = Pid::from_raw(p.pid)
                {
                    let _ = kill_process(pid, Signal::CONT);
                }
            }
        }
        reached
    }

    fn before(&self) -> Vec<i32> {
        self.reach
            .before
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default()
    }

    /// Continues every stopped process of the tree: one look at the tree, each of its
    /// processes signalled (not a look per process, which a system of a few hundred processes
    /// made last minutes).
    pub fn continue_all(&self) {
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::CONT);
        }
        for pid in self.processes() {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::CONT);
            }
        }
    }

    /// Stops the system and everything it started, and starts it again.
    pub fn restart(&mut self) -> Result<(), ServeError> {
        self.stop();
        // The old server's address must be free first: a process of its group still dying
        // would answer for the new one.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok()
        {
            thread::sleep(Duration::from_millis(20));
        }
        let again = Served::start(
            &self.command,
            self.addr,
            self.ready.clone(),
            self.reach.clone(),
            None,
        )?;
        let old = std::mem::replace(self, again);
        drop(old);
        Ok(())
    }

    /// Stops the system: continued (a stopped process ignores SIGTERM), asked to end, then
    /// killed after two seconds with its whole group, whether or not its shell is still there
    /// (a shell that backgrounded the server has exited, its group has not), and with every
    /// stray (a daemon that left the group); the strays that came back to this process are
    /// reaped. Once.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.continue_all();
        if let Some(g) = self.group() {
            let _ = kill_process_group(g, Signal::TERM);
        }
        for pid in self.processes() {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !self.processes().is_empty() {
            self.reap_strays();
            thread::sleep(Duration::from_millis(20));
        }
        // Taken just before the kill, so that no pid of a process gone meanwhile is signalled.
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
        // The shell gone, its children that were left came back to this process (a
        // subreaper) or to init: strays either way, found by their tag or as new children.
        let tag = self.reach.tag.clone();
        let before = self.before();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let left = strays(&tag, &before, None);
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            for pid in left {
                if let Some(p) = Pid::from_raw(pid) {
                    let _ = kill_process(p, Signal::CONT);
                    let _ = kill_process(p, Signal::KILL);
                }
            }
            self.reap_strays();
            thread::sleep(Duration::from_millis(20));
        }
        self.reap_strays();
        self.stopped = true;
        let _ = self.reach.group.compare_exchange(
            self.child.id() as i32,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Reaps every child of this process that ended and is the system's (not the shell, which
    /// [`Child`] waits for, nor a child from before it started).
    fn reap_strays(&self) {
        let (shell, before) = (self.child.id() as i32, self.before());
        for p in process_table() {
            if p.ppid == me() && p.zombie && p.pid != shell && !before.contains(&p.pid) {
                let _ = waitpid(Pid::from_raw(p.pid), WaitOptions::NOHANG);
            }
        }
    }
}

/// The system's first process, ended by itself ([`Served::exited`]).
#[derive(Clone, Debug)]
pub struct SystemExit {
    /// Its pid.
    pub pid: u32,
    /// The command it was started with (as given: the caller hides its secrets).
    pub command: String,
    /// How it ended: its exit code, or the signal that ended it.
    pub status: std::process::ExitStatus,
}

impl SystemExit {
    /// How it ended, in words: `exited with code 1`, `was ended by signal 9 (SIGKILL)`.
    pub fn how(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(n)) => {
                let name = match n {
                    1 => " (SIGHUP)",
                    2 => " (SIGINT)",
                    3 => " (SIGQUIT)",
                    6 => " (SIGABRT)",
                    9 => " (SIGKILL)",
                    11 => " (SIGSEGV)",
                    13 => " (SIGPIPE)",
                    15 => " (SIGTERM)",
                    _ => "",
                };
                format!("was ended by signal {n}{name}")
            }
            (None, None) => format!("ended ({})", self.status),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
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

/// This process's id.
fn me() -> i32 {
    std::process::id() as i32
}

/// The live strays of the system tagged `tag` (see the module's note), with their
/// descendants; `shell` (the system's own shell) is not one.
fn strays(tag: &str, before: &[i32], shell: Option<i32>) -> Vec<i32> {
    let table = process_table();
    let roots = strays_in(&table, tag, before, shell);
    live(&table, descendants(&table, roots))
}

/// `pids` without the ones that are not live processes of `table` (gone, or zombies).
fn live(table: &[Proc], mut pids: Vec<i32>) -> Vec<i32> {
    let alive: HashSet<i32> = table.iter().filter(|p| !p.zombie).map(|p| p.pid).collect();
    pids.retain(|pid| alive.contains(pid));
    pids
}

/// The processes of `table` that carry `tag` in their environment, and (when this process is
/// a child subreaper) its children that were not `before` the system started; never this
/// process, nor `shell`.
fn strays_in(table: &[Proc], tag: &str, before: &[i32], shell: Option<i32>) -> Vec<i32> {
    let me = me();
    let subreaper = rustix::process::child_subreaper().is_ok_and(|p| p.is_some());
    let needle = format!("{TAG_VAR}={tag}");
    table
        .iter()
        .filter(|p| !p.zombie && p.pid != me && Some(p.pid) != shell)
        .filter(|p| {
            (subreaper && p.ppid == me && !before.contains(&p.pid)) || tagged(p.pid, &needle)
        })
        .map(|p| p.pid)
        .collect()
}

/// Whether `pid`'s environment holds `needle` (`NAME=value`) as one of its entries.
fn tagged(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == needle.as_bytes()))
}

/// `roots` and all their descendants in `table`, each once, roots first: in time linear in
/// the table, whatever the number of processes a system started.
fn descendants(table: &[Proc], roots: Vec<i32>) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table.iter().filter(|p| !p.zombie) {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut seen: HashSet<i32> = HashSet::new();
    let mut tree: Vec<i32> = roots.into_iter().filter(|r| seen.insert(*r)).collect();
    let mut i = 0;
    while i < tree.len() {
        for &pid in children.get(&tree[i]).map_or(&[][..], Vec::as_slice) {
            if seen.insert(pid) {
                tree.push(pid);
            }
        }
        i += 1;
    }
    tree
}

struct Proc {
    pid: i32,
    ppid: i32,
    /// Its process group.
    group: i32,
    zombie: bool,
}

/// Every process of the machine: pid, parent, group and whether it is a zombie, from `/proc`.
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
        let group = fields.next()?.parse().ok()?;
        Some(Proc {
            pid,
            ppid,
            group,
            zombie: state == "Z" || state == "X",
        })
    })
    .collect()
}
