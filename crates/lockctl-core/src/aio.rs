//! The library from async code (tokio), behind the `tokio` feature: the same implementation
//! underneath, never a second one.
//!
//! - A purchase or a lock call is a blocking call on tokio's blocking pool
//!   ([`tokio::task::spawn_blocking`]), on a connection kept for the next call: the async task
//!   itself never blocks, and what it buys is exactly what the blocking [`Buyer`] buys. Under
//!   the lock strategies a few purchases wait in Redis at once and the others as tasks
//!   ([`AsyncBuyer`]); under `atomic` the purchases in flight are pipelined by committer
//!   threads, as the group committer's are.
//! - The group committer ([`AsyncBatch`]) needs no thread per purchase at all: a purchase is
//!   submitted and its answer comes back on a channel, so ten thousand tasks can wait on one
//!   batcher.
//! - [`using`] holds a lock while an async body runs: the watchdog renews the lease, and the
//!   body gets the fencing token and a [`LeaseLoss`] signal that fires when a renewal fails,
//!   before the lease can have run out.
//!
//! The blocking calls take the caller's [`Target`] as it is (single node, cluster or Redlock
//! quorum, its metrics and holdings).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OnceCell, Semaphore, oneshot, watch};

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::{Acquire, Fenced, Guard, Lease, Lock, Release, fenced_write};
use crate::sku::Sku;
use crate::stock::{Batcher, BuyOptions, Buyer, Purchase, Strategy, Submitter};

/// Runs `f` on tokio's blocking pool; a task that panicked is an error, not a panic here.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::internal(format!("a blocking call failed: {e}"))))
}

/// Connections kept between calls, so that a purchase does not pay a connect.
#[derive(Clone)]
struct Pool {
    target: Target,
    idle: Arc<Mutex<Vec<Conn>>>,
}

impl Pool {
    fn new(target: &Target) -> Pool {
        Pool {
            target: target.clone(),
            idle: Arc::default(),
        }
    }

    /// Runs `f` with a connection of the pool (a new one when none is idle); a connection
    /// whose call failed is dropped rather than kept (its reply may still be on its way).
    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let kept = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut conn = match kept {
            Some(c) => c,
            None => self.target.connect()?,
        };
        let result = f(&mut conn);
        if result.is_ok() {
            self.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
        }
        result
    }
}

/// How many purchases of one [`AsyncBuyer`] wait for the lock in Redis at once, by default
/// (the `lock` and `fenced` strategies): the rest wait for their turn as tasks, in order, in
/// this process. Measured with the hammer's threads here (release build, a private Redis, 10,000
/// purchases under `lock`): 4,178 purchases/s with one waiter, 4,432 with 16, 4,018 with 64;
/// past a few waiters the lock's throughput is the holder's round trips, and each waiter in
/// Redis costs a connection, a blocked thread and a refresh of its place three times a second
/// (5,000 waiters in Redis fell to 92 purchases/s).
pub const DEFAULT_ROOM: usize = 16;

/// A buyer for async code: [`Buyer::buy`] on tokio's blocking pool. Cloning is cheap and shares
/// its connections and its waiting room.
///
/// Under `atomic`, the purchases in flight are pipelined instead: two committer threads (a
/// [`Batcher`] under `atomic`) send each purchase's own script call, the ones waiting together,
/// and answer each task on a channel; no purchase shares another's script.
///
/// Under `lock` and `fenced`, at most [`DEFAULT_ROOM`] purchases (see [`AsyncBuyer::with_room`])
/// wait for the lock in Redis at once, each on a connection of its own; any number of others
/// wait as tasks for a place, first come first served, and that wait counts against the
/// lock's wait (`LockOptions::wait`): a purchase still without a place when its wait is spent
/// is answered busy without reaching Redis. So ten thousand waiting buyers are ten thousand
/// tasks, not ten thousand threads and connections.
///
/// ```no_run
#[doc = include_str!("../doc-examples/async_buyers.rs")]
/// ```
#[derive(Clone)]
pub struct AsyncBuyer {
    buyer: Arc<Buyer>,
    pool: Pool,
    /// Places to wait for the lock in Redis (`None` for the strategies that take no lock).
    room: Option<Arc<Semaphore>>,
    /// Under `atomic`: the pipelining committers, started by the first purchase.
    pipeline: Arc<OnceCell<Batcher>>,
}

impl AsyncBuyer {
    /// A buyer of `sku` at `target`, buying as `options` say (see [`Buyer::new`]).
    pub fn new(target: &Target, sku: &Sku, options: BuyOptions) -> AsyncBuyer {
        AsyncBuyer::from_buyer(target, Buyer::new(target, sku, options))
    }

    /// The async form of `buyer` (made for `target`: a [`Buyer::with_quorum`], say).
    pub fn from_buyer(target: &Target, buyer: Buyer) -> AsyncBuyer {
        let locks = matches!(buyer.options().strategy, Strategy::Lock | Strategy::Fenced);
        AsyncBuyer {
            room: locks.then(|| Arc::new(Semaphore::new(DEFAULT_ROOM))),
            buyer: Arc::new(buyer),
            pool: Pool::new(target),
            pipeline: Arc::default(),
        }
    }

    /// The same buyer with `places` purchases at most waiting for the lock in Redis at once
    /// (at least one); no effect under the strategies that take no lock.
    pub fn with_room(mut self, places: usize) -> AsyncBuyer {
        if self.room.is_some() {
            self.room = Some(Arc::new(Semaphore::new(places.max(1))));
        }
        self
    }

    /// One purchase under `order_id` (the idempotency key), for `user` when the per-user limit
    /// applies. As [`Buyer::buy`], without blocking the task.
    pub async fn buy(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        self.buy_unless(order_id, user, std::future::pending())
            .await
            .unwrap_or_else(|| Err(Error::internal("a purchase that cannot be stopped stopped")))
    }

    /// [`AsyncBuyer::buy`], given up if `stop` completes while the purchase still waits for a
    /// place in the waiting room (`lock`, `fenced`): `None` then, and nothing of it was sent.
    /// Once it has a place, or under the strategies without a room, the purchase is made
    /// whatever `stop` does (a purchase on its way to Redis cannot be called back).
    pub async fn buy_unless(
        &self,
        order_id: &str,
        user: Option<&str>,
        stop: impl std::future::Future<Output = ()>,
    ) -> Option<Result<Purchase>> {
        if self.buyer.options().strategy == Strategy::Atomic {
            return Some(self.pipelined(order_id, user).await);
        }
        let started = Instant::now();
        let place = match &self.room {
            Some(room) => {
                let wait = self.buyer.options().lock.wait;
                let placed = tokio::time::timeout(wait, room.clone().acquire_owned());
                tokio::select! {
                    biased;
                    placed = placed => match placed {
                        Ok(Ok(place)) => Some(place),
                        // The wait was spent before a place came free (the room is never
                        // closed).
                        _ => return Some(Ok(self.buyer.busy_after(order_id, started.elapsed()))),
                    },
                    () = stop => return None,
                }
            }
            None => None,
        };
        let (me, order, user) = (self.clone(), order_id.to_string(), user.map(str::to_string));
        Some(
            blocking(move || {
                let _place = place;
                me.pool
                    .with(|c| me.buyer.buy_since(c, &order, user.as_deref(), started))
            })
            .await,
        )
    }
}

impl AsyncBuyer {
    /// An `atomic` purchase through the pipelining committers ([`Batcher`] under `atomic`:
    /// each purchase its own script call, the ones in flight sent together), started on first
    /// use. A purchase a blocking call each would cost two thread hand-offs: measured with
    /// `examples/aio_bench.rs`, that ran at 0.67x the blocking `Buyer` with 64 buyers.
    async fn pipelined(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        let batcher = self
            .pipeline
            .get_or_try_init(|| {
                let (target, buyer) = (self.pool.target.clone(), (*self.buyer).clone());
                blocking(move || Batcher::for_buyer(&target, buyer))
            })
            .await?;
        submit(&batcher.submitter(), order_id, user).await
    }
}

/// Submits one purchase to a group committer and awaits its answer on a channel.
async fn submit(submitter: &Submitter, order_id: &str, user: Option<&str>) -> Result<Purchase> {
    let (tx, rx) = oneshot::channel();
    submitter.submit(
        order_id.to_string(),
        user.map(str::to_string),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.await
        .unwrap_or_else(|_| Err(Error::internal("the batch committer stopped")))
}

/// The `batch` strategy's group committer, for async code: a cheap cloneable handle that any
/// number of tasks submit to; each awaits its own answer, and no thread waits for it. The
/// committers stop when the last handle is dropped.
///
/// ```no_run
#[doc = include_str!("../doc-examples/async_batch.rs")]
/// ```
#[derive(Clone)]
pub struct AsyncBatch {
    submitter: Submitter,
    _batcher: Arc<Batcher>,
}

impl AsyncBatch {
    /// Starts the committers of `sku` at `target` (see [`Batcher::start`]).
    pub fn start(target: &Target, sku: &Sku, options: BuyOptions) -> Result<AsyncBatch> {
        let batcher = Batcher::start(target, sku, options)?;
        Ok(AsyncBatch {
            submitter: batcher.submitter(),
            _batcher: Arc::new(batcher),
        })
    }

    /// One purchase, answered once its batch is decided.
    pub async fn buy(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        submit(&self.submitter, order_id, user).await
    }
}

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
#[doc = include_str!("../doc-examples/async_lock.rs")]
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
#[doc = include_str!("../doc-examples/using.rs")]
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

/// The orders worker ([`crate::orders::worker::run`]) as an async call, on the blocking pool:
/// it runs until its options say it stops (`once`, or the `stop` flag).
#[cfg(feature = "postgres")]
pub async fn worker(
    target: &Target,
    db_url: &str,
    options: crate::orders::worker::WorkerOptions,
) -> Result<crate::orders::worker::WorkerStats> {
    let (target, db_url) = (target.clone(), db_url.to_string());
    blocking(move || crate::orders::worker::run(&target, &db_url, &options)).await
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
