//! The stock, read every [`EVERY`] on a connection of its own while the run goes: the
//! evidence that nothing put stock back. A "sold out" answered before a sale was even asked
//! for is wrong only if the stock never went up in between; the verdict counts it as
//! under-selling only when nothing says it did (see [`went_up`]).
//!
//! What it cannot see: stock put back and sold again between two reads. The hammer assumes,
//! as it does for its other books, that nobody else writes the SKU's stock during its run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::readback::Restart;
use lockctl_core::conn::{Reconnecting, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock;

/// How often the stock is read.
pub const EVERY: Duration = Duration::from_millis(50);

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
        let nothing = Watched {
            last: self.initial,
            rose: None,
        };
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
    let mut seen = Watched {
        last: initial,
        rose: None,
    };
    loop {
        thread::park_timeout(EVERY);
        if stop.load(Ordering::SeqCst) {
            return seen;
        }
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
            seen.last = n;
        }
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
        let quiet = Watched {
            last: 4,
            rose: None,
        };
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
            last: 2,
            rose: Some("the stock went up from 1 to 9".into()),
        };
        assert!(went_up(&Restart::No, &rose, 0).unwrap().contains("went up"));
    }
}
