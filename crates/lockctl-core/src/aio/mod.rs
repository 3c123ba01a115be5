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

mod holding;

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
#[doc = include_str!("../../doc-examples/async_buyers.rs")]
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

    /// One purchase, answered once its batch is decided.
    pub async fn buy(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        submit(&self.submitter, order_id, user).await
    }
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
