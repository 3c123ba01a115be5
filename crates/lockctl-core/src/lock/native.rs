//! The lock on the native async transport ([`crate::aio`]): the same acquire loop, grant and
//! release as the blocking calls, on an [`AsyncConn`]. Every decision is the blocking path's
//! own function ([`Lock::queue_call`], [`Reply::of`], [`Reply::grant`], [`Lock::left`],
//! [`Lock::block_for`], [`Lock::blpop`], [`Lock::woke`], [`Lock::guard_of`],
//! [`Guard::inside`], `release_code`); only the calls are awaited here instead of blocking.
//!
//! For a lock of one server (not a cluster) taken without a watchdog ([`Lock::is_native`]):
//! Redlock's rounds and the watchdog's renewals stay on the blocking path. A waiter's BLPOP
//! blocks its connection, so the connection is the caller's alone while it waits.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use redis::Script;

use super::guard::release_code;
use super::scripts::{ACQUIRE, LEAVE};
use super::wait::{Grant, RawReply, Reply, Woke};
use super::{
    Acquire, Guard, Lock, Release, Token, is_wrong_type, notify_call, registry, release_call,
};
use crate::conn::AsyncConn;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::metrics::AcquireResult;

impl Lock {
    /// Whether this lock is taken natively on the async transport: one server's lock (not a
    /// cluster's, no Redlock quorum), no watchdog.
    pub(crate) fn is_native(&self) -> bool {
        self.target.single_client().is_some() && self.quorum.is_none() && !self.options.watchdog
    }

    /// [`Lock::acquire_since`] on `conn`, for a lock that [`Lock::is_native`].
    /// `token` is the caller's, so that a [`GiveBackOnDrop`] made for it first covers the whole
    /// purchase.
    pub(crate) async fn acquire_async(
        &self,
        conn: &mut AsyncConn,
        token: Token,
        started: Instant,
    ) -> Result<Acquire> {
        let registration =
            registry::register(&self.target, &self.keys, &token, self.options.ttl, None)?;
        let outcome = self.wait_for_grant_async(conn, &token, started).await;
        if let Some(m) = self.target.metrics() {
            let result = match &outcome {
                Ok(Some(_)) => AcquireResult::Acquired,
                Ok(None) => AcquireResult::Busy,
                Err(_) => AcquireResult::Error,
            };
            m.observe_wait(started.elapsed(), result);
        }
        match outcome {
            Ok(Some(grant)) => Ok(Acquire::Acquired(self.guard_of(
                token,
                grant,
                started,
                None,
                registration,
            ))),
            Ok(None) => Ok(Acquire::Busy),
            Err(e) => Err(self.named_async(conn, e).await),
        }
    }

    /// [`Lock::wait_for_grant`]: on an error the waiter leaves the queue and releases the lock
    /// by token, best effort.
    async fn wait_for_grant_async(
        &self,
        conn: &mut AsyncConn,
        token: &Token,
        started: Instant,
    ) -> Result<Option<Grant>> {
        let mut queued = false;
        let outcome = self
            .wait_in_queue_async(conn, token, started, &mut queued)
            .await;
        if outcome.is_err() {
            let _ = self.call_async(conn, &LEAVE, token, false).await;
            let _ = release_carrying_async(conn, &self.keys, token, None, None).await;
        }
        outcome
    }

    /// [`Lock::wait_in_queue`], step for step.
    async fn wait_in_queue_async(
        &self,
        conn: &mut AsyncConn,
        token: &Token,
        started: Instant,
        queued: &mut bool,
    ) -> Result<Option<Grant>> {
        // A purchase that has a place waits its whole wait (see `AsyncBuyer::buy_unless`).
        let give_up = AtomicBool::new(false);
        let call_timeout = conn.target.options().call_timeout;
        let carry = self.carry.as_deref();
        let mut not_yet = Reply::before(started);
        loop {
            let left = self.left(started, &give_up);
            let r = self
                .call_async(conn, &ACQUIRE, token, !left.is_zero())
                .await?;
            if r.granted {
                return Ok(Some(r.grant(&not_yet)));
            }
            notify_grantee_async(conn, &self.keys, &r.notify, carry).await;
            not_yet = r;
            if left.is_zero() {
                if !*queued {
                    return Ok(None);
                }
                let r = self.call_async(conn, &LEAVE, token, false).await?;
                return Ok(r.granted.then(|| r.grant(&not_yet)));
            }
            *queued = true;
            let block = self.block_for(left, call_timeout);
            self.poke_at_if_due(&not_yet, block);
            let blpop = self.blpop(token, block, not_yet.at_head);
            // (No EINTR to retry, as the blocking read must: tokio retries its own reads.)
            let woken = conn.query::<Option<(String, String)>>(&blpop).await?;
            match self.woke(token, woken) {
                Woke::Granted(payload) => return Ok(Some(not_yet.woken(&payload))),
                Woke::PassOn(whose) => notify_grantee_async(conn, &self.keys, &whose, carry).await,
                Woke::Nothing => {}
            }
        }
    }

    /// [`Lock::call`]: a queue-aware script, its answer read.
    async fn call_async(
        &self,
        conn: &mut AsyncConn,
        script: &Script,
        token: &Token,
        queue: bool,
    ) -> Result<Reply> {
        let sent = Instant::now();
        let raw: RawReply = conn.script(&self.queue_call(script, token, queue)).await?;
        Ok(Reply::of(raw, sent))
    }

    /// [`Lock::named`]: a bare WRONGTYPE as the lock key that is damaged.
    async fn named_async(&self, conn: &mut AsyncConn, e: Error) -> Error {
        if !is_wrong_type(&e) {
            return e;
        }
        for (key, want) in self.key_types() {
            let found = conn.query::<String>(redis::cmd("TYPE").arg(key)).await;
            if let Some(damaged) = self.damaged(key, found, want) {
                return damaged;
            }
        }
        e
    }
}

impl Lock {
    /// A give-back of what `token` will hold or queue for, armed until [`GiveBackOnDrop::done`].
    pub(crate) fn give_back_on_drop(&self, token: &Token) -> GiveBackOnDrop {
        GiveBackOf {
            target: self.target.clone(),
            keys: self.keys.clone(),
            token: token.clone(),
            ttl: self.options.ttl,
        }
        .armed()
    }
}

/// The lock (or the place in its queue) of a purchase task that may be dropped before it ends:
/// a task is dropped at an `await` when its runtime shuts down, and a guard dropped there would
/// leave the lock to its lease, every other buyer waiting it out. Dropped before
/// [`GiveBackOnDrop::done`], it gives the lock back on a thread of its own (the runtime is going),
/// as the holdings do when the process quits ([`registry::give_back`]).
pub(crate) struct GiveBackOnDrop(Option<GiveBackOf>);

struct GiveBackOf {
    target: crate::conn::Target,
    keys: std::sync::Arc<LockKeys>,
    token: Token,
    ttl: std::time::Duration,
}

impl GiveBackOf {
    fn armed(self) -> GiveBackOnDrop {
        GiveBackOnDrop(Some(self))
    }
}

impl GiveBackOnDrop {
    /// The purchase ended (released, or never took anything): nothing to give back.
    pub(crate) fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveBackOnDrop {
    fn drop(&mut self) {
        let Some(of) = self.0.take() else {
            return;
        };
        let limit = of.target.options().call_timeout;
        // Twice, a moment apart, as the holdings give back when the process quits: a call of
        // the dropped task already on its way (a refresh of its place) may queue the token
        // again, or be granted the lock, after the first time. A process that exits first
        // takes this thread with it, and the lock waits out its lease.
        let _ = std::thread::Builder::new()
            .name("lockctl-give-back".into())
            .spawn(move || {
                registry::give_back(&of.target, &of.keys, &of.token, of.ttl, None, limit);
                std::thread::sleep(crate::conn::SETTLE);
                registry::give_back(&of.target, &of.keys, &of.token, of.ttl, None, limit);
            });
    }
}

impl Guard {
    /// [`Guard::release`] on `conn`, for a guard of a lock that [`Lock::is_native`].
    pub(crate) async fn release_async(self, conn: &mut AsyncConn) -> Result<Release> {
        let carry = self.carry.as_deref();
        let released =
            release_carrying_async(conn, &self.keys, &self.token, carry, self.next()).await;
        self.record(
            conn.target.metrics(),
            released.as_ref().ok().copied(),
            false,
        );
        released
    }

    /// [`Guard::release_inside`] on `conn`, for a guard of a lock that [`Lock::is_native`].
    pub(crate) async fn release_inside_async(
        self,
        conn: &mut AsyncConn,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<(redis::Value, Option<Release>)> {
        let outcome: Result<(redis::Value, i64, String)> =
            conn.script(&self.inside(script, keys, args)).await;
        let carry = self.carry.as_deref();
        let released = match &outcome {
            Ok((_, code, notify)) if (-1..=1).contains(code) => {
                notify_grantee_async(conn, &self.keys, notify, carry).await;
                Some(release_code(*code))
            }
            // The release failed inside, or the call failed.
            _ => release_carrying_async(conn, &self.keys, &self.token, carry, self.next())
                .await
                .ok(),
        };
        self.record(conn.target.metrics(), released, false);
        let (value, _, _) = outcome?;
        Ok((value, released))
    }
}

/// [`super::release_carrying`] on `conn`.
async fn release_carrying_async(
    conn: &mut AsyncConn,
    keys: &LockKeys,
    token: &Token,
    carry: Option<&str>,
    next: Option<&str>,
) -> Result<Release> {
    let inv = release_call(keys, token, carry, next);
    let (code, notify): (i64, String) = conn.script(&inv).await?;
    notify_grantee_async(conn, keys, &notify, carry).await;
    Ok(release_code(code))
}

/// [`super::notify_grantee`] on `conn`: best effort.
async fn notify_grantee_async(
    conn: &mut AsyncConn,
    keys: &LockKeys,
    token: &str,
    carry: Option<&str>,
) {
    if let Some(inv) = notify_call(keys, token, carry) {
        let _: Result<i64> = conn.script(&inv).await;
    }
}
