//! An endpoint's books: its stock, set or read before the run and read again after it, in
//! Redis (a key, watched during the run, with the server's restarts noticed) or in a store of
//! the caller's ([`StockStore`]: a SQL table, say), read when the run is quiet.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::HttpOptions;
use crate::error::{Error, Result, StoreError};
use crate::evidence::Books;
use crate::history::StockRead;
use crate::options::LoadOptions;
use crate::readback::{Incarnation, READ_BACK_PATIENCE, Restart};
use crate::watch;
use lockctl_core::conn::{Conn, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock;

/// Where an endpoint keeps its stock when it is not a Redis key: set before the run and read
/// after it. Errors are the store's own, boxed ([`StoreError`]).
pub trait StockStore: Send + Sync {
    /// Sets the SKU's stock to `n`.
    fn set(&self, sku: &Sku, n: u64) -> std::result::Result<(), StoreError>;
    /// The SKU's stock now.
    fn read(&self, sku: &Sku) -> std::result::Result<i64, StoreError>;
    /// Where the stock is, for the report (a URL without its password, and the query).
    fn shown(&self) -> String;
    /// The same store on a connection of its own, to read the stock while the run goes;
    /// `None` (the default) when it has none to give: the stock is then read only before
    /// and after the run.
    fn observer(&self) -> Option<Box<dyn StockStore>> {
        None
    }
}

/// A caller's stock store, shared.
#[derive(Clone)]
pub struct Store(pub Arc<dyn StockStore>);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.0.shown())
    }
}

/// The books as they were before the run, and what reads them again after it.
pub(super) enum Opened {
    Redis {
        conn: Box<Conn>,
        key: String,
        initial: i64,
        incarnation: Incarnation,
        watch: watch::StockWatch,
    },
    Store {
        store: Store,
        initial: i64,
        watch: Option<watch::StoreWatch>,
    },
}

/// The stock before the run: set to `load.stock` when given, read otherwise.
pub(super) fn open(
    target: &Target,
    load: &LoadOptions,
    http: &HttpOptions,
    key: &str,
) -> Result<Opened> {
    if let Some(store) = &http.store {
        let failed = |source| Error::Store {
            store: store.0.shown(),
            source,
        };
        if let Some(n) = load.stock {
            store.0.set(&load.sku, n).map_err(failed)?;
        }
        let initial = store.0.read(&load.sku).map_err(failed)?;
        return Ok(Opened::Store {
            store: store.clone(),
            initial,
            watch: store.0.observer().and_then(|own| {
                let sku = load.sku.clone();
                watch::start_store(move || own.read(&sku).ok(), initial)
            }),
        });
    }
    let mut conn = target.connect()?;
    let initial = match load.stock {
        Some(n) => {
            conn.query::<()>(redis::cmd("SET").arg(key).arg(n))?;
            n as i64
        }
        None => {
            crate::readback::starting_stock_at(&mut conn, &load.sku, key)?.ok_or_else(|| {
                lockctl_core::Error::NoStockKey {
                    key: key.to_string(),
                    addr: target.addr().to_string(),
                }
            })?
        }
    };
    let incarnation = Incarnation::of(target, &mut conn);
    let watch = watch::start(target, &load.sku, key, initial);
    Ok(Opened::Redis {
        conn: Box::new(conn),
        key: key.to_string(),
        initial,
        incarnation,
        watch,
    })
}

impl Opened {
    pub(super) fn initial(&self) -> i64 {
        match self {
            Opened::Redis { initial, .. } | Opened::Store { initial, .. } => *initial,
        }
    }

    /// The books after the run, as evidence: the stock (or why it could not be read), signs
    /// of stock put back, and whether Redis restarted; and the reads of the stock that found
    /// it changed while the run went, timed from `origin`.
    pub(super) fn close(
        self,
        target: &Target,
        sku: &Sku,
        origin: Instant,
    ) -> (Books, Option<String>, Option<Restart>, Vec<StockRead>) {
        match self {
            Opened::Redis {
                mut conn,
                key,
                incarnation,
                watch,
                ..
            } => {
                let watched = watch.finish();
                let read = read_back(target, &mut conn, sku, &key);
                let restart = incarnation.restart(target);
                let went_up = match &read {
                    Ok(f) => watch::went_up(&restart, &watched, *f),
                    Err(_) => None,
                };
                let reads = watched.reads_since(origin);
                (Books::Stock(read), went_up, Some(restart), reads)
            }
            Opened::Store { store, watch, .. } => {
                let reads = watch.map_or_else(Vec::new, |w| w.finish().reads_since(origin));
                let read = patiently(|| store.0.read(sku)).map_err(|source| Error::Store {
                    store: store.0.shown(),
                    source,
                });
                (Books::Stock(read), None, None, reads)
            }
        }
    }
}

/// `read`, tried again with pauses while it fails, for at most [`READ_BACK_PATIENCE`].
fn patiently<T>(
    mut read: impl FnMut() -> std::result::Result<T, StoreError>,
) -> std::result::Result<T, StoreError> {
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    loop {
        match read() {
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(200)),
            done => return done,
        }
    }
}

/// The stock at `key` after the run, on fresh connections and with pauses if the first try
/// fails, for at most [`READ_BACK_PATIENCE`]. A key gone is an error too: the endpoint (or
/// someone) deleted the stock the verdict rests on.
fn read_back(target: &Target, conn: &mut Conn, sku: &Sku, key: &str) -> Result<i64> {
    Ok(read_key_back(target, conn, sku, key)?)
}

/// [`read_back`], in lockctl-core's terms: every failure is of Redis or of what it holds.
fn read_key_back(
    target: &Target,
    conn: &mut Conn,
    sku: &Sku,
    key: &str,
) -> lockctl_core::Result<i64> {
    use lockctl_core::Error;
    let read = |c: &mut Conn| {
        stock::read_stock_at(c, sku, key)?.ok_or_else(|| Error::NoStockKey {
            key: key.to_string(),
            addr: target.addr().to_string(),
        })
    };
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    let mut result = read(conn);
    let worth_retrying = |r: &lockctl_core::Result<i64>| matches!(r, Err(e) if !matches!(e, Error::NoStockKey { .. } | Error::BadStock { .. }));
    while worth_retrying(&result) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
        result = target.connect().and_then(|mut c| read(&mut c));
    }
    result
}
