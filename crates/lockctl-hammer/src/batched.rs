//! The batch strategy's driver: `-c` buyers with one purchase each in flight, handed to one
//! [`Batcher`], as the threads of an application server would hand theirs. A buyer is not a
//! thread: its purchase's answer records the sample and submits the buyer's next purchase, on
//! the committer thread that answered it, so a thousand buyers cost a thousand queue entries,
//! not a thousand threads. With `--work-ms` (simulated work before each purchase) every buyer
//! needs a thread to sleep in, and gets one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

use crate::fan_out::{Began, OUTAGE_LIMIT, abandoned, done, failed, fan_out, user_of};
use crate::options::HammerOptions;
use crate::report::{Ended, Sample};
use crate::tally::Tally;
use lockctl_core::conn::Target;
use lockctl_core::error::Result;
use lockctl_core::stock::{Batcher, Purchase, Submitter};

pub(super) fn run_batched(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    let batcher = Batcher::start(target, &opts.load.sku, opts.buy.clone())?;
    let concurrency = opts.load.in_flight();
    let start = Instant::now();
    if !opts.work.is_zero() {
        return fan_out(
            opts,
            start,
            concurrency,
            1,
            || (),
            |(), batch| {
                batch
                    .iter()
                    .map(|&i| {
                        let t = Began::now(start);
                        thread::sleep(opts.work);
                        let user = user_of(opts, i);
                        match batcher.buy(&format!("{run_id}-{i}"), user.as_deref()) {
                            Ok(p) => done(i, t, &p),
                            Err(e) => failed(i, t, &e),
                        }
                    })
                    .collect()
            },
            |()| Vec::new(),
        );
    }
    let chains = Arc::new(Chains {
        submitter: batcher.submitter(),
        opts: opts.clone(),
        run_id: run_id.to_string(),
        next: AtomicU64::new(0),
        abandon: AtomicBool::new(false),
        last_up: AtomicU64::new(0),
        started: start,
        books: Mutex::new(Books {
            tally: Tally::new(opts.load.requests, opts.buy.qty).keeping(opts.load.history),
            live: concurrency,
        }),
        ended: Condvar::new(),
    });
    for _ in 0..concurrency {
        chains.clone().next_purchase();
    }
    let mut books = chains.books.lock().unwrap_or_else(|e| e.into_inner());
    while books.live > 0 {
        books = chains.ended.wait(books).unwrap_or_else(|e| e.into_inner());
    }
    let tally = std::mem::replace(&mut books.tally, Tally::new(0, 0));
    drop(books);
    batcher.close();
    Ok(tally)
}

/// The buyers of one run, each a chain of purchases.
struct Chains {
    submitter: Submitter,
    opts: HammerOptions,
    run_id: String,
    next: AtomicU64,
    /// Set once Redis has been unreachable for [`OUTAGE_LIMIT`]: the rest is given up unsent.
    abandon: AtomicBool,
    /// When an answer last came back from Redis (µs since `started`), outages measured from it.
    last_up: AtomicU64,
    started: Instant,
    books: Mutex<Books>,
    ended: Condvar,
}

struct Books {
    tally: Tally,
    /// Buyers still buying.
    live: u64,
}

impl Chains {
    /// Submits this buyer's next purchase, or ends the buyer when none is left (or the run
    /// was stopped). Requests taken after an outage was given up are counted abandoned.
    fn next_purchase(self: Arc<Self>) {
        loop {
            let stopped = self
                .opts
                .load
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed));
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if stopped || i >= self.opts.load.requests {
                let mut b = self.books.lock().unwrap_or_else(|e| e.into_inner());
                b.live -= 1;
                if b.live == 0 {
                    self.ended.notify_all();
                }
                return;
            }
            if self.abandon.load(Ordering::Relaxed) {
                self.record(abandoned(i, "Redis"));
                continue;
            }
            let t = Began::now(self.started);
            let me = self.clone();
            self.submitter.submit(
                format!("{}-{i}", self.run_id),
                user_of(&self.opts, i),
                Box::new(move |r: Result<Purchase>| {
                    let sample = match r {
                        Ok(p) => done(i, t, &p),
                        Err(e) => failed(i, t, &e),
                    };
                    me.watch_outage(&sample);
                    me.record(sample);
                    me.next_purchase();
                }),
            );
            return;
        }
    }

    fn record(&self, sample: Sample) {
        if let Some(p) = &self.opts.load.progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
        let sample = Sample {
            at: self.started.elapsed(),
            ..sample
        };
        let mut b = self.books.lock().unwrap_or_else(|e| e.into_inner());
        b.tally.add(&sample);
    }

    /// Gives the rest up once every answer for [`OUTAGE_LIMIT`] said Redis was unreachable.
    fn watch_outage(&self, s: &Sample) {
        let now = self.started.elapsed().as_micros() as u64;
        if !matches!(&s.ended, Ended::Failed { kind, .. } if kind.is_outage()) {
            self.last_up.store(now, Ordering::Relaxed);
        } else if now.saturating_sub(self.last_up.load(Ordering::Relaxed))
            >= OUTAGE_LIMIT.as_micros() as u64
        {
            self.abandon.store(true, Ordering::Relaxed);
        }
    }
}
