//! The proof of holding a lock, and how it is given back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::lease::Lease;
use super::watchdog::{Renewal, Watchdog};
use super::{Carried, Fenced, Release, Token, fenced_write, notify_grantee, release_carrying};
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::redlock::Quorum;

/// What a grant told its holder beyond its fence.
#[derive(Debug)]
pub(super) struct Told {
    /// What it carried ([`super::Lock::carrying`]).
    pub(super) carried: Option<Carried>,
    /// The waiter at the head of the queue when it was made, if any: the release declares its
    /// wake list (see `QUEUE_LUA`).
    pub(super) next: Option<String>,
}

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
    /// The key the lock's grants carry, which its hand-off carries on to the next holder.
    pub(super) carry: Option<Arc<str>>,
    /// What the grant told beyond its fence, boxed (most grants tell nothing, and an
    /// `Acquire` stays small): what it carried and who waits next.
    pub(super) told: Option<Box<Told>>,
    /// Keeps the lock in the process's list of held locks until the guard is gone.
    pub(super) _registration: Option<Box<crate::conn::Held>>,
}

impl Guard {
    /// What the watchdog needs to renew this guard's lease.
    pub(super) fn renewal(&self) -> Renewal {
        Renewal {
            keys: self.keys.clone(),
            token: self.token.clone(),
            ttl: self.ttl,
            lease: self.lease.clone(),
            quorum: self.quorum.clone(),
        }
    }

    /// The value stored in the lock key.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of this lock.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The value of the carried key at the moment of this grant, when the lock carries one
    /// and the script that granted it read it (a grant made some other way carries nothing).
    pub fn carried(&self) -> Option<&Carried> {
        self.told.as_ref()?.carried.as_ref()
    }

    /// The waiter at the head of the queue when this grant was made.
    pub(super) fn next(&self) -> Option<&str> {
        self.told.as_ref()?.next.as_deref()
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

    /// Runs the caller's own command `cmd` only while the lock still holds this guard's token,
    /// in one script with the check: [`Fenced::LeaseLost`] (nothing written) once the lease
    /// ran out or another holder took the lock, however long this process was paused between
    /// deciding to write and the write reaching Redis. The command's keys must be on the
    /// lock's server (in a cluster, in the lock's slot: give the lock name and the keys one
    /// hash tag, `{order-42}`); a command Redis does not allow in scripts is refused by Redis.
    ///
    /// ```no_run
    #[doc = include_str!("../../doc-examples/fenced_write.rs")]
    /// ```
    pub fn fenced(&self, conn: &mut Conn, cmd: &redis::Cmd) -> Result<Fenced<redis::Value>> {
        fenced_write(conn, &self.keys, self.token.as_str(), cmd)
    }

    /// The lock's keys, shared: what a fenced write made without the guard needs.
    #[cfg(feature = "tokio")]
    pub(crate) fn shared_keys(&self) -> Arc<LockKeys> {
        self.keys.clone()
    }

    /// The lease as this holder knows it, shared with the watchdog: what a signal of its loss
    /// reads without holding the guard.
    #[cfg(feature = "tokio")]
    pub(crate) fn lease(&self) -> Arc<Lease> {
        self.lease.clone()
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
        let released = release_carrying(
            conn,
            &self.keys,
            &self.token,
            self.carry.as_deref(),
            self.next(),
        );
        self.record(conn.metrics(), released.as_ref().ok().copied(), dog_lost);
        released
    }

    /// Runs `script` (built by `releasing`) with its own `keys` and `args`: its work
    /// and this lock's release, with the hand-off to the next waiter, in one script and one
    /// round trip. Under Redlock the script leaves the lock held and the release follows on
    /// its own, after the quorum is given back. Returns the work's reply and what the release
    /// found: `None` when the release failed (a damaged queue or fencing counter), which leaves
    /// the lock to expire by its TTL and the work's effect standing, as a separate release that
    /// failed would. If the call itself fails (its effect unknown), the lock is released by
    /// token, best effort, and the call's error returned.
    pub fn release_inside(
        mut self,
        conn: &mut Conn,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<(redis::Value, Option<Release>)> {
        let dog_lost = self.stop_watchdog();
        let outcome: Result<(redis::Value, i64, String)> =
            conn.script(&self.inside(script, keys, args));
        self.release_quorum();
        let carry = self.carry.as_deref();
        let released = match &outcome {
            Ok((_, code, notify)) if (-1..=1).contains(code) => {
                notify_grantee(conn, &self.keys, notify, carry);
                Some(release_code(*code))
            }
            // Not asked to release (Redlock), the release failed inside, or the call failed.
            _ => release_carrying(conn, &self.keys, &self.token, carry, self.next()).ok(),
        };
        self.record(conn.metrics(), released, dog_lost);
        let (value, _, _) = outcome?;
        Ok((value, released))
    }

    /// The call of [`Guard::release_inside`]: `script` with its own `keys` and `args`, then
    /// this lock's queue keys, the next waiter's wake list, the carried key, the token when the
    /// script is to release (not under Redlock) and the wake prefix.
    pub(super) fn inside<'a>(
        &'a self,
        script: &'a redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> redis::ScriptInvocation<'a> {
        let piggyback = self.quorum.is_none();
        let mut inv = script.prepare_invoke();
        for k in keys.iter().copied().chain(self.keys.queue_keys()) {
            inv.key(k);
        }
        inv.key(self.keys.hinted_wake(self.next()));
        inv.key(self.carry.as_deref().unwrap_or(&self.keys.lock));
        inv.arg(args)
            .arg(if piggyback { self.token.as_str() } else { "" })
            .arg(&self.keys.wake_prefix);
        inv
    }

    /// Feeds the metrics once the release is done: the hold time, and a lost lease if the
    /// watchdog lost it or the release found it gone.
    pub(super) fn record(
        &self,
        metrics: Option<&Arc<crate::metrics::Metrics>>,
        released: Option<Release>,
        dog_lost: bool,
    ) {
        let Some(m) = metrics else {
            return;
        };
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
