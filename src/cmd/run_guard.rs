//! `lockctl __run-guard PGID` (internal, outside the command line's definitions): the process `lockctl run` starts beside its job, so
//! that the job cannot outlive its lease even when lockctl itself cannot act.
//!
//! lockctl sends it, on its stdin, the lease's remaining validity as two deadlines in
//! milliseconds from now: `TERM_MS KILL_MS`. Each line moves them. If no line moves them in
//! time (lockctl paused by SIGSTOP, or stuck), the guard sends SIGTERM to the job's group at
//! the first and SIGKILL at the second, both before the lease can end on the server. If its
//! stdin closes (lockctl died however it died) it kills the group at once. `done` dismisses it.
//! When it acts, it says `fired` on stdout, for lockctl to report the lease as lost.

use std::io::BufRead;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use super::Exit;

/// The argument that makes this process the guard, first on its command line.
pub const ARG: &str = "__run-guard";

/// `Some` when this process was started as the guard (`lockctl __run-guard PGID`): its exit.
pub fn from_args() -> Option<Exit> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != ARG {
        return None;
    }
    let pgid = args.next().and_then(|a| a.to_str()?.parse::<i32>().ok());
    Some(run(pgid.unwrap_or(0)))
}

/// Watches for the deadlines lockctl sends; kills the group when they pass or lockctl goes.
pub fn run(pgid: i32) -> Exit {
    // A group id of 0 or 1 would be this process's own group, or init's.
    if pgid <= 1 {
        eprintln!("lockctl: {ARG} needs the job's process group id (above 1)");
        return Exit::Usage;
    }
    let (tx, rx) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let next = term_at.or(kill_at);
        let got = match next {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(line) if line.trim() == "done" => return Exit::Ok,
            Ok(line) => {
                if let Some((term, kill)) = deadlines(&line) {
                    let now = Instant::now();
                    term_at = Some(now + term);
                    kill_at = Some(now + kill);
                }
            }
            Err(RecvTimeoutError::Timeout) if term_at.is_some() => {
                fired();
                signal_group(pgid, libc::SIGTERM);
                term_at = None;
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                fired();
                signal_group(pgid, libc::SIGKILL);
                return Exit::Ok;
            }
        }
    }
}

/// Tells lockctl (on stdout, which it reads when the job ends) that the guard stopped the
/// job: the lease ran out while lockctl could not act.
fn fired() {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "fired");
    let _ = out.flush();
}

/// `TERM_MS KILL_MS`, the second not before the first.
fn deadlines(line: &str) -> Option<(Duration, Duration)> {
    let (term, kill) = line.trim().split_once(' ')?;
    let term = Duration::from_millis(term.parse().ok()?);
    let kill = Duration::from_millis(kill.parse().ok()?);
    Some((term.min(kill), kill))
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) on the job's process group, checked above to be neither 0 nor 1.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::deadlines;
    use std::time::Duration;

    #[test]
    fn deadlines_are_two_millisecond_counts() {
        assert_eq!(
            deadlines("100 140\n"),
            Some((Duration::from_millis(100), Duration::from_millis(140)))
        );
        assert_eq!(
            deadlines("200 140"),
            Some((Duration::from_millis(140), Duration::from_millis(140)))
        );
        assert_eq!(deadlines("garbage"), None);
        assert_eq!(deadlines("1 -2"), None);
    }
}
