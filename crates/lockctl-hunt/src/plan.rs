//! The hunt's schedule: each round's stock, load shape and faults, drawn from one seeded
//! generator, so that `--seed N` replays the same rounds in the same order.
//!
//! The shapes are the ones flash-sale bugs show under: small stocks (a race needs contention
//! on the last units), demand a few times the supply, closed bursts at several concurrencies,
//! open rates, and, when the system has users, bursts of one user's requests arriving
//! together (a double click).

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::nemesis::FaultKind;

/// How a round's requests arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// `concurrency` connections, each sending its next request when the last is answered.
    Burst {
        /// Connections.
        concurrency: u64,
    },
    /// Requests on a schedule, `rate` a second, on up to `concurrency` connections.
    Rate {
        /// Requests per second.
        rate: f64,
        /// The most connections.
        concurrency: u64,
    },
    /// `users` users, each with two requests in flight at once (a double click).
    DoubleClick {
        /// Users clicking.
        users: u64,
    },
    /// A sale: `buyers` connections, each clicking again a few milliseconds after a busy or
    /// failed answer until it is told sold out or `cap` has passed ([`lockctl_hammer::http::Sale`]).
    /// A round sized in time: a system that answers busy at once is still clicking when its
    /// first lease runs out.
    Sale {
        /// Buyers at once.
        buyers: u64,
        /// The round's time cap.
        cap: Duration,
    },
}

/// A sale's buyers think this long, at least, before clicking again.
pub const THINK_MIN: Duration = Duration::from_millis(5);
/// And at most this long.
pub const THINK_MAX: Duration = Duration::from_millis(50);

impl Shape {
    /// Its name in reports: `burst`, `rate` or `double-click`.
    pub fn name(&self) -> &'static str {
        match self {
            Shape::Burst { .. } => "burst",
            Shape::Rate { .. } => "rate",
            Shape::DoubleClick { .. } => "double-click",
            Shape::Sale { .. } => "sale",
        }
    }

    /// Requests in flight at once: the connections, or two a user for a double click.
    pub fn concurrency(&self) -> u64 {
        match *self {
            Shape::Burst { concurrency } | Shape::Rate { concurrency, .. } => concurrency,
            Shape::DoubleClick { users } => users * 2,
            Shape::Sale { buyers, .. } => buyers,
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Burst { concurrency } => write!(f, "a burst {concurrency} at a time"),
            Shape::Rate { rate, concurrency } => {
                write!(f, "{rate} requests/s on up to {concurrency} connections")
            }
            Shape::DoubleClick { users } => write!(
                f,
                "{} clicking twice at once",
                lockctl_core::units::count(*users, "user", "users")
            ),
            Shape::Sale { buyers, cap } => write!(
                f,
                "a sale: {} clicking until sold out, for at most {:.1} s",
                lockctl_core::units::count(*buyers, "buyer", "buyers"),
                cap.as_secs_f64()
            ),
        }
    }
}

/// One planned fault: what, when from the round's start, and for how long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannedFault {
    /// What is done.
    pub kind: FaultKind,
    /// When it strikes, from the round's start (an endpoint hunt counts from the round's first
    /// answer).
    pub after: Duration,
    /// How long it is held before it is lifted (the end of the load lifts it sooner).
    pub hold: Duration,
}

/// One round.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// The round's number, from 1.
    pub number: u64,
    /// The stock the round starts with.
    pub stock: u64,
    /// Requests in the round.
    pub requests: u64,
    /// How its requests arrive.
    pub shape: Shape,
    /// The faults done during it; empty for a round without one.
    pub faults: Vec<PlannedFault>,
    /// Every k-th request retries the one before it (`--idempotent`).
    pub retry_every: Option<u64>,
}

/// The generator of rounds.
pub struct Planner {
    rng: StdRng,
    /// The draws added since the first schedule (sales, long holds), from a stream of their
    /// own: the rest of a seed's rounds stay what they were.
    extra: StdRng,
    max_concurrency: u64,
    users: Option<u64>,
    faults: Vec<FaultKind>,
    number: u64,
    idempotent: bool,
    fixed: Fixed,
    /// Holds past the system's leases and common client timeouts, for some held faults.
    long_holds: Vec<Duration>,
    /// Every fault's hold drawn from this range instead (`--fault-ms`).
    fault_ms: Option<(Duration, Duration)>,
    /// A hold past a lease just learned, and how many more rounds must hold a fault that long
    /// ([`Planner::owe_long_hold`]).
    owed: Option<(Duration, u32)>,
    /// The most units the system's users may buy in a round (users x limit / qty), when it
    /// has both: a round's stock is never more, or its last units would be left unsold by a
    /// correct system and counted as a stall.
    most_units: Option<u64>,
}

/// How many rounds in a row hold a fault past a lease once it is learned: a pause of half the
/// web tier catches the holder about half the time, so two rounds make it likely early, and
/// the draws go on trying after.
const OWED_ROUNDS: u32 = 2;

/// What the seed of [`Planner::extra`] differs from the schedule's by.
const EXTRA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A fault held longer than this has its round made a sale that outlasts it: a round of
/// requests would be over (and the fault lifted) before the hold is up.
pub const SHORT_HOLD_MAX: Duration = Duration::from_millis(1500);

/// What the caller fixed for every round (a flag of `hammer --url`), instead of drawing it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Fixed {
    /// Every round's stock (`--stock`); `None`: drawn.
    pub stock: Option<u64>,
    /// Every round's requests (`--requests`); `None`: drawn.
    pub requests: Option<u64>,
    /// Every round's rate, requests per second (`--rate`): bursts become rate rounds at it,
    /// double clicks stay; `None`: drawn.
    pub rate: Option<f64>,
}

impl Planner {
    /// Rounds for `seed`, at most `max_concurrency` at a time; double clicks only when the
    /// system has users; faults drawn from `faults`.
    pub fn new(
        seed: u64,
        max_concurrency: u64,
        users: Option<u64>,
        faults: &[FaultKind],
    ) -> Planner {
        Planner {
            rng: StdRng::seed_from_u64(seed),
            extra: StdRng::seed_from_u64(seed ^ EXTRA),
            max_concurrency: max_concurrency.max(2),
            users,
            faults: faults.to_vec(),
            number: 0,
            idempotent: false,
            fixed: Fixed::default(),
            long_holds: Vec::new(),
            fault_ms: None,
            owed: None,
            most_units: None,
        }
    }

    /// Every round's stock at most `most` units: what the system's users may buy under its
    /// per-user limit (`None`: no bound, the default).
    pub fn with_most_units(mut self, most: Option<u64>) -> Planner {
        self.most_units = most;
        self
    }

    /// Holds some held faults (pauses, stalls) have instead of 0.3 to 1.5 s: past the
    /// system's longest lease and common client timeouts; empty: none (the default).
    pub fn with_long_holds(&mut self, holds: Vec<Duration>) {
        self.long_holds = holds;
    }

    /// The next rounds that can hold a fault (two of them) hold one for `hold`,
    /// whatever their draws: a lease longer than any seen before is tried early in the
    /// budget, not only when a draw falls on it. A `hold` that does not fit in what
    /// [`Planner::with_long_holds`] last allowed is not owed.
    pub fn owe_long_hold(&mut self, hold: Duration) {
        self.owed = Some((hold, OWED_ROUNDS));
    }

    /// Every fault held between `min` and `max` (`--fault-ms`), instead of the drawn and
    /// learned holds.
    pub fn with_fault_ms(mut self, range: Option<(Duration, Duration)>) -> Planner {
        self.fault_ms = range;
        self
    }

    /// Rounds with `fixed`'s stock, requests or rate instead of drawn ones (the draws are made
    /// all the same, so the rest of the schedule stays that seed's).
    pub fn with_fixed(mut self, fixed: Fixed) -> Planner {
        self.fixed = fixed;
        self
    }

    /// Rounds that resend some requests with the same order id, as clients retry.
    pub fn with_retries(mut self) -> Planner {
        self.idempotent = true;
        self
    }

    /// The generator, for the faults' own choices (which process).
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// The next round.
    pub fn next_round(&mut self) -> Round {
        use rand::RngExt;
        self.number += 1;
        let r = &mut self.rng;
        let stock = r.random_range(2..=12u64);
        let requests = stock * r.random_range(2..=4u64) + r.random_range(0..=stock);
        let concurrencies: Vec<u64> = [2, 4, 8, 16, 32]
            .into_iter()
            .filter(|c| *c <= self.max_concurrency)
            .collect();
        let concurrency = concurrencies[r.random_range(0..concurrencies.len())];
        let shape = match (r.random_range(0..10u32), self.users) {
            // Only users the hunt was given click: a system that knows only its own users
            // would refuse the others' logins.
            (0..=2, Some(k)) => Shape::DoubleClick {
                users: (concurrency / 2).max(1).min(k.max(1)),
            },
            (3..=4, _) => Shape::Rate {
                rate: [100.0, 300.0, 1000.0][r.random_range(0..3)],
                concurrency,
            },
            _ => Shape::Burst { concurrency },
        };
        // A third of the rounds are sales sized in time: a system that answers busy at once
        // gets through a round of requests before its first lease runs out, but not a sale.
        let x = &mut self.extra;
        let sale = x.random_range(0..10u32) < 3;
        let cap = Duration::from_millis(x.random_range(1000..=4000));
        let (long, pick, within): (bool, usize, f64) = (
            x.random_range(0..2u32) == 0,
            x.random_range(0..1024),
            x.random(),
        );
        // Requests fixed by the caller are a round's size: no sale then.
        let shape = match sale && self.fixed.requests.is_none() {
            true => Shape::Sale {
                buyers: concurrency.max(4).min(self.max_concurrency),
                cap,
            },
            false => shape,
        };
        let faults = self.draw_faults((long, pick, within));
        let faults = self.pay_owed(faults, pick);
        // A long hold is held through a sale that outlasts it by a second or more.
        let shape = match faults.iter().map(|f| f.hold).max() {
            Some(hold) if hold > SHORT_HOLD_MAX && self.fixed.requests.is_none() => Shape::Sale {
                buyers: shape.concurrency().max(4).min(self.max_concurrency),
                cap: hold + Duration::from_secs(1).max(cap.saturating_sub(hold)),
            },
            _ => shape,
        };
        // A sale's requests are a bound: every buyer clicking as fast as a buyer thinks.
        let requests = match (shape, self.fixed.requests) {
            (Shape::Sale { buyers, cap }, None) => {
                buyers * (cap.as_millis() as u64 / THINK_MIN.as_millis() as u64 + 1)
            }
            _ => requests,
        };
        let retry_every = self.idempotent.then(|| self.rng.random_range(2..=4u64));
        let shape = match (self.fixed.rate, shape) {
            (Some(rate), Shape::Rate { concurrency, .. } | Shape::Burst { concurrency }) => {
                Shape::Rate { rate, concurrency }
            }
            (_, shape) => shape,
        };
        Round {
            number: self.number,
            // A drawn stock stays within what the users may buy; a --stock given is kept (a
            // hunt after the per-user refusals asks for more than they may buy).
            stock: self
                .fixed
                .stock
                .unwrap_or_else(|| stock.min(self.most_units.unwrap_or(u64::MAX)).max(1)),
            requests: self.fixed.requests.unwrap_or(requests),
            shape,
            faults,
            retry_every,
        }
    }

    /// The round's faults: most rounds have one, some none (a bug that needs no fault is
    /// found sooner). `long`, `pick` and `within` are the draws that choose a long hold, and
    /// where in the caller's range a hold falls.
    fn draw_faults(&mut self, (long, pick, within): (bool, usize, f64)) -> Vec<PlannedFault> {
        use rand::RngExt;
        let r = &mut self.rng;
        match (self.faults.is_empty(), r.random_range(0..4u32)) {
            (true, _) | (false, 0) => Vec::new(),
            _ => {
                let kind = self.faults[r.random_range(0..self.faults.len())];
                let after = Duration::from_millis(r.random_range(0..15));
                let short = Duration::from_millis(r.random_range(300..1500));
                let hold = match self.fault_ms {
                    Some((lo, hi)) => lo + (hi - lo).mul_f64(within),
                    None if long && kind.is_held() && !self.long_holds.is_empty() => {
                        self.long_holds[pick % self.long_holds.len()]
                    }
                    None => short,
                };
                vec![PlannedFault { kind, after, hold }]
            }
        }
    }

    /// The faults drawn, or, when a hold past a learned lease is owed and fits, one held
    /// fault that long: the drawn kind if it is held, else a held kind picked by `pick`
    /// (pauses of the system's own processes first: they stop a holder, not everyone).
    fn pay_owed(&mut self, drawn: Vec<PlannedFault>, pick: usize) -> Vec<PlannedFault> {
        let Some((hold, left)) = self.owed else {
            return drawn;
        };
        if self.fault_ms.is_some() || !self.long_holds.contains(&hold) {
            self.owed = None;
            return drawn;
        }
        let held: Vec<FaultKind> = [
            FaultKind::PauseWorker,
            FaultKind::PauseHolder,
            FaultKind::Stall,
            FaultKind::DbLock,
            FaultKind::RedisPause,
        ]
        .into_iter()
        .filter(|k| self.faults.contains(k))
        .collect();
        if held.is_empty() {
            self.owed = None;
            return drawn;
        }
        self.owed = (left > 1).then_some((hold, left - 1));
        let first = drawn.first();
        let kind = match first {
            Some(f) if f.kind.is_held() => f.kind,
            _ => held[pick % held.len()],
        };
        let after = first.map_or(Duration::ZERO, |f| f.after);
        vec![PlannedFault { kind, after, hold }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_replays_the_same_rounds_and_another_does_not() {
        let kinds = [FaultKind::ClientKill, FaultKind::RedisPause];
        let rounds = |seed| {
            let mut p = Planner::new(seed, 16, Some(4), &kinds);
            (0..20).map(|_| p.next_round()).collect::<Vec<_>>()
        };
        assert_eq!(rounds(7), rounds(7));
        assert_ne!(rounds(7), rounds(8));
        for r in rounds(9) {
            assert!(r.shape.concurrency() <= 16, "{r:?}");
            assert!(r.requests >= r.stock * 2, "demand exceeds supply: {r:?}");
        }
    }

    /// A third or so of the rounds are sales, sized in time, with room for every buyer to
    /// click as fast as a buyer thinks.
    #[test]
    fn some_rounds_are_sales_sized_in_time() {
        let mut p = Planner::new(3, 16, None, &[]);
        let rounds: Vec<_> = (0..60).map(|_| p.next_round()).collect();
        let sales: Vec<_> = rounds
            .iter()
            .filter_map(|r| match r.shape {
                Shape::Sale { buyers, cap } => Some((r, buyers, cap)),
                _ => None,
            })
            .collect();
        assert!((8..=30).contains(&sales.len()), "{} sales", sales.len());
        for (r, buyers, cap) in sales {
            assert!((4..=16).contains(&buyers), "{r:?}");
            assert!(cap >= Duration::from_secs(1) && cap <= Duration::from_secs(4));
            assert!(r.requests >= buyers * (cap.as_millis() as u64 / 5), "{r:?}");
        }
    }

    /// `--fault-ms` holds every fault in its range, and a hold past a short round's makes the
    /// round a sale that outlasts it.
    #[test]
    fn a_fault_range_holds_every_fault_within_it_through_a_sale() {
        let (lo, hi) = (Duration::from_millis(2000), Duration::from_millis(3000));
        let mut p =
            Planner::new(5, 16, None, &[FaultKind::PauseWorker]).with_fault_ms(Some((lo, hi)));
        let mut faulted = 0;
        for _ in 0..40 {
            let r = p.next_round();
            for f in &r.faults {
                faulted += 1;
                assert!(f.hold >= lo && f.hold <= hi, "{r:?}");
                match r.shape {
                    Shape::Sale { cap, .. } => assert!(cap >= f.hold + Duration::from_secs(1)),
                    _ => panic!("a long fault in a round that is not a sale: {r:?}"),
                }
            }
        }
        assert!(faulted >= 20, "{faulted}");
    }

    /// A hold owed past a learned lease goes to the next two rounds, whatever they drew,
    /// to a pause of the system's processes before a pause of Redis; it is dropped when it
    /// does not fit the budget's holds, and never given to kill-only fault lists.
    #[test]
    fn a_hold_owed_past_a_learned_lease_is_held_by_the_next_two_rounds() {
        let past = Duration::from_millis(22_000);
        let kinds = [
            FaultKind::RedisPause,
            FaultKind::PauseWorker,
            FaultKind::KillWorker,
        ];
        for seed in 0..20 {
            let mut p = Planner::new(seed, 16, None, &kinds);
            p.with_long_holds(vec![past]);
            p.owe_long_hold(past);
            for _ in 0..2 {
                let r = p.next_round();
                assert_eq!(r.faults.len(), 1, "seed {seed}: {r:?}");
                assert_eq!(r.faults[0].hold, past, "seed {seed}: {r:?}");
                assert!(r.faults[0].kind.is_held(), "seed {seed}: {r:?}");
            }
            let rounds: Vec<_> = (0..5).map(|_| p.next_round()).collect();
            assert!(
                rounds
                    .iter()
                    .flat_map(|r| &r.faults)
                    .any(|f| f.hold != past)
            );
        }
        let mut p = Planner::new(3, 16, None, &[FaultKind::PauseWorker]);
        p.with_long_holds(vec![Duration::from_millis(2300)]);
        p.owe_long_hold(past);
        assert!(p.next_round().faults.iter().all(|f| f.hold != past));
        let mut p = Planner::new(3, 16, None, &[FaultKind::KillWorker]);
        p.with_long_holds(vec![past]);
        p.owe_long_hold(past);
        assert!(p.next_round().faults.iter().all(|f| f.hold != past));
    }

    /// With a per-user limit, no round has more stock than the users may buy, and a double
    /// click's users are among the users given.
    #[test]
    fn a_rounds_stock_and_clickers_stay_within_the_users_given() {
        let mut p = Planner::new(1, 32, Some(8), &[]).with_most_units(Some(8));
        for _ in 0..60 {
            let r = p.next_round();
            assert!(r.stock <= 8, "{r:?}");
            if let Shape::DoubleClick { users } = r.shape {
                assert!(users <= 8, "{r:?}");
            }
        }
    }

    /// Learned long holds are used by held faults only, some of the time.
    #[test]
    fn long_holds_go_to_pauses_and_stalls_and_not_to_kills() {
        let long = Duration::from_millis(2800);
        let mut p = Planner::new(11, 16, None, &[FaultKind::Stall, FaultKind::KillWorker]);
        p.with_long_holds(vec![long]);
        let rounds: Vec<_> = (0..80).map(|_| p.next_round()).collect();
        let faults = || rounds.iter().flat_map(|r| &r.faults);
        assert!(faults().any(|f| f.kind == FaultKind::Stall && f.hold == long));
        assert!(faults().any(|f| f.kind == FaultKind::Stall && f.hold < SHORT_HOLD_MAX));
        assert!(faults().all(|f| f.kind == FaultKind::Stall || f.hold < SHORT_HOLD_MAX));
    }
}
