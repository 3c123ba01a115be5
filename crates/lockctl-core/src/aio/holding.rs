//! A lock held while an async body runs ([`using`], [`AsyncLock`]): the watchdog renews the
//! lease, and the body is told by [`LeaseLoss`] when a renewal fails.

use super::*;

/// What a body run under [`using`] is given: the fencing token of its grant, and the signal
/// that its lease may be gone.
pub struct Held {
    /// The grant's fencing token: a write that carries it can be refused once a later holder
    /// has written (see the fenced strategy).
    pub fence: u64,
    /// The holder's token (the lock key's value).
    pub token: String,
    /// Fires when a renewal fails, or when the lease's time is up by this process's clock.
    pub lost: LeaseLoss,
    keys: Arc<LockKeys>,
    pool: Pool,
}

impl Held {
    /// Runs the body's own Redis command only while the lock still holds this holder's token,
    /// in one script with the check (as [`Guard::fenced`], on the blocking pool):
    /// [`Fenced::LeaseLost`], nothing written, once the lease ran out or another holder took
    /// the lock, however long the task or the process stalled before the write reached Redis.
    /// [`LeaseLoss`] tells the body when to stop; this makes a write that is already on its
    /// way safe. Dropped before it was sent, it writes nothing; once sent, it runs or not as
    /// the script decides.
    pub async fn fenced(&self, cmd: &redis::Cmd) -> Result<Fenced<redis::Value>> {
        let (pool, keys, token, cmd) = (
            self.pool.clone(),
            self.keys.clone(),
            self.token.clone(),
            cmd.clone(),
        );
        blocking(move || pool.with(|c| fenced_write(c, &keys, &token, &cmd))).await
    }
}

/// Says when the lease may be gone, so the body must stop writing: a renewal failed, or the
/// lease's time is up by this process's own clock (less a tenth of the lease). It fires before
/// the lease can have run out while the process runs; and a process that was paused (SIGSTOP,
/// a long stall) past its lease finds out from [`LeaseLoss::is_lost`] the moment it resumes,
/// because the clock is read on every call, not only by the watcher that renews.
#[derive(Clone)]
pub struct LeaseLoss {
    fired: watch::Receiver<bool>,
    lease: Arc<Lease>,
    margin: Duration,
}

impl LeaseLoss {
    /// Whether the lease may be gone: a renewal failed, or its time is up by the clock, now.
    pub fn is_lost(&self) -> bool {
        *self.fired.borrow() || lapsed(&self.lease, self.margin)
    }

    /// Waits until the lease may be gone (forever, if it holds).
    pub async fn lost(&mut self) {
        if self.is_lost() {
            return;
        }
        let _ = self.fired.wait_for(|lost| *lost).await;
    }
}

/// The lease was lost by a renewal, or has less than `margin` left by this process's clock.
fn lapsed(lease: &Lease, margin: Duration) -> bool {
    lease.is_lost() || lease.remaining() <= margin
}

/// A held lock that is given back when dropped unreleased: when the future that held it was
/// cancelled (a timeout, a `select!`, a runtime shut down). The release then runs on a thread
/// of its own, since a drop may happen on a runtime thread that must not block; without one,
/// the lock would stay taken for the rest of its lease, and for ever under a watchdog.
struct Holding {
    guard: Option<Guard>,
    pool: Pool,
}

impl Holding {
    fn guard(&self) -> &Guard {
        self.guard
            .as_ref()
            .expect("a holding holds its guard until taken")
    }

    /// The guard, now the caller's to release.
    fn into_guard(mut self) -> Guard {
        self.guard
            .take()
            .expect("a holding holds its guard until taken")
    }

    /// Releases the lock (on this thread: call it on the blocking pool).
    fn release(mut self) -> Result<Release> {
        let guard = self
            .guard
            .take()
            .expect("a holding holds its guard until taken");
        self.pool.with(|c| guard.release(c))
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let pool = self.pool.clone();
        // If no thread can be started, the guard is dropped here: its watchdog stops and the
        // lock runs out with its lease.
        let _ = std::thread::Builder::new()
            .name("lockctl-release".into())
            .spawn(move || pool.with(|c| guard.release(c)));
    }
}

/// Set when the async call that owns it ends, whether it finished or was dropped: the blocking
/// wait for the lock reads it and gives up.
struct GiveUpOnDrop(Arc<AtomicBool>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A task aborted when this handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A lock for async code: [`Lock::acquire`] and [`Guard::release`] on tokio's blocking pool,
/// on connections kept between calls. The wait for the lock is the lock's FIFO queue, as
/// [`Lock::acquire`] describes; the lease is renewed by the watchdog when the lock's options
/// ask for it ([`Lock::with_watchdog`]), or around a body by [`using`].
///
/// Every call is safe to drop at any point: an `acquire` dropped while it waits leaves the
/// queue within a third of a second, and one dropped after the grant gives the lock back; a
/// `release` that was started finishes.
///
/// ```no_run
#[doc = include_str!("../../doc-examples/async_lock.rs")]
/// ```
#[derive(Clone)]
pub struct AsyncLock {
    lock: Arc<Lock>,
    pool: Pool,
}

impl AsyncLock {
    /// The async form of `lock`.
    pub fn new(lock: Lock) -> AsyncLock {
        let pool = Pool::new(lock.target());
        AsyncLock {
            lock: Arc::new(lock),
            pool,
        }
    }

    /// The lock it takes.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Takes the lock, waiting in its FIFO queue as long as its options say: the guard, or
    /// `None` when someone else held it for the whole wait. As [`Lock::acquire`].
    pub async fn acquire(&self) -> Result<Option<Guard>> {
        Ok(self.acquire_holding().await?.map(Holding::into_guard))
    }

    /// [`AsyncLock::acquire`], the grant held so that it is given back if the caller drops it.
    async fn acquire_holding(&self) -> Result<Option<Holding>> {
        let (lock, pool) = (self.lock.clone(), self.pool.clone());
        let give_up = Arc::new(AtomicBool::new(false));
        let _dropped = GiveUpOnDrop(give_up.clone());
        blocking(move || {
            let acquired = pool.with(|c| lock.acquire_unless(c, Instant::now(), &give_up))?;
            // Held from here: if the caller is gone by now, dropping the answer releases it.
            Ok(match acquired {
                Acquire::Acquired(guard) => Some(Holding {
                    guard: Some(guard),
                    pool: pool.clone(),
                }),
                Acquire::Busy => None,
            })
        })
        .await
    }

    /// Releases `guard`'s hold on the lock and hands it to the next waiter: what the release
    /// found, as [`Guard::release`].
    pub async fn release(&self, guard: Guard) -> Result<Release> {
        self.release_holding(Holding {
            guard: Some(guard),
            pool: self.pool.clone(),
        })
        .await
    }

    /// Releases on the blocking pool; a release the pool never runs (a runtime shut down
    /// first) still happens, on a thread of its own, when the dropped closure drops `held`.
    async fn release_holding(&self, held: Holding) -> Result<Release> {
        blocking(move || held.release()).await
    }
}

/// Holds `lock` while `body` runs: waits for it (as the lock's options say), renews the lease
/// all the while (the watchdog is switched on for this), hands the body the fencing token and
/// the lease-loss signal, and releases the lock when the body ends. `Ok(None)` when the lock
/// stayed busy for the whole wait; `Ok(Some((value, release)))` otherwise, with what the
/// release found ([`Release::Released`] unless the lease was lost meanwhile).
///
/// Cancellation-safe: a `using` future dropped at any point (a `tokio::time::timeout` around
/// it, a request handler cancelled, a runtime shut down) stops renewing and gives the lock
/// back at once, on a thread of its own; dropped while it waits, it leaves the queue.
///
/// ```no_run
#[doc = include_str!("../../doc-examples/using.rs")]
/// ```
pub async fn using<T, F, Fut>(lock: Lock, body: F) -> Result<Option<(T, Release)>>
where
    F: FnOnce(Held) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let lock = AsyncLock::new(lock.with_watchdog());
    let Some(holding) = lock.acquire_holding().await? else {
        return Ok(None);
    };
    let guard = holding.guard();
    // Given up a tenth of a lease before it would run out by this process's clock.
    let (lease, margin) = (guard.lease(), guard.ttl() / 10);
    let every = (guard.ttl() / 20).max(Duration::from_millis(5));
    let (tx, rx) = watch::channel(false);
    let held = Held {
        fence: guard.fence(),
        token: guard.token().to_string(),
        lost: LeaseLoss {
            fired: rx,
            lease: lease.clone(),
            margin,
        },
        keys: guard.shared_keys(),
        pool: lock.pool.clone(),
    };
    // Wakes a body waiting on `lost()`: looks every twentieth of the lease, so the signal
    // fires before the lease can have run out. It holds the lease's clock, never the guard,
    // and is aborted with this future.
    let _watcher = AbortOnDrop(tokio::spawn(async move {
        loop {
            if lapsed(&lease, margin) {
                let _ = tx.send(true);
                return;
            }
            tokio::time::sleep(every).await;
        }
    }));
    let value = body(held).await;
    let release = lock.release_holding(holding).await?;
    Ok(Some((value, release)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(started_ago: Duration) -> LeaseLoss {
        let ttl = Duration::from_secs(1);
        let from = Instant::now()
            .checked_sub(started_ago)
            .unwrap_or_else(Instant::now);
        LeaseLoss {
            fired: watch::channel(false).1,
            lease: Arc::new(Lease::new(from, ttl, None)),
            margin: ttl / 10,
        }
    }

    /// A process paused past its lease resumes before any watcher has run: the signal still
    /// says lost, from the clock alone.
    #[test]
    fn a_lease_whose_time_is_up_is_lost_though_no_renewal_has_failed() {
        assert!(!loss(Duration::ZERO).is_lost());
        assert!(
            loss(Duration::from_millis(950)).is_lost(),
            "inside the margin"
        );
        assert!(loss(Duration::from_millis(2500)).is_lost());
    }
}
