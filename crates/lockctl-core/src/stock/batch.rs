//! Group commit: the `batch` strategy's coalescing of one process's concurrent purchases.
//!
//! A purchase is handed to the [`Batcher`] and waits for a batch. Two committer threads, each
//! with its own connection, take the waiting purchases (at most `--batch-max`, oldest first)
//! and decide them with one script call ([`Buyer::batch`]), then answer each purchase on its
//! own. A committer sends at once when no other batch is on its way, so a lone purchase pays
//! no wait; while one is, purchases gather until it returns, the batch is full, or the oldest
//! has waited `--batch-ms`, and the second committer then sends them alongside (as
//! PostgreSQL's group commit does: waiting costs nothing while the server is busy anyway).
//!
//! Under the `atomic` strategy a batch is a pipeline instead: each purchase is its own script
//! call, all sent before the first reply is read, so the batch costs one round trip and each
//! purchase stays atomic on its own (`lockctl_core::aio::AsyncBuyer` buys `atomic` this way).
//!
//! A call that fails answers every purchase in it with that failure, indeterminate when the
//! call may have run (a timeout, a dropped connection): none of them is reported bought or
//! sold out. A batch that finds the lock held answers busy; purchases with `--wait-ms` left are
//! tried again after a short random pause, as the atomic strategy does.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::buyer::busy_pause;
use super::{Buy, BuyOptions, Buyer, Purchase, Strategy};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::sku::Sku;

/// How a purchase's answer reaches whoever is waiting for it.
pub type Answer = Box<dyn FnOnce(Result<Purchase>) + Send>;

/// Committer threads: two, so one batch can gather while another is on its way.
const COMMITTERS: usize = 2;

/// Coalesces the purchases of one SKU made by this process (see the module documentation).
/// Dropping it (or [`Batcher::close`]) answers what is waiting and stops the committers.
pub struct Batcher {
    shared: Arc<Shared>,
    committers: Vec<thread::JoinHandle<()>>,
}

struct Shared {
    buyer: Buyer,
    target: Target,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    /// Batches on their way (sent and not yet answered in full), and their purchases.
    in_flight: usize,
    in_flight_purchases: usize,
    closed: bool,
}

struct Waiting {
    order_id: String,
    user: Option<String>,
    since: Instant,
    /// Until when a busy answer is tried again (the purchase's `--wait-ms`).
    until: Instant,
    /// Of a bucketed SKU, the purchase's home bucket (`None` until the buyer knows the SKU is
    /// bucketed): a batch is one bucket's purchases.
    home: Option<usize>,
    answer: Answer,
}

impl Batcher {
    /// Starts the committers for `sku`, each with a connection of its own, opened here (a
    /// connection lost later is opened again for the next batch).
    pub fn start(target: &Target, sku: &Sku, options: BuyOptions) -> Result<Batcher> {
        Batcher::for_buyer(target, Buyer::new(target, sku, options))
    }

    /// [`Batcher::start`] for purchases made by `buyer` (made for `target`).
    pub fn for_buyer(target: &Target, buyer: Buyer) -> Result<Batcher> {
        let shared = Arc::new(Shared {
            buyer,
            target: target.clone(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let conns = (0..COMMITTERS)
            .map(|_| target.connect())
            .collect::<Result<Vec<Conn>>>()?;
        let mut committers = Vec::new();
        for conn in conns {
            let s = shared.clone();
            let spawned = thread::Builder::new()
                .name("lockctl-batch".into())
                .spawn(move || s.commit_loop(Some(conn)));
            match spawned {
                Ok(t) => committers.push(t),
                Err(e) if committers.is_empty() => {
                    return Err(Error::internal(format!(
                        "could not start the batch committer: {e}"
                    )));
                }
                Err(_) => break,
            }
        }
        Ok(Batcher { shared, committers })
    }

    /// Hands a purchase over; `answer` is called with its outcome, on a committer thread, once
    /// its batch is decided. Keep it short, and never wait in it for another purchase of this
    /// batcher (it may submit one): the committer waits for it.
    pub fn submit(&self, order_id: String, user: Option<String>, answer: Answer) {
        self.submitter().submit(order_id, user, answer);
    }

    /// A handle that submits to this batcher, for answers that submit the next purchase
    /// themselves (a closed loop of buyers with no thread each).
    pub fn submitter(&self) -> Submitter {
        Submitter(self.shared.clone())
    }
    /// One purchase, waiting for its batch's answer.
    pub fn buy(&self, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(
            order_id.to_string(),
            user.map(str::to_string),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv()
            .unwrap_or_else(|_| Err(Error::internal("the batch committer stopped")))
    }

    /// Answers everything still waiting, then stops the committers.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
        for t in self.committers.drain(..) {
            let _ = t.join();
        }
    }
}

/// Submits purchases to a [`Batcher`] (see [`Batcher::submitter`]). A purchase submitted
/// after the batcher was closed is answered with an error at once.
#[derive(Clone)]
pub struct Submitter(Arc<Shared>);

impl Submitter {
    /// As [`Batcher::submit`].
    pub fn submit(&self, order_id: String, user: Option<String>, answer: Answer) {
        let now = Instant::now();
        let wait = self.0.buyer.options().lock.wait;
        let home = self.0.buyer.home_bucket(&order_id, user.as_deref());
        let w = Waiting {
            order_id,
            user,
            since: now,
            until: now + wait,
            home,
            answer,
        };
        let mut st = self.0.lock();
        if st.closed {
            drop(st);
            (w.answer)(Err(Error::internal("the batcher was closed")));
            return;
        }
        st.waiting.push_back(w);
        // Wake a committer only when one may be waiting for this: an empty queue filled, or a
        // batch made full. Otherwise the window's own timeout wakes it.
        let max = self.0.buyer.options().batch.max;
        if st.waiting.len() == 1 || st.waiting.len() == max {
            self.0.changed.notify_one();
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next batch to send, waiting as the module documentation says; `None` once closed
    /// and empty.
    fn next_batch(&self) -> Option<Vec<Waiting>> {
        let opts = self.buyer.options().batch;
        let max = opts.max.max(1);
        let mut st = self.lock();
        loop {
            if st.waiting.is_empty() {
                if st.closed {
                    return None;
                }
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // The oldest purchase's bucket, and the purchases waiting for it: one call of a
            // bucketed SKU goes to one bucket, full, rather than a batch split into a call per
            // bucket each carrying a few (what a master spends per purchase rises as its calls
            // carry fewer). Unbucketed, every purchase is of the one group.
            let home = st.waiting[0].home;
            let n = st.waiting.iter().filter(|w| w.home == home).count();
            let due = st.waiting[0].since + opts.window;
            let now = Instant::now();
            let take = if n >= max || now >= due || st.closed {
                Some(n.min(max))
            } else if st.in_flight == 0 {
                // Nothing on its way: half now, and the other committer takes the rest at once
                // (the rule below), so the server decides one batch while this process answers
                // the other's buyers.
                Some(n.div_ceil(2))
            } else if st.in_flight < COMMITTERS && n >= st.in_flight_purchases {
                Some(n)
            } else {
                None
            };
            if let Some(k) = take {
                st.in_flight += 1;
                st.in_flight_purchases += k;
                let batch: Vec<Waiting> = if n == st.waiting.len() {
                    st.waiting.drain(..k).collect()
                } else {
                    let (mut batch, mut rest) = (Vec::with_capacity(k), VecDeque::new());
                    for w in st.waiting.drain(..) {
                        if batch.len() < k && w.home == home {
                            batch.push(w);
                        } else {
                            rest.push_back(w);
                        }
                    }
                    st.waiting = rest;
                    batch
                };
                if !st.waiting.is_empty() {
                    self.changed.notify_one();
                }
                return Some(batch);
            }
            st = self
                .changed
                .wait_timeout(st, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn commit_loop(&self, mut conn: Option<Conn>) {
        let mut backoff = Duration::from_millis(10);
        while let Some(batch) = self.next_batch() {
            let size = batch.len();
            // A panic must not leave a batch unanswered: its buyers would wait for ever.
            let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.decide(&mut conn, &batch)
            }))
            .unwrap_or_else(|_| {
                conn = None;
                Err(Error::internal(
                    "the batch committer failed (a bug in lockctl)",
                ))
            });
            let down = matches!(&answers, Err(e) if e.kind().is_outage());
            let mut retry = Vec::new();
            match answers {
                Ok(each) => {
                    let now = Instant::now();
                    for (w, a) in batch.into_iter().zip(each) {
                        match a {
                            Ok(p) if p.outcome == Buy::Busy && now < w.until => retry.push(w),
                            a => (w.answer)(a),
                        }
                    }
                }
                Err(e) => {
                    for w in batch {
                        (w.answer)(Err(e.clone()));
                    }
                }
            }
            if !retry.is_empty() {
                // The lock is held (by a lock user): pause as the atomic strategy does, then
                // put these back at the head of the queue, in their order.
                let left = retry
                    .iter()
                    .map(|w| w.until)
                    .min()
                    .unwrap_or_else(Instant::now);
                thread::sleep(busy_pause().min(left.saturating_duration_since(Instant::now())));
                let mut st = self.lock();
                for w in retry.into_iter().rev() {
                    st.waiting.push_front(w);
                }
            }
            if down {
                // The server refuses connections: pace the failures while it comes back.
                thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(500));
            } else {
                backoff = Duration::from_millis(10);
            }
            let mut st = self.lock();
            st.in_flight -= 1;
            st.in_flight_purchases -= size;
            drop(st);
            self.changed.notify_all();
        }
    }

    /// One script call for `batch` on the committer's connection (opened if needed, dropped
    /// after a failure of the call, since it may be in any state).
    fn decide(&self, conn: &mut Option<Conn>, batch: &[Waiting]) -> Result<Vec<Result<Purchase>>> {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(self.target.connect()?),
        };
        if self.buyer.options().strategy == Strategy::Atomic {
            let (answers, broken) = self.pipelined(c, batch);
            if broken {
                *conn = None;
            }
            return Ok(answers);
        }
        let purchases: Vec<(&str, Option<&str>)> = batch
            .iter()
            .map(|w| (w.order_id.as_str(), w.user.as_deref()))
            .collect();
        let answers = self.buyer.batch(c, &purchases);
        // A failed call (of a bucketed SKU's batch, one answer's) may leave the connection in
        // any state.
        let failed = |a: &Result<Purchase>| matches!(a, Err(e) if e.is_indeterminate());
        if answers
            .as_ref()
            .map_or(true, |each| each.iter().any(failed))
        {
            *conn = None;
        }
        answers
    }

    /// The `atomic` strategy's batch: each purchase its own script call, all of them sent
    /// before the first reply is read (a pipeline), so a batch costs one round trip and no
    /// purchase shares another's script. A purchase whose script the server had lost is bought
    /// the ordinary way after the others; a busy one (a lock user holds the lock) is answered
    /// busy, and the commit loop tries it again while its wait lasts. A failed send or read answers that purchase and the ones after it with
    /// the failure (each may have run), and the connection is given up (`true`). On a cluster,
    /// which has no pipeline across slots here, the purchases are made one after another.
    fn pipelined(&self, c: &mut Conn, batch: &[Waiting]) -> (Vec<Result<Purchase>>, bool) {
        let buy = |c: &mut Conn, w: &Waiting| self.buyer.buy(c, &w.order_id, w.user.as_deref());
        if self.target.is_cluster() {
            return (batch.iter().map(|w| buy(c, w)).collect(), false);
        }
        let mut sent = 0;
        let mut failed = None;
        for w in batch {
            match c.send(&self.buyer.atomic_command(&w.order_id, w.user.as_deref())) {
                Ok(()) => sent += 1,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut answers = Vec::with_capacity(batch.len());
        let mut again = Vec::new();
        for (i, w) in batch.iter().enumerate().take(sent) {
            if let Some(e) = &failed {
                answers.push(Err(e.clone()));
                continue;
            }
            let reply = c.recv::<(String, i64, String)>();
            let broken = matches!(&reply, Err(e) if e.is_indeterminate());
            // A busy answer comes back as one: the commit loop tries it again in its turn.
            match (self.buyer).atomic_answer(reply, &w.order_id, w.user.as_deref(), false) {
                Ok(Some(p)) => answers.push(Ok(p)),
                Ok(None) => {
                    again.push(i);
                    answers.push(Err(Error::internal("not yet bought")));
                }
                Err(e) if broken => {
                    failed = Some(e.clone());
                    answers.push(Err(e));
                }
                Err(e) => answers.push(Err(e)),
            }
        }
        // Unsent: the send failed (nothing of these went out after it, but the one that failed
        // may have).
        let unsent = batch.len() - answers.len();
        answers.extend((0..unsent).map(|_| {
            Err(failed
                .clone()
                .unwrap_or_else(|| Error::internal("a purchase was not sent")))
        }));
        // The ones to buy the ordinary way ran nothing (the script was lost): on this
        // connection, or on a new one when this one broke.
        let broken = failed.is_some();
        let mut fresh = None;
        for i in again {
            answers[i] = if broken {
                match &mut fresh {
                    Some(f) => buy(f, &batch[i]),
                    None => self
                        .target
                        .connect()
                        .and_then(|f| buy(fresh.insert(f), &batch[i])),
                }
            } else {
                buy(c, &batch[i])
            };
        }
        (answers, broken)
    }
}
