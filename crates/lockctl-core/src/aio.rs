//! The library from async code (tokio), behind the `tokio` feature: the same implementation
//! underneath, never a second one.
//!
//! - A purchase or a lock call is a blocking call on tokio's blocking pool
//!   ([`tokio::task::spawn_blocking`]), on a connection kept for the next call: the async task
//!   itself never blocks, and what it buys is exactly what the blocking [`Buyer`] buys.
//! - The group committer ([`AsyncBatch`]) needs no thread per purchase at all: a purchase is
//!   submitted and its answer comes back on a channel, so ten thousand tasks can wait on one
//!   batcher.
//! - [`using`] holds a lock while an async body runs: the watchdog renews the lease, and the
//!   body gets the fencing token and a [`LeaseLoss`] signal that fires when a renewal fails,
//!   before the lease can have run out.
//!
//! The blocking calls take the caller's [`Target`] as it is (single node, cluster or Redlock
//! quorum, its metrics and holdings).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::lock::{Acquire, Lock, Release};
use crate::sku::Sku;
use crate::stock::{Batcher, BuyOptions, Buyer, Purchase, Submitter};

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

/// A buyer for async code: [`Buyer::buy`] on the blocking pool. Cloning is cheap and shares
/// its connections.
#[derive(Clone)]
pub struct AsyncBuyer {
    buyer: Arc<Buyer>,
    pool: Pool,
}

impl AsyncBuyer {
    /// A buyer of `sku` at `target`, buying as `options` say (see [`Buyer::new`]).
    pub fn new(target: &Target, sku: &Sku, options: BuyOptions) -> AsyncBuyer {
        AsyncBuyer {
            buyer: Arc::new(Buyer::new(target, sku, options)),
            pool: Pool::new(target),
        }
    }

    /// One purchase under `order_id` (the idempotency key), for `user` when the per-user limit
    /// applies. As [`Buyer::buy`], without blocking the task.
    pub async fn buy(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        let (me, order, user) = (self.clone(), order_id.to_string(), user.map(str::to_string));
        blocking(move || me.pool.with(|c| me.buyer.buy(c, &order, user.as_deref()))).await
    }
}

/// The `batch` strategy's group committer, for async code: a cheap cloneable handle that any
/// number of tasks submit to; each awaits its own answer, and no thread waits for it. The
/// committers stop when the last handle is dropped.
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
        let (tx, rx) = oneshot::channel();
        self.submitter.submit(
            order_id.to_string(),
            user.map(str::to_string),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await
            .unwrap_or_else(|_| Err(Error::internal("the batch committer stopped")))
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
    /// Fires when a renewal fails.
    pub lost: LeaseLoss,
}

/// Fires when the watchdog fails to renew the lease: the body must stop writing. It fires
/// before the lease can have run out (renewals come every third of the lease).
#[derive(Clone)]
pub struct LeaseLoss(watch::Receiver<bool>);

impl LeaseLoss {
    /// Whether it has fired.
    pub fn is_lost(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until it fires (forever, if the lease holds).
    pub async fn lost(&mut self) {
        let _ = self.0.wait_for(|lost| *lost).await;
    }
}

/// Holds `lock` while `body` runs: waits for it (as the lock's options say), renews the lease
/// all the while (the watchdog is switched on for this), hands the body the fencing token and
/// the lease-loss signal, and releases the lock when the body ends. `Ok(None)` when the lock
/// stayed busy for the whole wait; `Ok(Some((value, release)))` otherwise, with what the
/// release found ([`Release::Released`] unless the lease was lost meanwhile).
pub async fn using<T, F, Fut>(lock: Lock, body: F) -> Result<Option<(T, Release)>>
where
    F: FnOnce(Held) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let lock = Arc::new(lock.with_watchdog());
    let pool = Pool::new(lock.target());
    let (acquired, p) = (lock.clone(), pool.clone());
    let guard = match blocking(move || p.with(|c| acquired.acquire(c))).await? {
        Acquire::Acquired(g) => g,
        Acquire::Busy => return Ok(None),
    };
    let (tx, rx) = watch::channel(false);
    let held = Held {
        fence: guard.fence(),
        token: guard.token().to_string(),
        lost: LeaseLoss(rx),
    };
    // The watchdog marks the lease lost when a renewal fails; and a lease whose renewals stop
    // getting through is given up a tenth of a lease before it would run out by this process's
    // clock. Looked at every twentieth of the lease, so the signal fires before the lease can
    // have run out.
    let guard = Arc::new(guard);
    let (watched, every) = (
        guard.clone(),
        (guard.ttl() / 20).max(Duration::from_millis(5)),
    );
    let margin = guard.ttl() / 10;
    let watcher = tokio::spawn(async move {
        loop {
            if watched.lease_lost() || watched.remaining_validity() <= margin {
                let _ = tx.send(true);
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    let value = body(held).await;
    watcher.abort();
    let _ = watcher.await;
    let guard = Arc::try_unwrap(guard)
        .map_err(|_| Error::internal("the lease watcher still holds the guard"))?;
    let release = blocking(move || pool.with(|c| guard.release(c))).await?;
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
