//! A lease-based Redis lock, compatible with the seed's PHP `DistributedLock`.
//!
//! The lock is the key `dist_lock:<name>` holding its owner's token (32 hex characters from 16
//! random bytes), set with `NX` and `PX`, exactly as the seed does, so a lock taken by the PHP
//! client and one taken here exclude each other. What makes it correct is that nothing but the
//! owner ever touches a held lock: release and renewal are scripts that compare the token and act
//! in one atomic step, and Redis runs one script at a time.
//!
//! Beyond the seed, every grant also takes the next number from `dist_lock_fence:<name>` in the
//! same script (a fencing token: a store downstream can refuse writes carrying an older number),
//! the release says whether the lease had already run out, and an optional watchdog renews the
//! lease while the owner lives. This module knows nothing of stock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::Script;

use crate::conn::{Conn, Target};
use crate::error::Result;

/// Takes the lock and, in the same atomic step, the next fencing token.
/// KEYS: 1 lock, 2 fence counter. ARGV: 1 token, 2 TTL in ms.
/// Returns the fencing token (an integer), or nil when the lock is held.
const ACQUIRE_LUA: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
";

/// Deletes the lock only if it still holds this token (the seed's compare-and-delete, which
/// also tells the two ways of not owning it apart).
/// KEYS: 1 lock. ARGV: 1 token.
/// Returns 1 released, 0 held by another token, -1 no lock at all (the lease ran out).
const RELEASE_LUA: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if holder then return 0 end
return -1
";

/// Extends the lease only if the lock still holds this token.
/// KEYS: 1 lock. ARGV: 1 token, 2 TTL in ms. Returns 1 renewed, 0 not the owner any more.
const RENEW_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// How a lock is taken and held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease length: the lock frees itself this long after the last grant or renewal.
    /// Default: 5000 ms, as in the seed's demo.
    pub ttl: Duration,
    /// How long to keep trying when the lock is held. Default: zero, one try, as in the seed.
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

/// A holder's token: 32 lowercase hex characters from 16 random bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// A fresh token from the thread-local cryptographic generator.
    pub fn random() -> Token {
        Token(hex::encode(rand::random::<[u8; 16]>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The keys of one lock.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// `dist_lock:<name>`: the lock itself, as in the seed.
    pub lock: String,
    /// `dist_lock_fence:<name>`: the fencing counter, one INCR per grant.
    pub fence: String,
}

impl LockKeys {
    pub fn new(name: &str) -> LockKeys {
        LockKeys {
            lock: format!("dist_lock:{name}"),
            fence: format!("dist_lock_fence:{name}"),
        }
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

/// A named lock on one Redis server.
#[derive(Clone, Debug)]
pub struct Lock {
    keys: LockKeys,
    options: LockOptions,
    target: Target,
}

impl Lock {
    /// The lock `dist_lock:<name>` on `target` (the watchdog opens its own connection there).
    pub fn new(target: &Target, name: &str, options: LockOptions) -> Lock {
        Lock {
            keys: LockKeys::new(name),
            options,
            target: target.clone(),
        }
    }

    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Tries to take the lock, retrying until `wait` has passed.
    ///
    /// If the acquire call fails in a way that may have been applied (a timeout), the lock is
    /// released by token, best effort, and the error returned: it is never considered held.
    pub fn acquire(&self, conn: &mut Conn) -> Result<Acquire> {
        let started = Instant::now();
        let token = Token::random();
        let script = Script::new(ACQUIRE_LUA);
        let ttl_ms = self.options.ttl.as_millis() as u64;
        loop {
            let attempt = conn.script::<Option<u64>>(
                script
                    .key(&self.keys.lock)
                    .key(&self.keys.fence)
                    .arg(token.as_str())
                    .arg(ttl_ms),
            );
            let fence = match attempt {
                Ok(fence) => fence,
                Err(e) => {
                    if e.is_indeterminate() {
                        let _ = release_token(conn, &self.keys.lock, &token);
                    }
                    return Err(e);
                }
            };
            if let Some(fence) = fence {
                let acquired_at = Instant::now();
                let mut guard = Guard {
                    key: self.keys.lock.clone(),
                    token,
                    fence,
                    ttl: self.options.ttl,
                    waited: acquired_at - started,
                    acquired_at,
                    watchdog: None,
                };
                if self.options.watchdog {
                    match Watchdog::start(&self.target, &guard) {
                        Ok(w) => guard.watchdog = Some(w),
                        Err(e) => {
                            let _ = guard.release(conn);
                            return Err(e);
                        }
                    }
                }
                return Ok(Acquire::Acquired(guard));
            }
            let left = self.options.wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(Acquire::Busy);
            }
            // Jitter keeps many waiters from retrying in lockstep.
            let pause = Duration::from_micros(rand::random_range(500..5_000));
            thread::sleep(pause.min(left));
        }
    }

    /// Who holds the lock now and for how much longer: `(token, remaining TTL)`.
    pub fn holder(&self, conn: &mut Conn) -> Result<Option<(String, Duration)>> {
        let (token, pttl): (Option<String>, i64) = conn.pipe(
            redis::pipe()
                .get(&self.keys.lock)
                .cmd("PTTL")
                .arg(&self.keys.lock),
        )?;
        Ok(token.map(|t| (t, Duration::from_millis(pttl.max(0) as u64))))
    }
}

fn release_token(conn: &mut Conn, key: &str, token: &Token) -> Result<Release> {
    let code: i64 = conn.script(Script::new(RELEASE_LUA).key(key).arg(token.as_str()))?;
    Ok(match code {
        1 => Release::Released,
        0 => Release::NotOwner,
        _ => Release::Expired,
    })
}

/// Proof of holding the lock. Release it with [`Guard::release`]; a guard that is dropped
/// instead stops its watchdog and leaves the lock to expire by its TTL.
#[derive(Debug)]
pub struct Guard {
    key: String,
    token: Token,
    fence: u64,
    ttl: Duration,
    waited: Duration,
    acquired_at: Instant,
    watchdog: Option<Watchdog>,
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
        self.watchdog
            .as_ref()
            .is_some_and(|w| w.lost.load(Ordering::SeqCst))
    }

    /// Renewals the watchdog has made so far.
    pub fn renewals(&self) -> u64 {
        self.watchdog
            .as_ref()
            .map_or(0, |w| w.renewals.load(Ordering::Relaxed))
    }

    /// Stops the watchdog (waiting for any renewal in flight, so none can follow), then deletes
    /// the lock if it still holds this token.
    pub fn release(mut self, conn: &mut Conn) -> Result<Release> {
        if let Some(mut w) = self.watchdog.take() {
            w.stop();
        }
        release_token(conn, &self.key, &self.token)
    }
}

/// The lease renewer: a thread with its own connection that extends the lease every TTL/3.
///
/// TTL/3 (Redisson's choice) leaves two more renewals' worth of slack before the lease runs
/// out, so one slow or lost renewal does not lose the lock; any renewal that fails or finds
/// another token marks the lease lost at once, and the thread ends.
#[derive(Debug)]
struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    lost: Arc<AtomicBool>,
    renewals: Arc<AtomicU64>,
}

impl Watchdog {
    fn start(target: &Target, guard: &Guard) -> Result<Watchdog> {
        let period = guard.ttl / 3;
        let mut conn = target.connect()?;
        // A renewal that cannot finish within one period is as good as failed.
        conn.set_call_timeout(period.min(target.options().call_timeout))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let lost = Arc::new(AtomicBool::new(false));
        let renewals = Arc::new(AtomicU64::new(0));
        let (key, token, ttl_ms) = (
            guard.key.clone(),
            guard.token.clone(),
            guard.ttl.as_millis() as u64,
        );
        let (lost_w, renewals_w) = (lost.clone(), renewals.clone());
        let thread = thread::Builder::new()
            .name("lockctl-watchdog".into())
            .spawn(move || {
                let script = Script::new(RENEW_LUA);
                // Any message or a dropped sender means the guard is done with us.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let renewed = conn
                        .script::<i64>(script.key(&key).arg(token.as_str()).arg(ttl_ms))
                        .unwrap_or(0);
                    if renewed != 1 {
                        lost_w.store(true, Ordering::SeqCst);
                        return;
                    }
                    renewals_w.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| crate::error::Error::Redis {
                addr: target.addr().to_string(),
                reason: format!("could not start the watchdog thread: {e}"),
                code: None,
                indeterminate: false,
            })?;
        Ok(Watchdog {
            stop: Some(stop),
            thread: Some(thread),
            lost,
            renewals,
        })
    }

    fn stop(&mut self) {
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

    #[test]
    fn lock_keys_follow_the_seed() {
        let k = LockKeys::new("sku_886");
        assert_eq!(k.lock, "dist_lock:sku_886");
        assert_eq!(k.fence, "dist_lock_fence:sku_886");
    }
}
