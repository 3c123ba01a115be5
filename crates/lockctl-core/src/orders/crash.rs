//! Crash points for lockctl's own tests of the worker: where a test makes it die or stop.

/// For lockctl's own tests of crashes: `LOCKCTL_WORKER_CRASH_AT=before_commit` (or
/// `after_commit`, or `in_transaction`: after the insert, before the commit) makes the worker
/// die on the spot there, as a `kill -9` would, the first time it gets there;
/// `LOCKCTL_WORKER_STOP_AT=in_transaction` stops it there instead (SIGSTOP, as a paused VM or
/// a debugger would), once. Not for anything else.
pub(crate) fn crash_point(at: &str) {
    if std::env::var("LOCKCTL_WORKER_CRASH_AT").is_ok_and(|v| v == at) {
        std::process::abort();
    }
    static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if std::env::var("LOCKCTL_WORKER_STOP_AT").is_ok_and(|v| v == at)
        && !STOPPED.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::STOP);
    }
}
