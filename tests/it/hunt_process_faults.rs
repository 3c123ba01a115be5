//! The process faults (`pause-worker`, `kill-worker`) on the system the hunt started: which
//! processes they pick, that they take effect on processes that live for a moment, and that
//! the heal continues every one.

use std::time::{Duration, Instant};

use crate::hunt::FIXTURES;
use crate::support::{RedisServer, free_port};

/// `command` started as `--serve` starts it, awaited at `127.0.0.1:port`.
pub(crate) fn serve(command: &str, port: u16) -> lockctl_hunt::serve::Served {
    use lockctl_hunt::serve::{Reach, Served};
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    Served::start(command, addr, None, std::sync::Arc::new(Reach::new()), None).unwrap()
}

/// One round in which `kind` is struck at once and healed: the fault, as the heal saw it.
pub(crate) fn strike_once(
    nemesis: &lockctl_hunt::nemesis::Nemesis,
    kind: lockctl_hunt::nemesis::FaultKind,
    rng: &mut rand::rngs::StdRng,
) -> lockctl_hammer::history::Fault {
    nemesis.begin_round();
    nemesis.strike(kind, Duration::ZERO, Duration::ZERO, rng);
    nemesis.heal(Duration::ZERO).faults.remove(0)
}

/// Process `pid`'s state (`/proc/PID/stat`): `T` stopped, `Z` a zombie; `None` when gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Whether process `pid` is stopped.
fn is_stopped(pid: i32) -> bool {
    state(pid) == Some('T')
}

/// pause-worker on a web tier of 8 workers stops a random half of them, so that whichever
/// worker holds a lock is stopped half the time (one worker of 8 was mostly one waiting for
/// the lock), a different half from round to round, and the heal continues every one.
#[test]
fn a_pause_of_a_web_tier_stops_half_its_workers_and_the_heal_continues_them_all() {
    use lockctl_hunt::nemesis::{FaultKind, Nemesis};
    use rand::SeedableRng;
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    let redis = RedisServer::start();
    let port = free_port();
    let command = format!("PHP_CLI_SERVER_WORKERS=8 exec php -S 127.0.0.1:{port} -t {FIXTURES}");
    let served = serve(&command, port);
    // php -S answers before it has forked all its workers: wait for the 8.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tree = served.processes();
    while tree.len() < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        tree = served.processes();
    }
    assert_eq!(tree.len(), 9, "php -S and its 8 workers: {tree:?}");
    let stopped = || -> Vec<i32> { tree.iter().copied().filter(|p| is_stopped(*p)).collect() };
    let nemesis = Nemesis::new(redis.target(), Some(Arc::new(Mutex::new(served))));
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut halves = HashSet::new();
    for _ in 0..8 {
        nemesis.begin_round();
        nemesis.strike(
            FaultKind::PauseWorker,
            Duration::ZERO,
            Duration::ZERO,
            &mut rng,
        );
        // A SIGSTOP is sent at once and takes effect when the process is next scheduled.
        let settled = |want: usize| {
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut now = stopped();
            while now.len() != want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
                now = stopped();
            }
            now
        };
        let mut half = settled(4);
        half.sort_unstable();
        assert_eq!(half.len(), 4, "stopped: {half:?} of {tree:?}");
        let healed = nemesis.heal(Duration::ZERO);
        assert!(healed.faults[0].took, "{}", healed.faults[0].detail);
        let left = settled(0);
        assert!(left.is_empty(), "left stopped: {left:?}");
        halves.insert(half);
    }
    assert!(halves.len() > 1, "the same half every time: {halves:?}");
}

/// A system of a web tier (a `php -S` with 8 workers) and a queue's consumer (a process with
/// no listening socket): pause-worker stops the consumer as often as the web tier, not one
/// time in nine.
#[test]
fn a_process_that_serves_no_port_is_paused_as_often_as_the_web_tier() {
    use lockctl_hunt::nemesis::{FaultKind, Nemesis};
    use rand::SeedableRng;
    use std::sync::{Arc, Mutex};
    let redis = RedisServer::start();
    let port = free_port();
    let command = format!(
        "PHP_CLI_SERVER_WORKERS=8 php -S 127.0.0.1:{port} -t {FIXTURES} & sleep 300 & wait"
    );
    let served = serve(&command, port);
    let comm = |pid: &i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let consumer = *served
        .processes()
        .iter()
        .find(|p| comm(p).trim() == "sleep")
        .expect("the consumer runs");
    let nemesis = Nemesis::new(redis.target(), Some(Arc::new(Mutex::new(served))));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut consumer_paused = 0;
    for _ in 0..60 {
        let fault = strike_once(&nemesis, FaultKind::PauseWorker, &mut rng);
        let detail = &fault.detail;
        assert!(fault.took, "{detail}");
        consumer_paused += u32::from(
            detail == &format!("process {consumer} of the system under test stopped (SIGSTOP)"),
        );
    }
    assert!(
        (18..=42).contains(&consumer_paused),
        "the consumer was paused {consumer_paused} times in 60"
    );
}

/// A process fault freezes the system while it picks: every process of the system's group
/// stands stopped while the pick is made, the picked one stays stopped and the others go on.
/// A forking server's request handler lives for one request; looked at first and signalled
/// after, on a loaded machine it had often exited by the time of the signal (a clean-clone CI
/// run: 43 of 81 pauses stopped nothing). Here the system's other process is a new `sleep`
/// of 5 ms after another, and every pause must take: one that picked a sleep that then exited
/// would stop nothing.
#[test]
fn a_pause_freezes_the_system_while_it_picks_so_a_process_of_a_moment_is_stopped() {
    use lockctl_hunt::nemesis::{FaultKind, Nemesis};
    use rand::SeedableRng;
    use std::sync::{Arc, Mutex};
    let redis = RedisServer::start();
    let port = free_port();
    let command = format!(
        "python3 -m http.server --bind 127.0.0.1 {port} >/dev/null 2>&1 & while :; do sleep 0.005; done"
    );
    let served = serve(&command, port);
    // The freeze itself: while the pick is made, every process of the system is stopped.
    let mut seen = Vec::new();
    let reached = served.freeze_and_signal(rustix::process::Signal::STOP, |tree| {
        // A SIGSTOP sent takes effect as soon as the process is next scheduled. A process in
        // an uninterruptible wait ('D') runs no code of its own: the shell waiting in vfork
        // for a child the freeze stopped before its exec stays so until the child goes on.
        // The deadline only keeps a broken freeze from hanging the test.
        let deadline = Instant::now() + Duration::from_secs(60);
        let running = |p: i32| matches!(state(p), Some('R' | 'S'));
        while tree.iter().any(|p| running(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        seen = tree.iter().map(|p| (*p, state(*p))).collect();
        tree.iter()
            .copied()
            .rfind(|p| is_stopped(*p))
            .into_iter()
            .collect()
    });
    // The shell and the server always; a sleep of the moment only when the freeze lands
    // while one runs (on a loaded machine the shell may be stopped between two of them).
    assert!(seen.len() >= 2, "the shell and the server: {seen:?}");
    assert!(
        seen.iter().all(|(_, s)| !matches!(s, Some('R' | 'S'))),
        "running while picking: {seen:?}"
    );
    assert_eq!(reached.len(), 1, "{reached:?}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(is_stopped(reached[0]), "the picked one was continued");
    for (pid, _) in seen.iter().filter(|(p, _)| *p != reached[0]) {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        assert!(!alive || !is_stopped(*pid), "{pid} was left stopped");
    }
    served.continue_all();
    // And through the nemesis: every pause takes, on the server or on a sleep of the moment.
    let nemesis = Nemesis::new(redis.target(), Some(Arc::new(Mutex::new(served))));
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut sleeps = 0;
    for _ in 0..40 {
        let fault = strike_once(&nemesis, FaultKind::PauseWorker, &mut rng);
        assert!(fault.took, "a pause stopped nothing: {}", fault.detail);
        let pid: i32 = fault
            .detail
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        sleeps += u32::from(comm.trim() != "python3");
    }
    assert!(sleeps >= 5, "only {sleeps} of 40 pauses picked a sleep");
}
