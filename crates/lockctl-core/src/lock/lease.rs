//! What a holder knows of its lease by its own clock.
//!
//! Redlock's validity rule, applied to every grant: the lease can only still be valid while
//! less than the TTL (minus a margin for clock drift) has passed since the earliest moment it
//! could have started: the sending of the call that won it, or of the last renewal the server
//! confirmed. A holder that was paused (SIGSTOP, a long GC, a swapped-out page) finds out here
//! before it writes, instead of writing on a lease that ran out while it slept. A renewal in
//! flight is waited for, not guessed at: its answer can only move the end later.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The lease of one grant, shared by the guard and its watchdog.
#[derive(Debug)]
pub(crate) struct Lease {
    state: Mutex<State>,
    changed: Condvar,
    ttl: Duration,
}

#[derive(Debug)]
struct State {
    /// Past this instant the lease may be gone.
    valid_until: Instant,
    /// A renewal has been sent and not yet answered.
    renewing: bool,
    /// A renewal failed or found another holder.
    lost: bool,
}

/// Redlock's allowance for clocks that run at different rates: 1% of the TTL plus 2 ms.
pub(super) fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl Lease {
    /// A lease of `ttl` that started no earlier than `from`, and that a quorum (Redlock) holds
    /// no later than `quorum_until`.
    pub(crate) fn new(from: Instant, ttl: Duration, quorum_until: Option<Instant>) -> Lease {
        let mut valid_until = (from + ttl).checked_sub(drift_margin(ttl)).unwrap_or(from);
        if let Some(q) = quorum_until {
            valid_until = valid_until.min(q);
        }
        Lease {
            state: Mutex::new(State {
                valid_until,
                renewing: false,
                lost: false,
            }),
            changed: Condvar::new(),
            ttl,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let out = f(&mut s);
        self.changed.notify_all();
        out
    }

    /// A renewal is about to be sent.
    pub(super) fn renewing(&self) {
        self.with(|s| s.renewing = true);
    }

    /// The server confirmed a renewal sent at `sent` (and the quorum, if any, holds until
    /// `quorum_until`).
    pub(super) fn renewed(&self, sent: Instant, quorum_until: Option<Instant>) {
        let mut until = (sent + self.ttl)
            .checked_sub(drift_margin(self.ttl))
            .unwrap_or(sent);
        if let Some(q) = quorum_until {
            until = until.min(q);
        }
        self.with(|s| {
            s.renewing = false;
            s.valid_until = s.valid_until.max(until);
        });
    }

    /// A renewal failed or found another holder: the lease is gone for good.
    pub(super) fn lost(&self) {
        self.with(|s| {
            s.renewing = false;
            s.lost = true;
        });
    }

    /// Whether a renewal has found the lease gone.
    pub(crate) fn is_lost(&self) -> bool {
        self.with(|s| s.lost)
    }

    /// How much longer the lease can be valid by this process's clock (zero once lost), without
    /// waiting for a renewal in flight.
    pub(crate) fn remaining(&self) -> Duration {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.lost {
            return Duration::ZERO;
        }
        s.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the lease can still be valid now, by this process's clock. Waits for a renewal
    /// in flight, up to `limit`; one still unanswered then does not count.
    pub(super) fn still_valid(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.renewing && !s.lost {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = match self.changed.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        !s.lost && Instant::now() < s.valid_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_valid_until_its_ttl_less_the_margin_and_renewals_extend_it() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_millis(200), None);
        assert!(lease.still_valid(Duration::ZERO));
        let stale = Lease::new(
            t0 - Duration::from_millis(199),
            Duration::from_millis(200),
            None,
        );
        assert!(
            !stale.still_valid(Duration::ZERO),
            "inside the drift margin"
        );
        stale.renewing();
        stale.renewed(Instant::now(), None);
        assert!(stale.still_valid(Duration::ZERO));
        stale.lost();
        assert!(!stale.still_valid(Duration::ZERO));
        assert!(stale.is_lost());
    }

    #[test]
    fn a_renewal_in_flight_is_waited_for() {
        let lease = std::sync::Arc::new(Lease::new(
            Instant::now() - Duration::from_millis(250),
            Duration::from_millis(200),
            None,
        ));
        assert!(
            !lease.still_valid(Duration::ZERO),
            "already past by the clock"
        );
        lease.renewing();
        let l = lease.clone();
        let renewer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            l.renewed(Instant::now(), None);
        });
        // By the clock alone the lease is over; the renewal in flight lands after 100 ms.
        assert!(lease.still_valid(Duration::from_secs(5)));
        renewer.join().unwrap();
    }
}
