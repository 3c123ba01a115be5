//! The hammer's pipeline without a server, as hyperfine tests its own with a mock executor: a
//! fake [`Driver`] sends the run's requests from several threads to a fake shop kept in
//! memory, and what the buyers were told goes the way of a real run: folded into a `Tally`,
//! the shop's books read back into `Books`, one `Evidence`, the one judgement (`conclude`),
//! then the renderers. Each fake shop breaks one promise on purpose, and the verdict must
//! name it; a shop that keeps them all must pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use lockctl::advice::CliAdvice;
use lockctl_core::error::{Error, ErrorKind, Result};
use lockctl_core::stock::{Buy, Strategy};
use lockctl_hammer::drive::{Driven, Driver};
use lockctl_hammer::evidence::{Books, Evidence, conclude};
use lockctl_hammer::tally::Tally;
use lockctl_hammer::{Ended, LedgerCheck, Mode, Report, Restart, RunFacts, Sample, Verdict};
use lockctl_render::{self as render, Context};

use crate::contract::HAMMER_FIELDS;

const RUN_ID: &str = "hFAKE";

/// The one promise a fake shop breaks, at its `at`-th purchase (counted from 0 in the order
/// the shop served them, whichever thread sent it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Breaks {
    /// None: every purchase is decided under one lock, as the `atomic` strategy does.
    Nothing,
    /// Sells one unit past zero (the oversell a lost lock allows).
    BelowZero,
    /// Deducts and answers "bought", but writes no ledger entry (a lost write).
    Ledger { at: u64 },
    /// Answers "sold out" while stock is left (an under-sell), deducting nothing.
    SoldOutEarly { at: u64 },
    /// Deducts and ledgers, then answers an error that says nothing can have been applied
    /// (a lost answer the buyer cannot account for).
    RefusedAfterDeducting { at: u64 },
}

/// A flash sale kept in memory: the stock, the ledger by request, and the one promise it breaks.
struct Shop {
    books: Mutex<(i64, HashMap<u64, i64>)>,
    served: AtomicU64,
    breaks: Breaks,
}

impl Shop {
    fn new(stock: i64, breaks: Breaks) -> Shop {
        Shop {
            books: Mutex::new((stock, HashMap::new())),
            served: AtomicU64::new(0),
            breaks,
        }
    }

    /// One purchase of a unit by request `index`: what its buyer is told.
    fn buy(&self, index: u64) -> Ended {
        let mut books = self.books.lock().unwrap();
        let nth = self.served.fetch_add(1, Ordering::SeqCst);
        let (stock, ledger) = &mut *books;
        let floor = match self.breaks {
            Breaks::BelowZero => -1,
            _ => 0,
        };
        if self.breaks == (Breaks::SoldOutEarly { at: nth }) || *stock <= floor {
            return done(Buy::SoldOut {
                remaining: (*stock).max(0),
            });
        }
        *stock -= 1;
        if self.breaks != (Breaks::Ledger { at: nth }) {
            ledger.insert(index, 1);
        }
        if self.breaks == (Breaks::RefusedAfterDeducting { at: nth }) {
            return Ended::Failed {
                kind: ErrorKind::Redis,
                indeterminate: false,
                message: "refused".into(),
                hint: None,
            };
        }
        done(Buy::Bought { remaining: *stock })
    }

    /// The books as a run reads them back: the stock, and this run's ledger checked against
    /// what the buyers were told.
    fn read_back(&self, t: &Tally) -> (i64, LedgerCheck) {
        let books = self.books.lock().unwrap();
        let mut check = LedgerCheck::new(t, RUN_ID);
        for (&index, &units) in &books.1 {
            check.entry(t, index, units);
        }
        (books.0, check)
    }
}

fn done(outcome: Buy) -> Ended {
    Ended::Done {
        outcome,
        replayed: false,
        overran_lease: false,
    }
}

/// Sends `requests` purchases to a shop, `concurrency` at a time, each thread taking the next
/// request number as the real drivers do, and folds the answers as they come back.
struct FakeDriver<'a> {
    shop: &'a Shop,
    requests: u64,
    concurrency: u64,
}

impl Driver for FakeDriver<'_> {
    fn drive(&self, _run_id: &str) -> Result<Driven> {
        let next = AtomicU64::new(0);
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let mut tally = Tally::new(self.requests, 1);
        thread::scope(|s| {
            for _ in 0..self.concurrency {
                let (tx, next) = (tx.clone(), &next);
                s.spawn(move || {
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        if index >= self.requests {
                            break;
                        }
                        let sent = started.elapsed();
                        let ended = self.shop.buy(index);
                        let at = started.elapsed();
                        let sample = Sample {
                            index,
                            ended,
                            latency: at - sent,
                            lock_wait: None,
                            lock_hold: None,
                            sent,
                            at,
                        };
                        tx.send(sample).expect("the driver folds every answer");
                    }
                });
            }
            drop(tx);
            for sample in rx {
                tally.add(&sample);
            }
        });
        Ok(Driven {
            tally,
            service: None,
            late: 0,
            max_lag: Duration::ZERO,
            taken: None,
        })
    }
}

fn facts(requests: u64, concurrency: u64, initial_stock: i64) -> RunFacts {
    RunFacts {
        sku: "sku_886".into(),
        run_id: RUN_ID.into(),
        requests,
        concurrency,
        strategy: Strategy::Atomic.into(),
        mode: Mode::Threads,
        qty: 1,
        ttl_ms: 5000,
        wait_ms: 5000,
        work_ms: 0,
        watchdog: false,
        redlock_nodes: None,
        seeded: true,
        retry_every: None,
        initial_stock,
        elapsed: Duration::from_millis(1),
        client_cpu: None,
    }
}

/// A whole run against `shop`, from the driver to the report, as `lockctl_hammer::run` does
/// it with Redis in place of the shop.
fn run(shop: &Shop, requests: u64, concurrency: u64, stock: i64) -> Report {
    let driver = FakeDriver {
        shop,
        requests,
        concurrency,
    };
    let driven = driver.drive(RUN_ID).expect("the fake driver never fails");
    let facts = facts(requests, concurrency, stock);
    conclude(Evidence {
        books: Books::Ledger(Ok(shop.read_back(&driven.tally))),
        ..evidence(&facts, &driven.tally)
    })
}

fn evidence<'a>(facts: &'a RunFacts, tally: &'a Tally) -> Evidence<'a> {
    Evidence {
        facts,
        tally,
        books: Books::Unjudged,
        went_up: None,
        pipeline: None,
        restart: Some(Restart::No),
        server: "fake".into(),
        interrupted: None,
        notes: Vec::new(),
        findings: Vec::new(),
        unjudged: None,
    }
}

/// Fails unless one of the report's violations mentions `needle`.
#[track_caller]
fn assert_violation(r: &Report, needle: &str) {
    assert_eq!(r.verdict, Verdict::Fail, "{:?}", r.violations);
    assert!(
        r.violations.iter().any(|v| v.contains(needle)),
        "no violation mentions {needle:?}: {:?}",
        r.violations
    );
}

#[test]
fn a_shop_that_keeps_its_promises_passes_and_every_request_is_accounted_for() {
    let (requests, concurrency, stock) = (200, 8, 37);
    let shop = Shop::new(stock, Breaks::Nothing);
    let r = run(&shop, requests, concurrency, stock);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    assert_eq!(r.bought, stock as u64);
    assert_eq!(r.sold_out, requests - stock as u64);
    assert_eq!((r.errors, r.oversold), (0, 0));
    assert_eq!(r.final_stock, Some(0));
    assert_eq!(r.consumed, Some(stock));
    assert_eq!(r.ledger_qty, Some(stock));

    // The renderers take the same report: the contract's JSON fields, the verdict in words.
    let doc = serde_json::to_value(render::hammer_document(
        std::slice::from_ref(&r),
        &Context::default(),
        &CliAdvice,
    ))
    .unwrap();
    for field in HAMMER_FIELDS {
        assert!(!doc[field].is_null(), "{field} missing from {doc}");
    }
    assert_eq!(doc["verdict"], "pass");
    assert_eq!(doc["bought"], stock);
    assert_eq!(doc["requests"], requests);
    assert!(render::hammer_text(&r, false, &CliAdvice).contains("PASS"));
}

#[test]
fn a_shop_that_sells_below_zero_is_failed_as_oversold() {
    let shop = Shop::new(10, Breaks::BelowZero);
    let r = run(&shop, 40, 4, 10);
    assert_eq!(r.oversold, 1, "{:?}", r.violations);
    assert_eq!(r.final_stock, Some(-1));
    assert_violation(&r, "negative");
    let doc = serde_json::to_value(render::hammer_document(
        std::slice::from_ref(&r),
        &Context::default(),
        &CliAdvice,
    ))
    .unwrap();
    assert_eq!(
        (doc["verdict"].as_str(), doc["oversold"].as_u64()),
        (Some("fail"), Some(1))
    );
    assert!(render::hammer_text(&r, false, &CliAdvice).contains("FAIL"));
}

#[test]
fn a_sale_the_ledger_lost_is_failed() {
    let shop = Shop::new(10, Breaks::Ledger { at: 3 });
    let r = run(&shop, 40, 4, 10);
    assert_eq!(r.bought, 10);
    assert_eq!(r.ledger_qty, Some(9));
    assert_violation(&r, "told it bought but is not in the ledger");
}

#[test]
fn a_sold_out_answer_while_stock_was_left_is_failed_as_an_under_sell() {
    // The stock outlasts the requests, so only the early "sold out" can leave a unit unsold.
    let shop = Shop::new(50, Breaks::SoldOutEarly { at: 7 });
    let r = run(&shop, 40, 4, 50);
    assert_eq!((r.bought, r.sold_out), (39, 1));
    assert_violation(&r, "under-sold");
}

#[test]
fn a_deduction_answered_as_a_refusal_is_failed() {
    let shop = Shop::new(10, Breaks::RefusedAfterDeducting { at: 5 });
    let r = run(&shop, 40, 4, 10);
    assert_eq!((r.bought, r.errors, r.indeterminate), (9, 1, 0));
    assert_violation(&r, "its buyer was not told it bought");
}

#[test]
fn books_that_cannot_be_read_back_claim_nothing() {
    let shop = Shop::new(10, Breaks::Nothing);
    let driven = FakeDriver {
        shop: &shop,
        requests: 20,
        concurrency: 4,
    }
    .drive(RUN_ID)
    .expect("the fake driver never fails");
    let facts = facts(20, 4, 10);
    let gone = Error::Timeout {
        addr: "fake".into(),
        after: Duration::from_millis(500),
    };
    let r = conclude(Evidence {
        books: Books::Ledger(Err(gone)),
        ..evidence(&facts, &driven.tally)
    });
    assert_eq!(r.verdict, Verdict::Unknown, "{:?}", r.violations);
    assert_eq!((r.bought, r.final_stock), (10, None));
    let doc = serde_json::to_value(render::hammer_document(
        std::slice::from_ref(&r),
        &Context::default(),
        &CliAdvice,
    ))
    .unwrap();
    assert_eq!(doc["verdict"], "unknown");
}

#[test]
fn a_restart_that_may_have_put_stock_back_is_said_beside_the_verdict() {
    // Stale books: Redis restarted during the run, so the stock read back may be an older
    // snapshot's. The verdict stands on the books; a note says what the restart means.
    let shop = Shop::new(10, Breaks::Nothing);
    let driven = FakeDriver {
        shop: &shop,
        requests: 20,
        concurrency: 4,
    }
    .drive(RUN_ID)
    .expect("the fake driver never fails");
    let facts = facts(20, 4, 10);
    let r = conclude(Evidence {
        books: Books::Ledger(Ok(shop.read_back(&driven.tally))),
        restart: Some(Restart::Yes { keeps: Some(false) }),
        ..evidence(&facts, &driven.tally)
    });
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    assert!(
        r.notes.iter().any(|n| n.contains("restarted")),
        "{:?}",
        r.notes
    );
}
