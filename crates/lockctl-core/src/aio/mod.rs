//! The library from async code (tokio), behind the `tokio` feature: the same implementation
//! underneath, never a second one.
//!
//! - An `atomic` purchase is natively async (`native`): the sans-IO purchase
//!   ([`Buyer::atomic_command`], [`Buyer::atomic_next`], the same decisions the blocking
//!   [`Buyer`] makes) on the redis crate's multiplexed tokio connection, a few connections per
//!   buyer with every purchase in flight pipelined on them. No thread and no `spawn_blocking`
//!   on its path, and cancellation-safe: a purchase dropped mid-flight is either not sent or
//!   run whole by Redis, never half. What one command cannot do (a SKU found bucketed or
//!   unseeded, replicas to wait for, the caller's work, a cluster) is made the blocking way.
//! - A `lock` or `fenced` purchase is natively async too (`Buyer::locked_async`): the lock's
//!   acquire loop in its FIFO queue, the grant, the steps under the lock and the write with
//!   the release, each a request awaited on an async connection, every decision the blocking
//!   path's own function. At most a few purchases wait in Redis at once, each on a connection
//!   of its own (a waiter's BLPOP blocks it), and the others as tasks ([`AsyncBuyer`]). A
//!   purchase runs in a task of its own: dropping its future does not stop it, so the lock is
//!   released by the code that took it; a runtime shut down mid-purchase gives the lock and
//!   the queue place back on a thread. With a watchdog, a Redlock quorum, on a cluster, with
//!   the caller's work, buckets or replicas to wait for, the purchase is [`Buyer::buy`] on
//!   tokio's blocking pool instead, as is `naive`'s; so are the lock calls of [`AsyncLock`].
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

use crate::conn::{AsyncConn, Conn, Target};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::{Acquire, Fenced, Guard, Lease, Lock, Release, fenced_write};
use crate::sku::Sku;
use crate::stock::{Batcher, BuyOptions, Buyer, Purchase, Strategy, Submitter};

mod holding;
mod native;

pub use native::DEFAULT_CONNECTIONS;

pub use holding::{AsyncLock, Held, LeaseLoss, using};

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

/// Async connections kept between the lock purchases of the native transport, one per
/// purchase while it runs.
#[derive(Clone, Default)]
struct AsyncIdle(Arc<Mutex<Vec<AsyncConn>>>);

impl AsyncIdle {
    /// A kept connection whose runtime still runs, or a new one to `target`.
    async fn take(&self, target: &Target) -> Result<AsyncConn> {
        loop {
            let kept = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match kept {
                Some(conn) if conn.usable() => return Ok(conn),
                Some(_) => continue,
                None => return AsyncConn::open(target).await,
            }
        }
    }

    /// Keeps `conn` for the next purchase.
    fn keep(&self, conn: AsyncConn) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
    }
}

/// How many purchases of one [`AsyncBuyer`] wait for the lock in Redis at once, by default
/// (the `lock` and `fenced` strategies): the rest wait for their turn as tasks, in order, in
/// this process. Measured with the hammer's threads here (release build, a private Redis, 10,000
/// purchases under `lock`): 4,178 purchases/s with one waiter, 4,432 with 16, 4,018 with 64;
/// past a few waiters the lock's throughput is the holder's round trips, and each waiter in
/// Redis costs a connection (and a blocked thread on the blocking path) and a refresh of its
/// place three times a second
/// (5,000 waiters in Redis fell to 92 purchases/s).
pub const DEFAULT_ROOM: usize = 16;

/// A buyer for async code. Cloning is cheap and shares its connections and its waiting room.
///
/// Under `atomic`, a purchase is natively async: its script call is a request on one of a few
/// multiplexed connections ([`DEFAULT_CONNECTIONS`], see [`AsyncBuyer::with_connections`]),
/// pipelined with the others in flight, and no thread waits for it. On a cluster, or with the
/// caller's work ([`Buyer::with_work`]), the purchases in flight are pipelined by two
/// committer threads instead (a [`Batcher`] under `atomic`).
///
/// Under `lock` and `fenced` on a single server (no watchdog, no Redlock quorum, no caller's
/// work), a purchase is natively async as well: its lock calls and its write are requests on
/// an async connection, in a task of its own that ends whole whatever happens to the caller's
/// future. Otherwise, and under `naive`, a purchase is [`Buyer::buy`] on tokio's blocking
/// pool.
///
/// Under `lock` and `fenced`, at most [`DEFAULT_ROOM`] purchases (see [`AsyncBuyer::with_room`])
/// wait for the lock in Redis at once, each on a connection of its own; any number of others
/// wait as tasks for a place, first come first served, and that wait counts against the
/// lock's wait (`LockOptions::wait`): a purchase still without a place when its wait is spent
/// is answered busy without reaching Redis. So ten thousand waiting buyers are ten thousand
/// tasks, not ten thousand threads and connections.
///
/// ```no_run
#[doc = include_str!("../../doc-examples/async_buyers.rs")]
/// ```
#[derive(Clone)]
pub struct AsyncBuyer {
    buyer: Arc<Buyer>,
    pool: Pool,
    /// Places to wait for the lock in Redis (`None` for the strategies that take no lock).
    room: Option<Arc<Semaphore>>,
    /// Under `atomic`: the pipelining committers, started by the first purchase, where the
    /// native transport cannot serve.
    pipeline: Arc<OnceCell<Batcher>>,
    /// Under `atomic` on a single server: the native async transport.
    native: Option<Arc<native::Native>>,
    /// Under `lock` and `fenced` when the buyer [`Buyer::locks_natively`]: the native async
    /// transport's connections.
    async_idle: AsyncIdle,
}

impl AsyncBuyer {
    /// A buyer of `sku` at `target`, buying as `options` say (see [`Buyer::new`]).
    pub fn new(target: &Target, sku: &Sku, options: BuyOptions) -> AsyncBuyer {
        AsyncBuyer::from_buyer(target, Buyer::new(target, sku, options))
    }

    /// The async form of `buyer` (made for `target`: a [`Buyer::with_quorum`], say).
    pub fn from_buyer(target: &Target, buyer: Buyer) -> AsyncBuyer {
        let locks = matches!(buyer.options().strategy, Strategy::Lock | Strategy::Fenced);
        let native = (buyer.options().strategy == Strategy::Atomic && !buyer.has_work())
            .then(|| native::Native::new(target, DEFAULT_CONNECTIONS))
            .flatten()
            .map(Arc::new);
        AsyncBuyer {
            room: locks.then(|| Arc::new(Semaphore::new(DEFAULT_ROOM))),
            buyer: Arc::new(buyer),
            pool: Pool::new(target),
            pipeline: Arc::default(),
            native,
            async_idle: AsyncIdle::default(),
        }
    }

    /// The same buyer with `connections` multiplexed connections (at least one) for its
    /// native async purchases (`atomic` on a single server); no effect otherwise. Default:
    /// [`DEFAULT_CONNECTIONS`].
    pub fn with_connections(mut self, connections: usize) -> AsyncBuyer {
        if self.native.is_some() {
            self.native = native::Native::new(&self.pool.target, connections).map(Arc::new);
        }
        self
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
        let started = Instant::now();
        if let Some(native) = &self.native {
            match native.buy(&self.buyer, order_id, user, started).await {
                native::Made::Answered(answer) => return Some(answer),
                native::Made::WholePath => return Some(self.whole(order_id, user, started).await),
            }
        }
        if self.buyer.options().strategy == Strategy::Atomic {
            return Some(self.pipelined(order_id, user).await);
        }
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
        if self.buyer.locks_natively() {
            // A task of its own: dropping this future (a timeout, a `select!`) does not stop
            // a purchase that may hold the lock, so the lock is always released (or the
            // queue left) by the code that took it, never left to its lease.
            let made = tokio::spawn(async move {
                let _place = place;
                me.locked_natively(&order, user.as_deref(), started).await
            });
            return Some(made.await.unwrap_or_else(|e| {
                Err(Error::internal(format!(
                    "a lock purchase's task failed: {e}"
                )))
            }));
        }
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
    /// A purchase the whole way ([`Buyer::buy_since`]) on the blocking pool: what the native
    /// transport's one command could not finish.
    async fn whole(
        &self,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let (me, order, user) = (self.clone(), order_id.to_string(), user.map(str::to_string));
        blocking(move || {
            me.pool
                .with(|c| me.buyer.buy_since(c, &order, user.as_deref(), started))
        })
        .await
    }

    /// A `lock` or `fenced` purchase on the native async transport ([`Buyer::locked_async`]),
    /// on a connection of its own while it waits and holds the lock (a waiter's BLPOP blocks
    /// its connection), kept for the next purchase unless a call on it failed. An unseeded
    /// SKU's buckets are looked for the blocking way, and a bucketed one bought from them the
    /// whole way ([`Buyer::buy_since`]), as the blocking route does.
    async fn locked_natively(
        &self,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let mut answer = match self.async_idle.take(&self.pool.target).await {
            Ok(mut conn) => {
                let answer = self
                    .buyer
                    .locked_async(&mut conn, order_id, user, started)
                    .await;
                if answer.is_ok() {
                    self.async_idle.keep(conn);
                }
                answer
            }
            Err(e) => Err(e),
        };
        if matches!(answer, Err(Error::Unseeded { .. })) {
            let me = self.clone();
            match blocking(move || me.pool.with(|c| me.buyer.finds_buckets(c))).await {
                Ok(true) => return self.whole(order_id, user, started).await,
                Ok(false) => {}
                Err(e) => answer = Err(e),
            }
        } else if self.buyer.needs_whole_path(&answer) {
            return self.whole(order_id, user, started).await;
        }
        self.buyer.metered(&answer);
        answer
    }

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
#[doc = include_str!("../../doc-examples/async_batch.rs")]
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

    /// [`AsyncBatch::start`] for purchases made by `buyer` (made for `target`: a
    /// [`Buyer::with_quorum`], say).
    pub fn from_buyer(target: &Target, buyer: Buyer) -> Result<AsyncBatch> {
        let batcher = Batcher::for_buyer(target, buyer)?;
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

/// The orders worker ([`crate::orders::worker::run`]) as an async call, on the blocking pool:
/// it runs until its options say it stops (`once`, or the `stop` flag), or until this future
/// is dropped (a `select!`, a timeout, the task aborted): dropping it sets the worker's stop
/// flag (the one given, or one of its own), and the worker ends within one read's block
/// (`WorkerOptions::block`), its claimed orders left pending for the next worker to claim. A
/// worker whose future is gone must not run on unseen, holding the runtime's shutdown. A flag
/// shared by several workers stops them all when one's future is dropped: give each its own.
#[cfg(feature = "postgres")]
pub async fn worker(
    target: &Target,
    db_url: &str,
    mut options: crate::orders::worker::WorkerOptions,
) -> Result<crate::orders::worker::WorkerStats> {
    let _on_drop = StopOnDrop {
        stop: options.stop.get_or_insert_with(Arc::default).clone(),
        ended: Arc::default(),
    };
    let ended = Arc::clone(&_on_drop.ended);
    let (target, db_url) = (target.clone(), db_url.to_string());
    blocking(move || {
        let ran = crate::orders::worker::run(&target, &db_url, &options);
        // Ended by itself: the flag stays as it was (a caller may run again with it), even
        // when the future is dropped before it sees this answer.
        ended.store(true, Ordering::SeqCst);
        ran
    })
    .await
}

/// Sets `stop` when dropped, unless the worker has `ended` by itself.
#[cfg(feature = "postgres")]
struct StopOnDrop {
    stop: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
}

#[cfg(feature = "postgres")]
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.ended.load(Ordering::SeqCst) {
            self.stop.store(true, Ordering::SeqCst);
        }
    }
}
