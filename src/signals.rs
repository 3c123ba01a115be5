//! SIGINT, SIGTERM and SIGHUP: the first asks a long command to stop and report; a second (or
//! the first, for a command with nothing to finish) quits at once, after giving back every lock
//! the process holds and leaving every queue it waits in. The exit code is 128 + the signal,
//! as shells report it (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// How long quitting may spend giving back each lock.
pub const GIVE_BACK_LIMIT: Duration = Duration::from_millis(500);

/// A clean-up to run before quitting on a signal; it may say what it did ("gave back 2
/// locks").
type CleanUp = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// The clean-ups registered so far, run in the order they were registered. The one list of
/// the process: this module knows none of them by name.
static CLEAN_UPS: std::sync::Mutex<Vec<CleanUp>> = std::sync::Mutex::new(Vec::new());

/// Registers `clean_up` to run when a signal quits the process at once.
pub fn on_quit(clean_up: impl Fn() -> Option<String> + Send + Sync + 'static) {
    CLEAN_UPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(clean_up));
}

/// What the signals said so far.
#[derive(Clone, Debug)]
pub struct Stop {
    /// Set by the first signal: start nothing new.
    pub requested: Arc<AtomicBool>,
    /// The first signal's number, 0 before any.
    signal: Arc<AtomicI32>,
    /// With [`First::Forward`]: the process group signals are passed to (0: none yet).
    pub forward_to: Arc<AtomicI32>,
}

impl Stop {
    /// The exit code for the signal that stopped the command, if one did.
    pub fn exit_code(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            n => Some(128 + n),
        }
    }
}

/// How the first signal is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    /// Stop starting new work and let the command finish and report, saying what it finishes
    /// ("the requests in flight" for the hammer).
    Finish(&'static str),
    /// Give back what is held and exit now (a single purchase).
    Quit,
    /// Pass every signal on to the process group in `Stop::forward_to` once it is set (a job
    /// under `lockctl run`); before that, give back what is held and exit now.
    Forward,
}

/// Starts listening for the three signals. Without a listener (it could not be installed) the
/// signals keep their default effect, which is to end the process.
pub fn listen(first: First) -> Stop {
    let stop = Stop {
        requested: Arc::new(AtomicBool::new(false)),
        signal: Arc::new(AtomicI32::new(0)),
        forward_to: Arc::new(AtomicI32::new(0)),
    };
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return stop;
    };
    let s = stop.clone();
    let _ = thread::Builder::new()
        .name("lockctl-signals".into())
        .spawn(move || {
            for n in signals.forever() {
                let group = s.forward_to.load(Ordering::SeqCst);
                if first == First::Forward && group > 0 {
                    let _ = s
                        .signal
                        .compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
                    // The job's own process group.
                    if let (Some(group), Some(sig)) = (
                        rustix::process::Pid::from_raw(group),
                        rustix::process::Signal::from_named_raw(n),
                    ) {
                        let _ = rustix::process::kill_process_group(group, sig);
                    }
                    continue;
                }
                let again = s.requested.swap(true, Ordering::SeqCst);
                let _ = s
                    .signal
                    .compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
                let First::Finish(what) = first else {
                    quit_now(n);
                };
                if again {
                    quit_now(n);
                }
                eprintln!("lockctl: {}: finishing {what} (again to quit now)", name(n));
            }
        });
    stop
}

/// Whether a command quit by a signal says so as JSON on stdout (`--json`).
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Under `--json`, a command a signal quits still prints one object: `{"error": ...,
/// "error_kind": "signal", "signal": n}`.
pub fn quit_as_json(on: bool) {
    JSON.store(on, Ordering::SeqCst);
}

/// Says that a signal (`code`, 128 + its number) stopped the command before it had anything
/// to report, `what` saying what it stopped: on stderr, and under `--json` as the one object on
/// stdout, as quitting does.
pub fn stopped_before_report(code: i32, what: &str) {
    let n = code - 128;
    eprintln!("lockctl: {}: {what}", name(n));
    signal_json(n, what);
}

/// What a command a signal quit prints under `--json`: an error, as [`ErrorJson`] has it,
/// whose kind is `signal`.
///
/// [`ErrorJson`]: lockctl_core::wire::ErrorJson
#[derive(serde::Serialize)]
struct SignalJson {
    error: String,
    error_kind: &'static str,
    signal: i32,
}

/// Under `--json`, the one object on stdout for a run ended by signal `n`.
fn signal_json(n: i32, what: &str) {
    if !JSON.load(Ordering::SeqCst) {
        return;
    }
    use std::io::Write as _;
    let doc = SignalJson {
        error: format!("{}: {what}", name(n)),
        error_kind: "signal",
        signal: n,
    };
    let Ok(line) = serde_json::to_string(&doc) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn quit_now(n: i32) -> ! {
    let said: Vec<String> = CLEAN_UPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|clean_up| clean_up())
        .collect();
    if !said.is_empty() {
        eprintln!("lockctl: {}: {}; quitting", name(n), said.join("; "));
    }
    let what = match said.is_empty() {
        true => "quitting".to_string(),
        false => said.join("; "),
    };
    signal_json(n, &what);
    std::process::exit(128 + n);
}

fn name(n: i32) -> &'static str {
    match n {
        SIGINT => "interrupted",
        SIGTERM => "terminated (SIGTERM)",
        SIGHUP => "hung up (SIGHUP)",
        _ => "signalled",
    }
}
