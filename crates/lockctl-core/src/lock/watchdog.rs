//! The lock's helper threads: the watchdog that renews a held lease, and the expiry poker that
//! hands an expired lease to the next waiter on time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::lease::{Lease, drift_margin};
use super::scripts::RENEW;
use super::{Token, release_token};
use crate::conn::Target;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::redlock::Quorum;

fn thread_error(what: &str, e: std::io::Error) -> crate::error::Error {
    crate::error::Error::internal(format!("could not start the {what} thread: {e}"))
}

/// Hands an expired lock to the next waiter on time.
///
/// Waiters block in BLPOP, whose timeout Redis only checks on its clock tick (every 100 ms at
/// the default hz of 10), so a waiter relying on it would notice a dead or late holder's lease
/// ending up to a tick late. Instead, a waiter that expects the lease to end before its next
/// refresh registers the moment here, and this thread, with its own connection, runs the
/// release script with a token nobody holds at that moment: a no-op while the lock is held,
/// and a hand-off to the oldest live waiter (waking it at once) when it is free.
#[derive(Debug)]
pub(super) struct ExpiryPoker {
    due: mpsc::Sender<Instant>,
}

impl ExpiryPoker {
    /// Starts the thread; it connects when it first has a poke to make (and again after a
    /// failed one), so that starting it never waits on the network: a waiter on the async
    /// transport starts it from a tokio task.
    pub(super) fn start(target: &Target, keys: Arc<LockKeys>) -> Result<ExpiryPoker> {
        let target = target.clone();
        let mut conn = None;
        let (due, rx) = mpsc::channel::<Instant>();
        thread::Builder::new()
            .name("lockctl-expiry".into())
            .spawn(move || {
                let nobody = Token(String::new());
                let mut pending = std::collections::BTreeSet::<Instant>::new();
                loop {
                    let next = match pending.first() {
                        Some(&at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                        None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    };
                    match next {
                        Ok(at) => {
                            pending.insert(at);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let now = Instant::now();
                            // One poke serves every waiter due within the same millisecond.
                            pending.retain(|&at| at > now + Duration::from_millis(1));
                            if conn.is_none() {
                                conn = target.connect().ok();
                            }
                            if let Some(c) = conn.as_mut()
                                && release_token(c, &keys, &nobody).is_err()
                            {
                                conn = None;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| thread_error("expiry", e))?;
        Ok(ExpiryPoker { due })
    }

    pub(super) fn poke_at(&self, at: Instant) {
        let _ = self.due.send(at);
    }
}

/// The lease renewer: a thread with its own connection that extends the lease every TTL/3.
///
/// TTL/3 (Redisson's choice) leaves two more renewals' worth of slack before the lease runs
/// out, so one slow or lost renewal does not lose the lock; any renewal that fails or finds
/// another token marks the lease lost at once, and the thread ends.
#[derive(Debug)]
pub(super) struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub(super) renewals: Arc<AtomicU64>,
}

/// What the watchdog renews: a held lease, as its guard knows it.
pub(super) struct Renewal {
    pub(super) keys: Arc<LockKeys>,
    pub(super) token: Token,
    pub(super) ttl: Duration,
    pub(super) lease: Arc<Lease>,
    pub(super) quorum: Option<(Arc<Quorum>, Instant)>,
}

impl Watchdog {
    pub(super) fn start(target: &Target, guard: Renewal) -> Result<Watchdog> {
        let period = guard.ttl / 3;
        let mut conn = target.connect()?;
        // A renewal that cannot finish within one period is as good as failed.
        conn.set_call_timeout(period.min(target.options().call_timeout))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let lease = guard.lease.clone();
        let renewals = Arc::new(AtomicU64::new(0));
        let (key, token, ttl_ms) = (
            guard.keys.lock.clone(),
            guard.token.clone(),
            guard.ttl.as_millis() as u64,
        );
        let renewals_w = renewals.clone();
        let mut quorum = guard.quorum.clone();
        let ttl = guard.ttl;
        let thread = thread::Builder::new()
            .name("lockctl-watchdog".into())
            .spawn(move || {
                // Any message or a dropped sender means the guard is done with us.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let started = Instant::now();
                    lease.renewing();
                    let mut renewed = conn
                        .script::<i64>(RENEW.key(&key).arg(token.as_str()).arg(ttl_ms))
                        .unwrap_or(0);
                    // Under Redlock the extension counts only if a majority extends while the
                    // current validity lasts; the new validity runs from before the round.
                    if let Some((q, valid_until)) = &mut quorum {
                        let left = valid_until.saturating_duration_since(started);
                        if q.extend(&key, token.as_str(), ttl, left) {
                            *valid_until = started + ttl - drift_margin(ttl);
                        } else {
                            renewed = 0;
                        }
                    }
                    if renewed != 1 {
                        lease.lost();
                        return;
                    }
                    lease.renewed(started, quorum.as_ref().map(|(_, until)| *until));
                    renewals_w.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = conn.metrics() {
                        m.renewed();
                    }
                }
            })
            .map_err(|e| thread_error("watchdog", e))?;
        Ok(Watchdog {
            stop: Some(stop),
            thread: Some(thread),
            renewals,
        })
    }

    pub(super) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}
