//! A lease-based Redis lock, compatible with the tutorial's PHP `DistributedLock`.
//!
//! The lock is the key `dist_lock:<name>` holding its owner's token (32 hex characters from 16
//! random bytes), set with `NX` and `PX`, exactly as the tutorial does, so a lock taken by the PHP
//! client and one taken here exclude each other. What makes it correct is that nothing but the
//! owner ever touches a held lock: release and renewal are scripts that compare the token and act
//! in one atomic step, and Redis runs one script at a time.
//!
//! Beyond the tutorial, every grant also takes the next number from `dist_lock_fence:<name>` in the
//! same script (a fencing token: a store downstream can refuse writes carrying an older number),
//! the release says whether the lease had already run out, and an optional watchdog renews the
//! lease while the owner lives. This module knows nothing of stock.
//!
//! Layout: the scripts in `scripts`, the acquire loop and what a grant carries in `wait`, the
//! [`Guard`] in `guard`, the watchdog and the expiry poker in `watchdog`.

mod guard;
mod lease;
#[cfg(feature = "tokio")]
mod native;
mod registry;
mod scripts;
mod wait;
mod watchdog;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::Script;

pub use guard::Guard;
use guard::release_code;
pub(crate) use lease::Lease;
pub use scripts::WAITER_LEASE;
pub(crate) use scripts::releasing;
use scripts::{FORCE, HEALTH, NOTIFY, RELEASE, WAITERS};
pub use wait::Carried;
use wait::Grant;
use watchdog::{ExpiryPoker, Watchdog};

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::metrics::AcquireResult;
use crate::redlock::Quorum;

/// How a lock is taken and held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease length: the lock frees itself this long after the last grant or renewal.
    /// Default: 5000 ms, as in the tutorial's demo.
    pub ttl: Duration,
    /// How long to keep trying when the lock is held. Default: zero, one try, as in the tutorial.
    pub wait: Duration,
    /// Renew the lease every TTL/3 while the guard lives. Default: off.
    pub watchdog: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_millis(5000),
            wait: Duration::ZERO,
            watchdog: false,
        }
    }
}

impl LockOptions {
    /// Options that suit a service: a lease of 5 s and a wait of 5 s in the lock's FIFO queue,
    /// so that concurrent callers take turns instead of being turned away at the first try
    /// (the default waits zero, one try, as the tutorial does: a service on it answers most
    /// buyers busy under load). No watchdog: switch it on ([`Lock::with_watchdog`], or
    /// [`crate::aio::using`], which does) for work that may outlast the lease.
    pub fn for_service() -> LockOptions {
        LockOptions {
            wait: Duration::from_secs(5),
            ..LockOptions::default()
        }
    }
}

/// A holder's token: 32 lowercase hex characters from 16 random bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Token(pub(crate) String);

impl Token {
    /// A fresh token from the thread-local cryptographic generator.
    pub fn random() -> Token {
        Token(hex::encode(rand::random::<[u8; 16]>()))
    }

    /// The token, as stored in the lock key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl LockKeys {
    /// The seven keys every queue-aware script takes first, in order (see `LOCK_PRELUDE`).
    pub(crate) fn queue_keys(&self) -> [&str; 7] {
        [
            &self.lock,
            &self.fence,
            &self.queue,
            &self.deadlines,
            &self.grant,
            &self.head_wake,
            &self.head_listener,
        ]
    }

    /// The wake list of the waiter holding `token`: the list it blocks on.
    pub(crate) fn wake_of(&self, token: &str) -> String {
        format!("{}{token}", self.wake_prefix)
    }

    /// The wake list declared when the caller expects no waiter at the head: a name in the
    /// lock's slot that no token matches (tokens are hex), so no grant writes to it.
    pub(crate) fn no_wake(&self) -> String {
        format!("{}-", self.wake_prefix)
    }

    /// The wake list a release declares: that of `next`, the waiter the holder's grant said
    /// was at the head of the queue, if any.
    pub(crate) fn hinted_wake(&self, next: Option<&str>) -> String {
        match next {
            Some(t) if !t.is_empty() => self.wake_of(t),
            _ => self.no_wake(),
        }
    }

    /// The arguments every queue-aware script takes, in order: token, TTL ms, '1' to queue,
    /// the waiter lease in ms, the wake prefix (see the scripts' comments).
    pub(crate) fn queue_argv(&self, token: &str, ttl_ms: u64, queue: bool) -> [String; 5] {
        [
            token.to_string(),
            ttl_ms.to_string(),
            if queue { "1" } else { "0" }.to_string(),
            WAITER_LEASE.as_millis().to_string(),
            self.wake_prefix.clone(),
        ]
    }

    /// A call of a queue script that grants nobody (the escape hatch, the health and waiter
    /// counts): no token, no wake list of anyone's.
    fn inspection<'a>(&self, script: &'a Script) -> redis::ScriptInvocation<'a> {
        self.invocation(script, "", 0, false, &self.no_wake(), None)
    }

    /// A queue-aware script call: the seven keys, the declared wake list `wake`, the key a grant
    /// carries (if any), then the standard arguments.
    fn invocation<'a>(
        &self,
        script: &'a Script,
        token: &str,
        ttl_ms: u64,
        queue: bool,
        wake: &str,
        carry: Option<&str>,
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        for k in self.queue_keys() {
            inv.key(k);
        }
        inv.key(wake);
        if let Some(c) = carry {
            inv.key(c);
        }
        inv.arg(&self.queue_argv(token, ttl_ms, queue));
        inv
    }
}

/// The result of asking for the lock.
#[derive(Debug)]
pub enum Acquire {
    /// The lock is ours until the guard is released or the lease runs out.
    Acquired(Guard),
    /// Someone else held it for the whole wait.
    Busy,
}

/// What releasing found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// We still held it, and now nobody does.
    Released,
    /// Someone else holds it: our lease ran out and was taken over. Left in place.
    NotOwner,
    /// Nobody holds it: our lease ran out.
    Expired,
}

/// What a fenced write ([`Guard::fenced`]) did.
#[derive(Clone, Debug, PartialEq)]
pub enum Fenced<T> {
    /// The lock still held the holder's token: the command ran, and this is its reply.
    Written(T),
    /// The lock no longer held the holder's token (the lease ran out, another holder took
    /// it): the command did not run.
    LeaseLost,
}

/// Runs `cmd` only while the lock `keys` names holds `token` (see [`Guard::fenced`]).
pub(crate) fn fenced_write(
    conn: &mut Conn,
    keys: &LockKeys,
    token: &str,
    cmd: &redis::Cmd,
) -> Result<Fenced<redis::Value>> {
    let mut inv = scripts::FENCED_WRITE.key(&keys.lock);
    inv.arg(token);
    for arg in cmd.args_iter() {
        // A cursor argument (SCAN's) has no place in a write: it goes as 0.
        match arg {
            redis::Arg::Simple(bytes) => inv.arg(bytes),
            _ => inv.arg(0),
        };
    }
    let reply: Vec<redis::Value> = conn.script(&inv)?;
    Ok(match reply.as_slice() {
        [redis::Value::Int(1)] => Fenced::Written(redis::Value::Nil),
        [redis::Value::Int(1), value] => Fenced::Written(value.clone()),
        _ => Fenced::LeaseLost,
    })
}

/// Who holds a lock, as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    /// The holder's token (the lock key's value).
    pub token: String,
    /// The lease left.
    pub ttl: Duration,
    /// The fencing token of this grant, when lockctl made it.
    pub fence: Option<u64>,
    /// How long this holder has held the lock, when lockctl made the grant.
    pub held_for: Option<Duration>,
}

/// What a forced unlock removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    /// The token that held the lock (or what the key held instead), if anything did.
    pub holder: Option<String>,
    /// Queued waiters removed (live ones queue again on their next refresh).
    pub waiters: u64,
    /// Queue entries that were not lockctl's, removed.
    pub damaged: u64,
}

/// The queue as `status` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueHealth {
    /// Waiters whose place is current.
    pub live: u64,
    /// Entries lockctl did not write (unparsable, or with no deadline).
    pub damaged: u64,
    /// The queue's keys hold something other than sorted sets.
    pub wrong_type: bool,
}

/// A named lock on one Redis server.
#[derive(Clone, Debug)]
pub struct Lock {
    keys: Arc<LockKeys>,
    options: LockOptions,
    target: Target,
    /// Started the first time a waiter needs it; shared by every clone of this lock.
    expiry_poker: Arc<OnceLock<Option<ExpiryPoker>>>,
    /// Redlock's voting masters, when the lock is taken by quorum.
    quorum: Option<Arc<Quorum>>,
    /// The key every grant carries to its new holder (see [`Lock::carrying`]).
    carry: Option<Arc<str>>,
}

impl Lock {
    /// The lock `dist_lock:<name>` on `target` (the watchdog opens its own connection there).
    pub fn new(target: &Target, name: &str, options: LockOptions) -> Lock {
        Lock {
            keys: Arc::new(LockKeys::new(name)),
            options,
            target: target.clone(),
            expiry_poker: Arc::new(OnceLock::new()),
            quorum: None,
            carry: None,
        }
    }

    /// Has every grant of this lock carry the value of `key` to its new holder, read by the
    /// script that makes the grant ([`Guard::carried`]): the holder's first read costs no
    /// round trip of its own. `key` must be in the lock's cluster slot.
    pub fn carrying(mut self, key: &str) -> Lock {
        self.carry = Some(Arc::from(key));
        self
    }

    /// Takes the lock by Redlock quorum on `quorum`'s masters (and on `target`, the data node).
    pub fn with_quorum(mut self, quorum: Arc<Quorum>) -> Lock {
        self.quorum = Some(quorum);
        self
    }

    /// The same lock, its lease renewed by a watchdog while it is held.
    pub fn with_watchdog(mut self) -> Lock {
        self.options.watchdog = true;
        self
    }

    /// Where the lock lives.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The lock's keys.
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// The options it was made with.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Takes the lock, waiting up to `wait` in the lock's FIFO queue.
    ///
    /// A waiter does not poll: it blocks on its own wake list, and the holder's release hands
    /// the lock straight to the oldest live waiter and wakes it, so a released lock changes
    /// hands in about one round trip. A waiter also wakes when the holder's lease is due to run
    /// out (a holder that died never releases) and to refresh its place in the queue.
    ///
    /// If a call fails in a way that may have been applied (a timeout), the waiter leaves the
    /// queue and releases the lock by token, best effort, and the error is returned: the lock
    /// is never considered held after an error.
    pub fn acquire(&self, conn: &mut Conn) -> Result<Acquire> {
        self.acquire_since(conn, Instant::now())
    }

    /// [`Lock::acquire`] for a caller that began waiting at `started`, before this call (in a
    /// queue of its own, say): the wait is counted from then, so what is left of it is spent
    /// here, and [`Guard::waited`] counts from then. A wait already spent still makes one try.
    pub fn acquire_since(&self, conn: &mut Conn, started: Instant) -> Result<Acquire> {
        self.acquire_unless(conn, started, &AtomicBool::new(false))
    }

    /// [`Lock::acquire_since`] for a caller that may stop wanting the lock while it waits:
    /// once `give_up` is set (by another thread: a dropped async call, say), the waiter leaves
    /// the queue at its next wake-up, within a third of a second, and is answered busy (or
    /// given the lock, if it was granted meanwhile: the caller then releases it).
    pub fn acquire_unless(
        &self,
        conn: &mut Conn,
        started: Instant,
        give_up: &AtomicBool,
    ) -> Result<Acquire> {
        let token = Token::random();
        let registration = registry::register(
            &self.target,
            &self.keys,
            &token,
            self.options.ttl,
            self.quorum.clone(),
        )?;
        let outcome = match &self.quorum {
            None => self
                .wait_for_grant(conn, &token, started, give_up)
                .map(|g| g.map(|g| (g, None))),
            Some(q) => self.wait_for_quorum(conn, q, &token, started, give_up),
        };
        let result = match outcome {
            Ok(Some(_)) => AcquireResult::Acquired,
            Ok(None) => AcquireResult::Busy,
            Err(_) => AcquireResult::Error,
        };
        if let Some(m) = conn.metrics() {
            m.observe_wait(started.elapsed(), result);
        }
        let (grant, quorum_until) = match outcome {
            Ok(Some(granted)) => granted,
            Ok(None) => return Ok(Acquire::Busy),
            Err(e) => return Err(self.named(conn, e)),
        };
        let mut guard = self.guard_of(token, grant, started, quorum_until, registration);
        if self.options.watchdog {
            match Watchdog::start(&self.target, guard.renewal()) {
                Ok(w) => guard.watchdog = Some(w),
                Err(e) => {
                    let _ = guard.release(conn);
                    return Err(e);
                }
            }
        }
        Ok(Acquire::Acquired(guard))
    }

    /// The guard of `grant`, made to `token` for a wait that began at `started` (its
    /// watchdog, if any, is for the caller to start).
    fn guard_of(
        &self,
        token: Token,
        grant: Grant,
        started: Instant,
        quorum_until: Option<Instant>,
        registration: Option<crate::conn::Held>,
    ) -> Guard {
        let acquired_at = Instant::now();
        let ttl = self.options.ttl;
        Guard {
            keys: self.keys.clone(),
            token,
            fence: grant.fence,
            ttl,
            waited: acquired_at - started,
            acquired_at,
            watchdog: None,
            quorum: self.quorum.clone().zip(quorum_until),
            lease: Arc::new(Lease::new(grant.lease_from, ttl, quorum_until)),
            carry: self.carry.clone(),
            told: (grant.carried.is_some() || grant.next.is_some()).then(|| {
                Box::new(guard::Told {
                    carried: grant.carried,
                    next: grant.next,
                })
            }),
            _registration: registration.map(Box::new),
        }
    }

    /// A bare WRONGTYPE (from a script, or inside a MULTI), which names no key, as the lock
    /// key that is damaged.
    fn named(&self, conn: &mut Conn, e: Error) -> Error {
        if !is_wrong_type(&e) {
            return e;
        }
        for (key, want) in self.key_types() {
            let found: Result<String> = conn.query(redis::cmd("TYPE").arg(key));
            if let Some(damaged) = self.damaged(key, found, want) {
                return damaged;
            }
        }
        e
    }

    /// The lock's keys a WRONGTYPE may come from, and the type each should have. (The
    /// fencing counter is left out: its script names it, and says how to mend it without
    /// letting fences go backwards.)
    fn key_types(&self) -> [(&str, &'static str); 6] {
        let k = &self.keys;
        [
            (&k.lock, "string"),
            (&k.grant, "string"),
            (&k.queue, "zset"),
            (&k.deadlines, "zset"),
            (&k.head_wake, "list"),
            (&k.head_listener, "string"),
        ]
    }

    /// The damaged-lock error when `key`'s TYPE, `found`, is neither none nor `want`.
    fn damaged(&self, key: &str, found: Result<String>, want: &'static str) -> Option<Error> {
        let found = found.ok().filter(|f| f != "none" && f != want)?;
        let name = self
            .keys
            .lock
            .strip_prefix("dist_lock:")
            .unwrap_or(&self.keys.lock);
        Some(Error::DamagedLock {
            name: name.to_string(),
            key: key.to_string(),
            found,
            expected: want,
        })
    }

    /// Who holds the lock now and for how much longer: `(token, remaining TTL)`.
    pub fn holder(&self, conn: &mut Conn) -> Result<Option<(String, Duration)>> {
        let ((token, pttl), _): ((Option<String>, i64), _) = conn.transaction(
            &[
                redis::Cmd::get(&self.keys.lock),
                redis::cmd("PTTL").arg(&self.keys.lock).clone(),
            ],
            None,
        )?;
        Ok(token.map(|t| (t, Duration::from_millis(pttl.max(0) as u64))))
    }

    /// Who holds the lock, for how much longer, and (when the grant was made by lockctl) with
    /// which fence and since when: `status` for a SKU or a `lockctl run` job.
    pub fn holder_info(&self, conn: &mut Conn) -> Result<Option<HolderInfo>> {
        type Read = (Option<String>, i64, Option<String>, (i64, i64));
        let read: Result<(Read, _)> = conn.transaction(
            &[
                redis::Cmd::get(&self.keys.lock),
                redis::cmd("PTTL").arg(&self.keys.lock).clone(),
                redis::Cmd::get(&self.keys.grant),
                redis::cmd("TIME"),
            ],
            None,
        );
        let ((token, pttl, grant, (secs, micros)), _) = read.map_err(|e| self.named(conn, e))?;
        let Some(token) = token else {
            return Ok(None);
        };
        let now_ms = secs * 1000 + micros / 1000;
        // `<token>:<fence>:<ms>`: only if it describes the grant the holder has now.
        let grant = grant.and_then(|g| {
            let mut parts = g.rsplitn(3, ':');
            let (ms, fence, t) = (parts.next()?, parts.next()?, parts.next()?);
            (t == token).then_some((fence.parse::<u64>().ok()?, ms.parse::<i64>().ok()?))
        });
        Ok(Some(HolderInfo {
            token,
            ttl: Duration::from_millis(pttl.max(0) as u64),
            fence: grant.map(|(f, _)| f),
            held_for: grant.map(|(_, at)| Duration::from_millis((now_ms - at).max(0) as u64)),
        }))
    }

    /// Deletes the lock whoever holds it (a holder that is stuck, not one that is working: its
    /// writes are no longer excluded) and empties the queue, dropping damaged entries too. The
    /// lock is handed to nobody: live waiters queue again on their next refresh.
    pub fn force_unlock(&self, conn: &mut Conn) -> Result<Forced> {
        let (holder, waiters, damaged): (String, u64, u64) =
            conn.script(&self.keys.inspection(&FORCE))?;
        // The last grant's record is only read for `status`: one of another type goes too.
        let grant: String = conn.query(redis::cmd("TYPE").arg(&self.keys.grant))?;
        if grant != "none" && grant != "string" {
            let _: u64 = conn.query(redis::cmd("DEL").arg(&self.keys.grant))?;
        }
        Ok(Forced {
            holder: (!holder.is_empty()).then_some(holder),
            waiters,
            damaged,
        })
    }

    /// The queue's health: live waiters, and entries lockctl did not write.
    pub fn queue_health(&self, conn: &mut Conn) -> Result<QueueHealth> {
        let (live, damaged): (u64, i64) = conn.script(&self.keys.inspection(&HEALTH))?;
        Ok(QueueHealth {
            live,
            damaged: damaged.max(0) as u64,
            wrong_type: damaged < 0,
        })
    }

    /// Releases the lock only if `token` still holds it: the safe form of the escape hatch.
    pub fn release_by_token(&self, conn: &mut Conn, token: &str) -> Result<Release> {
        release_token(conn, &self.keys, &Token(token.to_string()))
    }

    /// The current value of the fencing counter (the last grant's fencing token).
    pub fn last_fence(&self, conn: &mut Conn) -> Result<u64> {
        let v: Option<u64> = conn.query(redis::cmd("GET").arg(&self.keys.fence))?;
        Ok(v.unwrap_or(0))
    }

    /// Clients waiting in the queue right now (live entries only): the wait-queue length.
    pub fn waiters(&self, conn: &mut Conn) -> Result<u64> {
        conn.script(&self.keys.inspection(&WAITERS))
    }
}

/// Whether `e` is a bare WRONGTYPE (from a script, or inside a MULTI), which names no key.
fn is_wrong_type(e: &Error) -> bool {
    matches!(e, Error::Redis { code: Some(c), .. } if c == "WRONGTYPE")
        || e.to_string().contains("WRONGTYPE")
}

pub(crate) fn release_token(conn: &mut Conn, keys: &LockKeys, token: &Token) -> Result<Release> {
    release_carrying(conn, keys, token, None, None)
}

/// Releases by token, the hand-off carrying `carry`'s value to the next holder, declaring the
/// wake list of `next` (the waiter expected at the head); wakes the one it went to if that
/// was another.
fn release_carrying(
    conn: &mut Conn,
    keys: &LockKeys,
    token: &Token,
    carry: Option<&str>,
    next: Option<&str>,
) -> Result<Release> {
    let (code, notify): (i64, String) = conn.script(&release_call(keys, token, carry, next))?;
    notify_grantee(conn, keys, &notify, carry);
    Ok(release_code(code))
}

/// The release script's call of [`release_carrying`], for either transport.
fn release_call(
    keys: &LockKeys,
    token: &Token,
    carry: Option<&str>,
    next: Option<&str>,
) -> redis::ScriptInvocation<'static> {
    let wake = keys.hinted_wake(next);
    keys.invocation(&RELEASE, token.as_str(), 0, false, &wake, carry)
}

/// The notify script's call of [`notify_grantee`] for a grant to `token`, for either
/// transport: `None` when `token` is empty (nobody to wake).
fn notify_call(
    keys: &LockKeys,
    token: &str,
    carry: Option<&str>,
) -> Option<redis::ScriptInvocation<'static>> {
    if token.is_empty() {
        return None;
    }
    let wake = keys.wake_of(token);
    Some(keys.invocation(&NOTIFY, token, 0, false, &wake, carry))
}

/// Pushes the wake message of a grant made to `token` by a script that could not declare its
/// wake list (nothing when `token` is empty). Best effort: a waiter whose message never comes
/// finds the lock its own at its next refresh, a third of a second later at most.
pub(crate) fn notify_grantee(conn: &mut Conn, keys: &LockKeys, token: &str, carry: Option<&str>) {
    if let Some(inv) = notify_call(keys, token, carry) {
        let _: Result<i64> = conn.script(&inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_chars_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
