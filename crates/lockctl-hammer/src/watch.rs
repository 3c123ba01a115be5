//! The stock, read every [`EVERY`] on a connection of its own while the run goes: the
//! evidence that nothing put stock back. A "sold out" answered before a sale was even asked
//! for is wrong only if the stock never went up in between; the verdict counts it as
//! under-selling only when nothing says it did (see [`went_up`]).
//!
//! What it cannot see: stock put back and sold again between two reads. The hammer assumes,
//! as it does for its other books, that nobody else writes the SKU's stock during its run.
//!
//! Each read that finds the stock changed is kept, with when it was sent and answered (at most
//! [`MAX_STOCK_READS`]): the timeline draws the stock from them, whatever the answers say. A
//! stock kept elsewhere than Redis (a SQL table) is read the same way on a connection of its
//! own ([`start_store`]), for the timeline only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::history::{MAX_STOCK_READS, StockRead};
use crate::readback::Restart;
use lockctl_core::conn::{Reconnecting, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock;

/// How often the stock is read: often enough to draw a hunt's round of a few tens of
/// milliseconds; one GET on a connection of its own, and only the changes are kept.
pub const EVERY: Duration = Duration::from_millis(10);

/// The running reader.
pub(super) struct StockWatch {
    stop: Arc<AtomicBool>,
    reader: Option<thread::JoinHandle<Watched>>,
    initial: i64,
}

/// What the reads saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Watched {
    /// The stock last read (the stock at the start when none was).
    last: i64,
    /// The first time it went up or went missing, in words.
    rose: Option<String>,
    /// Each read that found the stock changed: sent, answered, the stock.
    reads: Vec<(Instant, Instant, i64)>,
}

impl Watched {
    fn new(initial: i64) -> Watched {
        Watched {
            last: initial,
            rose: None,
            reads: Vec::new(),
        }
    }

    /// Keeps a read that found `stock`, when it is a change (and there is room).
    fn keep(&mut self, sent: Instant, stock: i64) {
        if stock != self.last && self.reads.len() < MAX_STOCK_READS {
            self.reads.push((sent, Instant::now(), stock));
        }
    }

    /// The reads kept, timed from `origin` (the run's start).
    pub(super) fn reads_since(&self, origin: Instant) -> Vec<StockRead> {
        self.reads
            .iter()
            .map(|&(sent, at, stock)| StockRead {
                sent: sent.saturating_duration_since(origin),
                at: at.saturating_duration_since(origin),
                stock,
            })
            .collect()
    }
}

/// Starts reading `key` (the stock of `sku`, which was `initial` at the start).
pub(super) fn start(target: &Target, sku: &Sku, key: &str, initial: i64) -> StockWatch {
    let stop = Arc::new(AtomicBool::new(false));
    let (target, sku, key, halt) = (target.clone(), sku.clone(), key.to_string(), stop.clone());
    let reader = thread::Builder::new()
        .name("lockctl-stock-watch".into())
        .spawn(move || read_until(&target, &sku, &key, initial, &halt))
        .ok();
    StockWatch {
        stop,
        reader,
        initial,
    }
}

impl StockWatch {
    /// Stops reading, and says what was seen (nothing, when the reader could not start).
    pub(super) fn finish(mut self) -> Watched {
        let nothing = Watched::new(self.initial);
        match self.halt() {
            Some(r) => r.join().unwrap_or(nothing),
            None => nothing,
        }
    }

    /// Tells the reader to stop, and wakes it.
    fn halt(&mut self) -> Option<thread::JoinHandle<Watched>> {
        self.stop.store(true, Ordering::SeqCst);
        let reader = self.reader.take();
        if let Some(r) = &reader {
            r.thread().unpark();
        }
        reader
    }
}

/// A run that ends in an error never asks what was seen: the reader stops all the same.
impl Drop for StockWatch {
    fn drop(&mut self) {
        self.halt();
    }
}

fn read_until(target: &Target, sku: &Sku, key: &str, initial: i64, stop: &AtomicBool) -> Watched {
    let started = Instant::now();
    let mut conn = Reconnecting::new(target);
    // A bucketed SKU's stock is its buckets' (its own key does not exist).
    let bucketed = conn
        .with(|c| stock::buckets::Buckets::read(c, sku))
        .is_ok_and(|b| b.is_some());
    let mut seen = Watched::new(initial);
    loop {
        thread::park_timeout(EVERY);
        if stop.load(Ordering::SeqCst) {
            return seen;
        }
        let sent = Instant::now();
        // A read that fails (a paused server, bad data) says nothing either way.
        let Ok(now) = conn.with(|c| match bucketed {
            true => stock::buckets::stock_of(c, sku),
            false => stock::read_stock_at(c, sku, key),
        }) else {
            continue;
        };
        let at = started.elapsed().as_secs_f64();
        match now {
            Some(n) if n > seen.last && seen.rose.is_none() => {
                seen.rose = Some(format!(
                    "the stock went up from {} to {n} (read {at:.3} s into the run)",
                    seen.last
                ));
            }
            None if seen.rose.is_none() => {
                seen.rose = Some(format!("the stock key was gone {at:.3} s into the run"));
            }
            _ => {}
        }
        if let Some(n) = now {
            seen.keep(sent, n);
            seen.last = n;
        }
    }
}

/// The reads of a stock kept in a store of the caller's, going on.
pub(super) struct StoreWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Watched>>,
}

/// Starts reading a stock kept in a store of the caller's with `read` (`initial` at the
/// start; `None` for a read that failed), on a thread of its own; `None` when no thread can be
/// started (nothing is drawn from reads then). The store is the caller's to know: this module
/// only times and keeps the reads.
pub(super) fn start_store(
    read: impl Fn() -> Option<i64> + Send + 'static,
    initial: i64,
) -> Option<StoreWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Watched::new(initial)));
    let (halt, kept) = (stop.clone(), seen.clone());
    thread::Builder::new()
        .name("lockctl-stock-reads".into())
        .spawn(move || {
            while !halt.load(Ordering::SeqCst) {
                thread::sleep(EVERY);
                let sent = Instant::now();
                if let Some(n) = read()
                    && !halt.load(Ordering::SeqCst)
                    && let Ok(mut seen) = kept.lock()
                {
                    seen.keep(sent, n);
                    seen.last = n;
                }
            }
        })
        .ok()?;
    Some(StoreWatch { stop, seen })
}

impl StoreWatch {
    /// Stops reading and says what was seen, without waiting for a read under way (a store's
    /// read may take as long as its database lets it: the run does not wait on it).
    pub(super) fn finish(self) -> Watched {
        self.stop.store(true, Ordering::SeqCst);
        let seen = self.seen.lock().map(|s| s.clone());
        seen.unwrap_or_else(|p| p.into_inner().clone())
    }
}

impl Drop for StoreWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Why the stock may have gone up during the run, if anything says so: a restart (or one
/// that cannot be ruled out), a read that found it higher than the one before or found it
/// gone, or a stock at the end above the last one read. `None`: nothing put stock back, as
/// far as lockctl can see.
pub(super) fn went_up(restart: &Restart, watched: &Watched, final_stock: i64) -> Option<String> {
    if let Some(why) = restart.may_have_restocked() {
        return Some(why.to_string());
    }
    if let Some(why) = &watched.rose {
        return Some(why.clone());
    }
    (final_stock > watched.last).then(|| {
        format!(
            "the stock at the end ({final_stock}) is above the stock last read ({})",
            watched.last
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_sign_of_stock_put_back_is_named_and_none_means_none() {
        let quiet = Watched::new(4);
        assert_eq!(went_up(&Restart::No, &quiet, 0), None);
        assert_eq!(went_up(&Restart::No, &quiet, 4), None);
        assert!(went_up(&Restart::No, &quiet, 5).unwrap().contains("above"));
        let restarted = Restart::Yes { keeps: Some(false) };
        assert!(
            went_up(&restarted, &quiet, 0)
                .unwrap()
                .contains("restarted")
        );
        assert!(went_up(&Restart::Untold, &quiet, 0).is_some());
        let rose = Watched {
            rose: Some("the stock went up from 1 to 9".into()),
            ..Watched::new(2)
        };
        assert!(went_up(&Restart::No, &rose, 0).unwrap().contains("went up"));
    }
}
