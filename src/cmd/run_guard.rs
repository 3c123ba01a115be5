//! `lockctl __run-guard TERM_AT KILL_AT` (internal, outside the command line's definitions):
//! the process `lockctl run` starts beside its job, so that the job cannot outlive its lease
//! even when lockctl itself cannot act.
//!
//! It starts armed: TERM_AT and KILL_AT are deadlines on the system's monotonic clock, in ms.
//! Lines on its stdin: `pgid N` (from the job's child itself, before the job's code runs),
//! `TERM_AT KILL_AT` (lockctl, every 50 ms, as the lease is renewed) and `done`. If no line
//! moves the deadlines in time (lockctl paused by SIGSTOP, or stuck), it sends SIGTERM to the
//! job's group at the first and SIGKILL at the second, both before the lease can end on the
//! server. If its stdin closes (lockctl died however it died) it kills the group at once. When
//! it acts it says `fired` on stdout, for lockctl to report the lease as lost.

use std::io::BufRead;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use rustix::process::Signal;

use super::Exit;

/// The argument that makes this process the guard, first on its command line.
pub const ARG: &str = "__run-guard";

/// `Some` when this process was started as the guard: its exit.
pub fn from_args() -> Option<Exit> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != ARG {
        return None;
    }
    let mut deadline = || args.next().and_then(|a| a.to_str()?.parse::<u64>().ok());
    Some(match (deadline(), deadline()) {
        (Some(term), Some(kill)) => run(term.min(kill), kill),
        _ => {
            eprintln!("lockctl: {ARG} is lockctl run's own guard: it needs TERM_AT KILL_AT");
            Exit::Usage
        }
    })
}

/// Now on the monotonic clock, which every process of this system shares, in ms.
pub fn mono_ms() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Writes `pgid <pid>\n` into `buf` without allocating (it runs between fork and exec);
/// returns its length.
pub fn pgid_line(pid: i32, buf: &mut [u8; 32]) -> usize {
    let head = b"pgid ";
    buf[..head.len()].copy_from_slice(head);
    let mut digits = [0u8; 12];
    let mut n = pid.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[head.len() + i] = digits[len - 1 - i];
    }
    buf[head.len() + len] = b'\n';
    head.len() + len + 1
}

/// What a line on the guard's stdin says.
#[derive(Debug, PartialEq)]
enum Line {
    Pgid(i32),
    Deadlines(u64, u64),
    Done,
    Garbage,
}

fn parse(line: &str) -> Line {
    let line = line.trim();
    if line == "done" {
        return Line::Done;
    }
    if let Some(p) = line.strip_prefix("pgid ") {
        // A group id of 0 or 1 would be the guard's own group, or init's.
        return match p.parse::<i32>() {
            Ok(p) if p > 1 => Line::Pgid(p),
            _ => Line::Garbage,
        };
    }
    let deadlines = line
        .split_once(' ')
        .and_then(|(t, k)| Some((t.parse::<u64>().ok()?, k.parse::<u64>().ok()?)));
    match deadlines {
        Some((term, kill)) => Line::Deadlines(term.min(kill), kill),
        None => Line::Garbage,
    }
}

/// Watches the deadlines; kills the group when they pass or lockctl goes.
fn run(term: u64, kill: u64) -> Exit {
    let (tx, rx) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut pgid: Option<i32> = None;
    let mut term_at = Some(term);
    let mut kill_at = kill;
    loop {
        let next = term_at.unwrap_or(kill_at);
        let wait = Duration::from_millis(next.saturating_sub(mono_ms()));
        match rx.recv_timeout(wait) {
            Ok(line) => match parse(&line) {
                Line::Done => return Exit::Ok,
                Line::Pgid(p) => pgid = Some(p),
                Line::Deadlines(t, k) => {
                    term_at = Some(t);
                    kill_at = k;
                }
                Line::Garbage => {}
            },
            Err(RecvTimeoutError::Timeout) if term_at.is_some() => {
                signal_group(pgid, Signal::TERM);
                term_at = None;
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                signal_group(pgid, Signal::KILL);
                return Exit::Ok;
            }
        }
    }
}

/// Signals the job's group, if the job has told its group, and says so to lockctl.
fn signal_group(pgid: Option<i32>, sig: Signal) {
    let Some(pgid) = pgid else { return };
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "fired");
        let _ = out.flush();
    }
    // The job's process group, checked in `parse` to be neither 0 nor 1.
    if let Some(group) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(group, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, parse, pgid_line};

    #[test]
    fn lines_are_a_group_two_deadlines_or_done() {
        assert_eq!(parse("pgid 4242\n"), Line::Pgid(4242));
        assert_eq!(parse("pgid 1"), Line::Garbage);
        assert_eq!(parse("pgid -5"), Line::Garbage);
        assert_eq!(parse("100 140"), Line::Deadlines(100, 140));
        assert_eq!(parse("200 140"), Line::Deadlines(140, 140));
        assert_eq!(parse("1 -2"), Line::Garbage);
        assert_eq!(parse("done"), Line::Done);
    }

    #[test]
    fn the_pgid_line_is_written_without_allocating() {
        let mut buf = [0u8; 32];
        let n = pgid_line(31337, &mut buf);
        assert_eq!(&buf[..n], b"pgid 31337\n");
        let n = pgid_line(7, &mut buf);
        assert_eq!(&buf[..n], b"pgid 7\n");
    }
}
