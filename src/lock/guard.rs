//! The proof of holding a lock, and how it is given back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::lease::Lease;
use super::registry::Registration;
use super::scripts::RELEASE;
use super::watchdog::Watchdog;
use super::{Release, Token, release_token};
use crate::conn::{Conn, evalsha};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::metrics;
use crate::redlock::Quorum;

/// Proof of holding the lock. Release it with [`Guard::release`]; a guard that is dropped
/// instead stops its watchdog and leaves the lock to expire by its TTL.
#[derive(Debug)]
pub struct Guard {
    pub(super) keys: Arc<LockKeys>,
    pub(super) token: Token,
    pub(super) fence: u64,
    pub(super) ttl: Duration,
    pub(super) waited: Duration,
    pub(super) acquired_at: Instant,
    pub(super) watchdog: Option<Watchdog>,
    /// Redlock's nodes and the end of the validity of the grant (or of its last extension).
    pub(super) quorum: Option<(Arc<Quorum>, Instant)>,
    /// What this holder knows of its lease by its own clock (shared with the watchdog).
    pub(super) lease: Arc<Lease>,
    /// Keeps the lock in the process's list of held locks until the guard is gone.
    pub(super) _registration: Registration,
}

impl Guard {
    /// The value stored in the lock key.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of this lock.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// How long acquiring took.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// How long the lock has been held so far.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// The lease length this guard was granted with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True once the watchdog has failed to renew: the lease may be gone, so the holder must
    /// not write. Without a watchdog the guard cannot know (use a fenced write for that).
    pub fn lease_lost(&self) -> bool {
        self.watchdog.is_some() && self.lease.is_lost()
    }

    /// Whether the lease can still be valid now, by this process's own clock: less than the
    /// TTL (less Redlock's drift margin) has passed since the earliest moment the grant or the
    /// last confirmed renewal could have taken effect. A renewal in flight is waited for (up to
    /// one TTL). A holder that was paused past its lease finds out here; what remains is a
    /// pause between this check and the write reaching Redis, which only a fenced write closes.
    pub fn lease_valid(&self) -> bool {
        self.lease.still_valid(self.ttl)
    }

    /// How much longer the lease can be valid by this process's own clock, as of the last
    /// renewal the server confirmed (zero once a renewal found it lost). Does not wait.
    pub fn remaining_validity(&self) -> Duration {
        self.lease.remaining()
    }

    /// Renewals the watchdog has made so far.
    pub fn renewals(&self) -> u64 {
        self.watchdog
            .as_ref()
            .map_or(0, |w| w.renewals.load(Ordering::Relaxed))
    }

    /// Stops the watchdog (waiting for any renewal in flight, so none can follow), then
    /// releases the lock if it still holds this token, handing it to the next waiter if any.
    pub fn release(mut self, conn: &mut Conn) -> Result<Release> {
        let dog_lost = self.stop_watchdog();
        self.release_quorum();
        let released = release_token(conn, &self.keys, &self.token);
        self.record(released.as_ref().ok().copied(), dog_lost);
        released
    }

    /// Runs `commands` as one MULTI/EXEC transaction and releases the lock, in a single round
    /// trip: the release runs whatever the transaction does, as a `finally` would, and the next
    /// waiter gets the lock one round trip sooner than with a write followed by a release.
    ///
    /// Returns EXEC's replies (one per command) and what the release found.
    pub fn release_after(
        mut self,
        conn: &mut Conn,
        commands: &[redis::Cmd],
    ) -> Result<(Vec<redis::Value>, Release)> {
        let dog_lost = self.stop_watchdog();
        let mut release = evalsha(&RELEASE, &self.keys.queue_keys());
        release.arg(&self.keys.queue_argv(self.token.as_str(), 0, false));
        // Under Redlock the quorum must be given back before the data-node lock is handed to
        // the next waiter, or that waiter's round finds our keys and fails: there the release
        // cannot ride with the write.
        let piggyback = self.quorum.is_none();
        let outcome =
            conn.transaction::<Vec<redis::Value>>(commands, piggyback.then_some(&release));
        self.release_quorum();
        let released = match &outcome {
            Ok((_, Some(redis::Value::Int(code)))) => release_code(*code),
            // Under Redlock, after a failed transaction, or when the script cache was flushed
            // (a restart, SCRIPT FLUSH) and the release did not run: run it now, loading the
            // script if needed.
            _ => release_token(conn, &self.keys, &self.token)?,
        };
        self.record(Some(released), dog_lost);
        outcome.map(|(values, _)| (values, released))
    }

    /// Feeds the metrics once the release is done: the hold time, and a lost lease if the
    /// watchdog lost it or the release found it gone.
    fn record(&self, released: Option<Release>, dog_lost: bool) {
        let m = metrics::global();
        m.observe_hold(self.held_for());
        if dog_lost || matches!(released, Some(Release::NotOwner | Release::Expired)) {
            m.lease_lost();
        }
    }

    fn release_quorum(&self) {
        if let Some((q, _)) = &self.quorum {
            q.release(&self.keys.lock, self.token.as_str(), self.ttl);
        }
    }

    /// Stops the watchdog and says whether it had lost the lease.
    fn stop_watchdog(&mut self) -> bool {
        match self.watchdog.take() {
            Some(mut w) => {
                w.stop();
                self.lease.is_lost()
            }
            None => false,
        }
    }
}

pub(super) fn release_code(code: i64) -> Release {
    match code {
        1 => Release::Released,
        0 => Release::NotOwner,
        _ => Release::Expired,
    }
}
