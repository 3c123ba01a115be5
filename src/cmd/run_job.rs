//! The job of `lockctl run`: the child, leader of its own process group, and the guard process
//! beside it. The rules that keep the job from outliving its lease:
//!
//! - The guard starts first, armed with the lease's deadline, and the child tells it its
//!   process group itself, before the job's own code runs: there is no moment in which lockctl
//!   could be paused with the job running and the guard not armed.
//! - The group's leader is reaped only after the guard is dismissed: until then its zombie
//!   keeps the group id, so neither the guard nor lockctl can ever signal a reused id.
//! - A job stopped from the terminal (Ctrl-Z) stops lockctl with it, as a shell job; while
//!   lockctl is stopped the guard ends the job when the lease runs out.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{self, Pid, Signal, WaitId, WaitIdOptions};

use lockctl_core::lock::{Guard, Lock};

use super::run_guard::{self, mono_ms};

/// How often the job and its lease are looked at.
const POLL: Duration = Duration::from_millis(10);

/// Slack between the group's death and the earliest end of the lease: the poll, a SIGKILL's
/// delivery, and scheduling.
pub const SAFETY: Duration = Duration::from_millis(40);

/// How often the guard process is told the lease's deadlines.
const HEARTBEAT: Duration = Duration::from_millis(50);

/// How the job ended.
pub struct Ended {
    pub status: Option<ExitStatus>,
    pub lease_lost: bool,
}

pub struct Job {
    child: Child,
    pub pgid: i32,
    guard: Option<(Child, ChildStdin, ChildStdout)>,
    told: Instant,
    /// Whether the job was given the terminal's foreground (lockctl had it).
    foreground: bool,
}

impl Job {
    pub fn start(
        command: &[OsString],
        lock: &Lock,
        lease: &Guard,
        grace: Duration,
    ) -> anyhow::Result<Job> {
        let deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            + lease.remaining_validity();
        let guard = spawn_guard(deadlines(lease, grace));
        let announce_to = guard.as_ref().map(|(_, stdin, _)| stdin.as_raw_fd());
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .env("LOCKCTL_LOCK_KEY", &lock.keys().lock)
            .env("LOCKCTL_TOKEN", lease.token())
            .env("LOCKCTL_FENCE", lease.fence().to_string())
            .env(
                "LOCKCTL_LEASE_DEADLINE_MS",
                deadline.as_millis().to_string(),
            )
            .process_group(0);
        let foreground = terminal::in_foreground();
        // SAFETY: pre_exec runs between fork and exec, so the closure may only make
        // async-signal-safe calls: it makes system calls (rustix's are direct ones) and
        // signal(2), on the child being started, already the leader of its own group (std
        // sets it first), and writes from a stack buffer.
        unsafe {
            cmd.pre_exec(move || {
                process::set_parent_process_death_signal(Some(Signal::KILL))?;
                if let Some(fd) = announce_to {
                    // The guard learns the group from the child itself, before the job runs;
                    // the pipe closes on exec (close-on-exec), so the job never holds it.
                    let mut line = [0u8; 32];
                    let n =
                        run_guard::pgid_line(process::getpid().as_raw_nonzero().get(), &mut line);
                    let _ = rustix::io::write(BorrowedFd::borrow_raw(fd), &line[..n]);
                }
                if foreground {
                    // The job's group takes the terminal, as a shell gives it to a foreground
                    // job: it may read the terminal, and Ctrl-C and Ctrl-Z reach it directly.
                    terminal::with_sigttou_ignored(|| {
                        let _ = rustix::termios::tcsetpgrp(std::io::stdin(), process::getpid());
                    });
                }
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some((mut g, _, _)) = guard {
                    let _ = g.kill();
                    let _ = g.wait();
                }
                return Err(cannot_start(&command[0].to_string_lossy(), e));
            }
        };
        let pgid = child.id() as i32;
        Ok(Job {
            child,
            pgid,
            guard,
            told: Instant::now(),
            foreground,
        })
    }

    /// Tells the guard the deadlines of the lease as it stands (see [`deadlines`]).
    fn tell_guard(&mut self, lease: &Guard, grace: Duration) {
        self.told = Instant::now();
        let (term, kill) = deadlines(lease, grace);
        if let Some((_, stdin, _)) = &mut self.guard {
            let _ = writeln!(stdin, "{term} {kill}");
        }
    }

    /// Waits for the child, stopping the group if the lease is lost (or about to be). After
    /// the child exits, what is left of its group (background processes) is stopped too,
    /// before the lock is released: nothing of the job may outlive its lock.
    pub fn watch(&mut self, lease: &Guard, grace: Duration) -> Ended {
        loop {
            let low = lease.lease_lost() || lease.remaining_validity() < grace + SAFETY;
            if self.leader_exited() || low {
                self.stop_group(grace);
                // Stopped by the guard while lockctl was paused, or ended as the lease did:
                // it may have been cut short, and the lease is gone either way.
                let lost = low
                    || lease.lease_lost()
                    || lease.remaining_validity() < grace + SAFETY
                    || self.guard_fired();
                // Dismissed while the leader's zombie still holds the group id; then reaped.
                self.dismiss_guard();
                return Ended {
                    status: self.child.wait().ok(),
                    lease_lost: lost,
                };
            }
            if self.foreground && self.stopped_from_terminal() {
                self.stop_with_the_job();
            }
            if self.told.elapsed() >= HEARTBEAT {
                self.tell_guard(lease, grace);
            }
            thread::sleep(POLL);
        }
    }

    /// Whether the group's leader has exited, without reaping it.
    fn leader_exited(&self) -> bool {
        self.wait_id(WaitIdOptions::EXITED | WaitIdOptions::NOWAIT)
            .is_some_and(|s| s.exited() || s.killed() || s.dumped())
    }

    /// Whether the leader was stopped by the terminal (Ctrl-Z) since last asked.
    fn stopped_from_terminal(&self) -> bool {
        self.wait_id(WaitIdOptions::STOPPED)
            .is_some_and(|s| s.stopped())
    }

    /// `waitid` on the leader with `WNOHANG` and `flags`: what it reports, if anything.
    fn wait_id(&self, flags: WaitIdOptions) -> Option<process::WaitIdStatus> {
        let leader = Pid::from_raw(self.pgid)?;
        process::waitid(WaitId::Pid(leader), WaitIdOptions::NOHANG | flags)
            .ok()
            .flatten()
    }

    /// Ctrl-Z stopped the job: lockctl stops too, so that the shell sees its job stopped and
    /// takes the terminal back; on `fg` (SIGCONT) the job gets the terminal again and is
    /// continued. While lockctl is stopped nothing renews the lease, and the guard ends the
    /// job when it runs out.
    fn stop_with_the_job(&self) {
        terminal::take_back();
        let _ = process::kill_process(process::getpid(), Signal::STOP);
        terminal::give_to(self.pgid);
        self.signal_group(Signal::CONT);
    }

    /// Whether the guard process stopped the job (it says `fired` on its stdout, which is
    /// non-blocking: nothing said is nothing read).
    fn guard_fired(&mut self) -> bool {
        use std::io::Read as _;
        let Some((_, _, out)) = &mut self.guard else {
            return false;
        };
        let mut buf = [0u8; 16];
        matches!(out.read(&mut buf), Ok(n) if n > 0)
    }

    /// SIGTERM to the group, then SIGKILL after `grace` if anyone is left. The leader is not
    /// reaped here.
    fn stop_group(&mut self, grace: Duration) {
        if !self.group_alive() {
            return;
        }
        self.signal_group(Signal::TERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.group_alive() {
            thread::sleep(Duration::from_millis(2));
        }
        if self.group_alive() {
            self.signal_group(Signal::KILL);
            while self.group_alive() {
                thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Signals the job's own process group, whose id its unreaped leader holds.
    fn signal_group(&self, sig: Signal) {
        if let Some(group) = Pid::from_raw(self.pgid) {
            let _ = process::kill_process_group(group, sig);
        }
    }

    /// Whether any process of the group still runs: the leader, or anyone else in the group
    /// (its zombie aside).
    fn group_alive(&self) -> bool {
        !self.leader_exited() || others_in_group(self.pgid, self.pgid as u32)
    }

    /// The job is over: the guard goes (before the leader is reaped).
    pub fn dismiss_guard(&mut self) {
        if let Some((mut g, mut stdin, _)) = self.guard.take() {
            let _ = writeln!(stdin, "done");
            let _ = g.kill();
            let _ = g.wait();
        }
    }

    /// Whether the job has the terminal's foreground (lockctl takes it back at the end).
    pub fn foreground(&self) -> bool {
        self.foreground
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.dismiss_guard();
    }
}

/// SIGTERM when the validity left falls to the grace period plus half the margin, SIGKILL at
/// half the margin: absolute times on the monotonic clock (ms), which the guard shares.
fn deadlines(lease: &Guard, grace: Duration) -> (u64, u64) {
    let kill = lease.remaining_validity().saturating_sub(SAFETY / 2);
    let term = kill.saturating_sub(grace);
    let now = mono_ms();
    (now + term.as_millis() as u64, now + kill.as_millis() as u64)
}

/// Whether a process other than `leader` (and not a zombie) is in process group `pgid`.
fn others_in_group(pgid: i32, leader: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        if pid == leader {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // After the command name: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let group = f.nth(1).and_then(|g| g.parse::<i32>().ok());
        group == Some(pgid) && state != Some("Z")
    })
}

/// The guard: `lockctl __run-guard TERM_AT KILL_AT`, in a process group of its own (a SIGSTOP
/// or a terminal's Ctrl-Z of lockctl does not stop it), armed from its start. It kills the
/// job's group when its stdin closes, which happens when lockctl dies however it dies (the
/// parent-death signal reaches only the child, not what the child started), and when the
/// deadlines lockctl keeps sending pass unrenewed. Without it (it could not be started) the
/// job still dies with lockctl, and lockctl says so.
fn spawn_guard((term, kill): (u64, u64)) -> Option<(Child, ChildStdin, ChildStdout)> {
    let spawned = Command::new("/proc/self/exe")
        .args([run_guard::ARG, &term.to_string(), &kill.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    match spawned {
        Ok(mut child) => {
            let stdin = child.stdin.take()?;
            let stdout = child.stdout.take()?;
            // Non-blocking, so that looking for the guard's word never waits.
            if let Ok(flags) = rustix::fs::fcntl_getfl(&stdout) {
                let _ = rustix::fs::fcntl_setfl(&stdout, flags | rustix::fs::OFlags::NONBLOCK);
            }
            Some((child, stdin, stdout))
        }
        Err(e) => {
            eprintln!(
                "lockctl: could not start the guard of the job's process group ({e}): if lockctl is paused or killed, what the job started could outlive the lock"
            );
            None
        }
    }
}

/// The terminal's foreground: a job started from an interactive shell gets it, as the shell
/// would give it, and lockctl takes it back when the job is over.
pub mod terminal {
    use rustix::process::{self, Pid};
    use rustix::termios;

    /// Whether stdin is a terminal whose foreground is lockctl's own process group.
    pub fn in_foreground() -> bool {
        let stdin = std::io::stdin();
        termios::isatty(&stdin) && termios::tcgetpgrp(&stdin).ok() == Some(process::getpgrp())
    }

    /// Makes lockctl's group the foreground again, after a job it gave the foreground to.
    pub fn take_back() {
        give_to(process::getpgrp().as_raw_nonzero().get());
    }

    /// Makes `pgid` the terminal's foreground (a background group may do this only with
    /// SIGTTOU ignored).
    pub fn give_to(pgid: i32) {
        let stdin = std::io::stdin();
        let Some(pgid) = Pid::from_raw(pgid) else {
            return;
        };
        if !termios::isatty(&stdin) || termios::tcgetpgrp(&stdin).ok() == Some(pgid) {
            return;
        }
        with_sigttou_ignored(|| {
            let _ = termios::tcsetpgrp(&stdin, pgid);
        });
    }

    /// Runs `f` with SIGTTOU ignored, then puts its disposition back: a process group not in
    /// the terminal's foreground may take the foreground only so. Async-signal-safe (it runs
    /// between fork and exec too). libc's signal(2), as no safe wrapper sets a disposition to
    /// "ignore" (rustix leaves signal handling out; nix's `signal` is unsafe as well).
    pub fn with_sigttou_ignored(f: impl FnOnce()) {
        // SAFETY: SIG_IGN installs no handler, so no code can run in a signal context; the
        // previous disposition is restored before returning.
        let old = unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        f();
        // SAFETY: as above; `old` is what signal(2) returned for this very signal.
        unsafe {
            libc::signal(libc::SIGTTOU, old);
        }
    }
}

/// The job's command could not be started, said as a shell would: 127 when there is no such
/// command, 126 when it cannot be executed; anything else is lockctl's error (exit 1).
fn cannot_start(program: &str, e: std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => crate::usage::Missing::new(
            format!(
                "cannot run '{program}': no such command (check its name and PATH, or give its path)"
            ),
            127,
        )
        .into(),
        ErrorKind::PermissionDenied => crate::usage::Missing::new(
            format!("cannot run '{program}': it is not executable (chmod +x it, or run it through its interpreter)"),
            126,
        )
        .into(),
        _ => anyhow::Error::new(e).context(format!("cannot run '{program}'")),
    }
}
