//! The buyers' side of the books, kept as the answers come in: counts, latency histograms, a
//! bit per request for "told bought" and "may have bought", and a thinned stock timeline.
//!
//! Nothing here grows with the number of requests except two bitsets (an eighth of a byte per
//! request each), so a hammer of ten million purchases holds the same few megabytes as one of
//! a hundred thousand: samples are folded in as they arrive and never kept. The order of the
//! answers in time is kept the same way, as two extremes ([`Precedence`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::options::TIMELINE_POINTS;
use crate::report::{Ended, Sample};
use lockctl_core::Hint;
use lockctl_core::error::ErrorKind;
use lockctl_core::stock::{Buy, Outcome};

/// One bit per request.
#[derive(Clone, Debug, Default)]
pub struct Bits(Vec<u64>);

impl Bits {
    /// No bit set, with room for at least `len` bits.
    pub fn new(len: u64) -> Bits {
        Bits(vec![0; len.div_ceil(64) as usize])
    }

    /// Sets bit `i`; beyond the room, nothing.
    pub fn set(&mut self, i: u64) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w |= 1 << (i % 64);
        }
    }

    /// How many bits.
    pub fn len(&self) -> u64 {
        self.0.len() as u64 * 64
    }

    /// Whether there is room for no bit.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether bit `i` is set; beyond the room, false.
    pub fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// The indices set here and not in `other`.
    pub fn minus<'a>(&'a self, other: &'a Bits) -> impl Iterator<Item = u64> + 'a {
        self.0.iter().enumerate().flat_map(move |(n, &w)| {
            let rest = w & !other.0.get(n).copied().unwrap_or(0);
            (0..64)
                .filter(move |b| rest & (1 << b) != 0)
                .map(move |b| n as u64 * 64 + b)
        })
    }
}

/// What the buyers were told, counted.
#[derive(Debug)]
pub struct Tally {
    pub(super) qty: u64,
    pub(super) latency: Histogram<u64>,
    pub(super) wait: Histogram<u64>,
    pub(super) hold: Histogram<u64>,
    pub(super) samples: u64,
    pub(super) bought: u64,
    pub(super) replayed: u64,
    pub(super) sold_out: u64,
    pub(super) busy: u64,
    pub(super) lease_lost: u64,
    pub(super) limit_reached: u64,
    pub(super) answered: u64,
    pub(super) errors: u64,
    pub(super) indeterminate: u64,
    pub(super) lease_overrun: u64,
    pub(super) errors_by_kind: BTreeMap<ErrorKind, u64>,
    /// The message of the earliest failure, and when it ended.
    pub(super) first_error: Option<(Duration, String, Option<Hint>)>,
    /// The earliest answer no pattern classified (a 2xx that matched none, or another
    /// status no class holds), and how many there were: what a `--bought-if` that matches
    /// nothing leaves behind.
    pub(super) unmatched: (u64, Option<(Duration, String)>),
    /// Requests told they bought now (replays excluded).
    pub(super) told_bought: Bits,
    /// Requests whose failure may have deducted anyway.
    pub(super) maybe_applied: Bits,
    /// The first "sold out" answer and the last sale's order sent.
    precedence: Precedence,
    /// Orders of two requests, held until both have come.
    pairs: Pairs,
    timeline: Timeline,
    /// Every record as it came, when a history is kept ([`Tally::keeping`]).
    kept: Option<Vec<Sample>>,
}

/// The earliest "sold out" answer and the latest sale, by the run's clock. Some "sold out"
/// came before some sale was even asked for exactly when the first of those answers came
/// before the last of those sales was sent, so these two extremes decide it, whatever the
/// number of requests: a comparison a request, folded in with the rest of the tally.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Precedence {
    /// When the first "sold out" answer had come (its `at`), and its request.
    first_sold_out: Option<(Duration, u64)>,
    /// The sale whose order was sent last.
    last_sale: Option<Sale>,
}

/// A request answered "bought", and when its order was first asked for: a sale answered to a
/// retry may have been made by an earlier request of the same order (whose answer was lost),
/// so it counts from the earliest send of any request of that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sale {
    /// When the order's first request was sent.
    pub sent: Duration,
    /// That request.
    pub first: u64,
    /// The request answered "bought".
    pub answered: u64,
}

impl Precedence {
    /// Request `index` was answered "sold out" by `at`.
    pub fn sold_out(&mut self, at: Duration, index: u64) {
        if self.first_sold_out.is_none_or(|first| (at, index) < first) {
            self.first_sold_out = Some((at, index));
        }
    }

    /// Request `index`, sent at `sent`, was answered "bought" (the only request of its order).
    pub fn bought(&mut self, sent: Duration, index: u64) {
        self.sale(Sale {
            sent,
            first: index,
            answered: index,
        });
    }

    /// A sale, counted from when its order was first sent.
    pub fn sale(&mut self, sale: Sale) {
        if self.last_sale.is_none_or(|last| sale > last) {
            self.last_sale = Some(sale);
        }
    }

    /// A "sold out" answered strictly before an order later answered "bought" was first sent:
    /// `((answered at, request), sale)`. Answers that overlap in time say nothing of their
    /// order, so they never count.
    pub fn sold_out_before_a_sale(&self) -> Option<((Duration, u64), Sale)> {
        let (sold_out, sale) = (self.first_sold_out?, self.last_sale?);
        (sold_out.0 < sale.sent).then_some((sold_out, sale))
    }
}

/// The orders of two requests (a request and its retry), each held until both have come:
/// their sale counts from the earlier send of the two ([`Sale`]).
#[derive(Debug, Default)]
struct Pairs {
    /// Every `every`-th request retries the one before it; `None`: no retries.
    every: Option<u64>,
    /// The requests of the run.
    requests: u64,
    /// The order's first request to come (by its original's index): when it was sent, which
    /// request it was, and whether it was a sale.
    waiting: HashMap<u64, (Duration, u64, bool)>,
}

impl Pairs {
    /// The original request of `index`'s order, when that order has two requests.
    fn order_of(&self, index: u64) -> Option<u64> {
        let every = self.every?;
        let base = crate::options::original_of(Some(every), index);
        let retried = base != index
            || (index + 1 < self.requests
                && crate::options::original_of(Some(every), index + 1) == index);
        retried.then_some(base)
    }

    /// Request `index`, sent at `sent`, came (a sale when `sale`): the sales it completes (no
    /// allocation: this is on every request's path).
    fn came(&mut self, index: u64, sent: Duration, sale: bool) -> [Option<Sale>; 2] {
        let alone = |sent, index| Sale {
            sent,
            first: index,
            answered: index,
        };
        let Some(base) = self.order_of(index) else {
            return [sale.then(|| alone(sent, index)), None];
        };
        let Some((other_sent, other, other_sale)) = self.waiting.remove(&base) else {
            self.waiting.insert(base, (sent, index, sale));
            return [None, None];
        };
        let (first_sent, first) = (sent, index).min((other_sent, other));
        let of = |sold: bool, answered| {
            sold.then_some(Sale {
                sent: first_sent,
                first,
                answered,
            })
        };
        [of(sale, index), of(other_sale, other)]
    }

    /// The sales of orders whose other request never came, each from its own send.
    fn unpaired(&self) -> impl Iterator<Item = Sale> + '_ {
        self.waiting
            .values()
            .filter(|(.., sale)| *sale)
            .map(|&(sent, index, _)| Sale {
                sent,
                first: index,
                answered: index,
            })
    }
}

pub(super) fn new_histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to one hour at three significant figures.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

pub(super) fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

impl Tally {
    /// An empty tally for `requests` purchases of `qty` units each.
    pub fn new(requests: u64, qty: u64) -> Tally {
        Tally {
            qty,
            latency: new_histogram(),
            wait: new_histogram(),
            hold: new_histogram(),
            samples: 0,
            bought: 0,
            replayed: 0,
            sold_out: 0,
            busy: 0,
            lease_lost: 0,
            limit_reached: 0,
            answered: 0,
            errors: 0,
            indeterminate: 0,
            lease_overrun: 0,
            errors_by_kind: BTreeMap::new(),
            first_error: None,
            unmatched: (0, None),
            told_bought: Bits::new(requests),
            maybe_applied: Bits::new(requests),
            precedence: Precedence::default(),
            pairs: Pairs {
                requests,
                ..Pairs::default()
            },
            timeline: Timeline::default(),
            kept: None,
        }
    }

    /// The same tally, keeping every record as well when `history` is set (for the run's
    /// history: about a hundred bytes a request).
    pub fn keeping(mut self, history: bool) -> Tally {
        if history {
            self.kept = Some(Vec::new());
        }
        self
    }

    /// The same tally, for a run where every `every`-th request retries the one before it
    /// with the same order id (`None`: no retries): a sale counts from the earliest send of
    /// its order ([`Sale`]).
    pub fn retrying(mut self, every: Option<u64>) -> Tally {
        self.pairs.every = every.filter(|k| *k >= 2);
        self
    }

    /// A "sold out" answered before an order later answered "bought" was first sent
    /// ([`Precedence::sold_out_before_a_sale`]), orders whose retry never came included.
    pub fn sold_out_before_a_sale(&self) -> Option<((Duration, u64), Sale)> {
        let mut p = self.precedence;
        for sale in self.pairs.unpaired() {
            p.sale(sale);
        }
        p.sold_out_before_a_sale()
    }

    /// Every record folded in, in the order they came, when this tally keeps them.
    pub fn kept(&self) -> Option<&[Sample]> {
        self.kept.as_deref()
    }

    /// Folds one request's record in.
    pub fn add(&mut self, s: &Sample) {
        self.samples += 1;
        if let Some(kept) = &mut self.kept {
            kept.push(s.clone());
        }
        // A request never sent (its server stayed unreachable) took no time to answer: left
        // out, it does not pull the percentiles down to zero.
        if !matches!(&s.ended, Ended::Failed { kind, .. } if *kind == ErrorKind::Abandoned) {
            record(&mut self.latency, s.latency);
        }
        if let Some(w) = s.lock_wait {
            record(&mut self.wait, w);
        }
        if let Some(h) = s.lock_hold {
            record(&mut self.hold, h);
        }
        let sale = match &s.ended {
            Ended::Done {
                outcome,
                replayed,
                overran_lease,
            } => self.done(s, *outcome, *replayed, *overran_lease),
            Ended::Answered {
                outcome, remaining, ..
            } => self.answered(s, *outcome, *remaining),
            Ended::Failed {
                kind,
                indeterminate,
                message,
                hint,
            } => {
                self.failed(s, *kind, *indeterminate, message, hint);
                false
            }
        };
        for sale in self.pairs.came(s.index, s.sent, sale).into_iter().flatten() {
            self.precedence.sale(sale);
        }
    }

    /// Counts the answer of lockctl's own buyer to `s`; whether it was a sale made now.
    fn done(&mut self, s: &Sample, outcome: Buy, replayed: bool, overran_lease: bool) -> bool {
        match outcome {
            Buy::Bought { remaining } => {
                self.bought += 1;
                self.lease_overrun += u64::from(overran_lease);
                // A replay deducted nothing now: it may come after the stock ran out.
                if replayed {
                    self.replayed += 1;
                    return false;
                }
                self.told_bought.set(s.index);
                self.timeline.add(s.at, remaining);
                return true;
            }
            Buy::SoldOut { .. } => {
                self.sold_out += 1;
                self.precedence.sold_out(s.at, s.index);
            }
            Buy::Busy => self.busy += 1,
            Buy::LeaseLost => self.lease_lost += 1,
            Buy::LimitReached { .. } => self.limit_reached += 1,
        }
        false
    }

    /// Counts an endpoint's answer to `s`, as classified (`None`: it said nothing the patterns
    /// know); whether it was a sale.
    fn answered(&mut self, s: &Sample, outcome: Option<Outcome>, remaining: Option<i64>) -> bool {
        match outcome {
            None => self.answered += 1,
            Some(Outcome::Bought) => {
                self.bought += 1;
                self.told_bought.set(s.index);
                if let Some(stock) = remaining {
                    self.timeline.add(s.at, stock);
                }
                return true;
            }
            Some(Outcome::SoldOut) => {
                self.sold_out += 1;
                self.precedence.sold_out(s.at, s.index);
            }
            Some(Outcome::Busy) => self.busy += 1,
            Some(Outcome::LeaseLost) => self.lease_lost += 1,
            Some(Outcome::LimitReached) => self.limit_reached += 1,
        }
        false
    }

    /// Counts the failure of `s`: by kind, whether it may have deducted, and the earliest one's
    /// message.
    fn failed(
        &mut self,
        s: &Sample,
        kind: ErrorKind,
        indeterminate: bool,
        message: &str,
        hint: &Option<Hint>,
    ) {
        self.errors += 1;
        *self.errors_by_kind.entry(kind).or_insert(0) += 1;
        if indeterminate {
            self.indeterminate += 1;
            self.maybe_applied.set(s.index);
        }
        if self.first_error.as_ref().is_none_or(|(at, ..)| s.at < *at) {
            self.first_error = Some((s.at, message.to_string(), hint.clone()));
        }
        if matches!(kind, ErrorKind::Unclassified | ErrorKind::Http(_)) {
            self.unmatched.0 += 1;
            if self.unmatched.1.as_ref().is_none_or(|(at, _)| s.at < *at) {
                self.unmatched.1 = Some((s.at, message.to_string()));
            }
        }
    }

    /// Requests that ended as exactly one outcome.
    pub fn accounted(&self) -> u64 {
        self.bought
            + self.sold_out
            + self.busy
            + self.lease_lost
            + self.limit_reached
            + self.answered
            + self.errors
    }

    /// Requests recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Units the buyers were told they bought now.
    pub fn sold_qty(&self) -> u64 {
        (self.bought - self.replayed) * self.qty
    }

    /// The stock the buyers were told, in time order, at most [`TIMELINE_POINTS`] - 2 points.
    pub(super) fn timeline_points(&self) -> Vec<(Duration, i64)> {
        let mut points = self.timeline.points.clone();
        points.sort_by_key(|p| p.0);
        let step = points.len().div_ceil(TIMELINE_POINTS - 2).max(1);
        points.into_iter().step_by(step).collect()
    }
}

/// Every `stride`-th bought answer, the stride doubling whenever the buffer fills, so it holds
/// an even sample of the whole run in bounded space.
#[derive(Debug, Default)]
struct Timeline {
    points: Vec<(Duration, i64)>,
    seen: u64,
    stride: u64,
}

impl Timeline {
    fn add(&mut self, at: Duration, stock: i64) {
        self.stride = self.stride.max(1);
        if self.seen.is_multiple_of(self.stride) {
            self.points.push((at, stock));
            if self.points.len() >= 2 * TIMELINE_POINTS {
                let mut keep = false;
                self.points.retain(|_| {
                    keep = !keep;
                    keep
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }
}

#[cfg(test)]
mod tests;
