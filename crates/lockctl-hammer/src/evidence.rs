//! Everything a run observed, gathered into one value, and the one pure function from it to
//! the report and its verdict. Every kind of run (lockctl's own buyers, someone's endpoint,
//! with or without the orders pipeline) builds an [`Evidence`] and calls [`conclude`]; nothing
//! else sets a verdict.
//!
//! The order of the judgement is fixed here: the books (the stock and, for lockctl's own
//! buyers, the ledger) against the answers; then the orders in PostgreSQL, whose violations
//! make a FAIL even when Redis could not be read back; then what a restart of Redis means for
//! the verdict as it now stands; then, first among the notes, an interruption.

use crate::error::Error;
use crate::ledger_check::LedgerCheck;
use crate::readback::Restart;
use crate::report::{PipelineReport, Report, RunFacts, Verdict};
use crate::tally::Tally;
use crate::{judge, judge_http};
use lockctl_core::units::count;

/// What was read back after the load.
pub enum Books {
    /// lockctl's own buyers: the stock and this run's ledger entries, or why they could not
    /// be read.
    Ledger(Result<(i64, LedgerCheck), lockctl_core::Error>),
    /// Someone's endpoint: the stock key, or why it could not be read. No ledger is kept
    /// there.
    Stock(Result<i64, Error>),
    /// Someone's endpoint with no pattern saying which answers sold anything: nothing was
    /// read, and nothing is judged.
    Unjudged,
}

/// Everything one run observed.
pub struct Evidence<'a> {
    /// What was run.
    pub facts: &'a RunFacts,
    /// What every request was told, folded.
    pub tally: &'a Tally,
    /// What was read back after the load.
    pub books: Books,
    /// Signs that stock was put back during the run, if any were seen.
    pub went_up: Option<String>,
    /// The orders pipeline's report and its violations (`--queue --db`).
    pub pipeline: Option<(PipelineReport, Vec<String>)>,
    /// Whether Redis restarted during the run, when asked; and its address, for the note.
    pub restart: Option<Restart>,
    /// The Redis server's address, for the restart note.
    pub server: String,
    /// `Some((made, requested))` when a signal stopped the run short.
    pub interrupted: Option<(u64, u64)>,
    /// Notes of the driver's own (an open model's late requests).
    pub notes: Vec<String>,
    /// Promises found broken by checks beyond the books (the hunt's per-user limit, order
    /// rows, a system that stopped selling): each a violation, so the verdict is FAIL.
    pub findings: Vec<String>,
    /// Something a PASS would rest on that lockctl could not read (the order rows): no PASS
    /// is claimed then, only a FAIL the rest shows.
    pub unjudged: Option<String>,
}

/// The report of a run: the one judgement of every kind of run.
pub fn conclude(ev: Evidence<'_>) -> Report {
    let (facts, t) = (ev.facts, ev.tally);
    let went_up = ev.went_up.as_deref();
    let mut report = match ev.books {
        Books::Ledger(Ok((final_stock, ledger))) => {
            judge::verdict(facts, t, final_stock, ledger, went_up)
        }
        Books::Ledger(Err(e)) => judge::unreadable(facts, t, &e),
        Books::Stock(Ok(final_stock)) => judge_http::verdict(facts, t, final_stock, went_up),
        Books::Stock(Err(e)) => judge_http::unreadable(facts, t, &e),
        Books::Unjudged => judge_http::nothing_to_judge(facts, t),
    };
    if let Some((pipe, violations)) = ev.pipeline {
        with_pipeline(&mut report, pipe, violations);
    }
    if !ev.findings.is_empty() {
        report.violations.extend(ev.findings);
        report.verdict = Verdict::Fail;
        report.unknown_because = None;
    }
    if let Some(why) = ev.unjudged
        && report.verdict == Verdict::Pass
    {
        report.verdict = Verdict::Unknown;
        report.unknown_because = Some(why);
    }
    // Said of the verdict as it now stands, the pipeline's findings included.
    report.notes.extend(
        ev.restart
            .and_then(|r| r.note(&ev.server, report.verdict, facts.strategy)),
    );
    report.notes.extend(ev.notes);
    if let Some((made, requested)) = ev.interrupted {
        report.interrupted = true;
        report.notes.insert(
            0,
            format!(
                "interrupted: {made} of {} made; the report covers those",
                count(requested, "request", "requests")
            ),
        );
    }
    report
}

/// Adds the pipeline's findings to `report`: its violations, and stock consumed == units
/// persisted once the queue has drained.
fn with_pipeline(report: &mut Report, pipe: PipelineReport, violations: Vec<String>) {
    report.violations.extend(violations);
    if let Some(consumed) = report.consumed
        && pipe.drained
        && consumed != pipe.row_units
    {
        report.violations.push(format!(
            "the stock fell by {consumed} but PostgreSQL holds {} units of this run",
            pipe.row_units
        ));
    }
    if !report.violations.is_empty() {
        // A FAIL, even where the stock could not be read back: nothing about it is unknown.
        report.verdict = Verdict::Fail;
        report.unknown_because = None;
    }
    report.pipeline = Some(pipe);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::options::Mode;
    use crate::report::{Ended, Sample};
    use lockctl_core::error::ErrorKind;
    use lockctl_core::stock::{Buy, Strategy};

    fn facts(requests: u64, initial_stock: i64) -> RunFacts {
        RunFacts {
            sku: "sku_886".into(),
            run_id: "hTEST".into(),
            requests,
            concurrency: 2,
            strategy: Strategy::Lock.into(),
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
            elapsed: Duration::from_millis(10),
            client_cpu: None,
        }
    }

    /// Request `index`, ended so, answered a millisecond after the one before.
    fn sample(index: u64, ended: Ended) -> Sample {
        Sample {
            index,
            ended,
            latency: Duration::from_micros(100),
            lock_wait: None,
            lock_hold: None,
            sent: Duration::from_millis(index),
            at: Duration::from_millis(index),
        }
    }

    /// `bought` buyers told "bought" (indices 0..), then sold-out answers up to `requests`.
    fn tally(requests: u64, bought: u64, left: i64) -> Tally {
        let mut t = Tally::new(requests, 1);
        for index in 0..requests {
            let outcome = match index < bought {
                true => Buy::Bought { remaining: left },
                false => Buy::SoldOut { remaining: left },
            };
            t.add(&sample(
                index,
                Ended::Done {
                    outcome,
                    replayed: false,
                    overran_lease: false,
                },
            ));
        }
        t
    }

    /// The ledger as it should be: one unit for each buyer told "bought".
    fn ledger(t: &Tally, bought: u64) -> LedgerCheck {
        let mut check = LedgerCheck::new(t, "hTEST");
        for index in 0..bought {
            check.entry(t, index, 1);
        }
        check
    }

    fn evidence<'a>(f: &'a RunFacts, t: &'a Tally, books: Books) -> Evidence<'a> {
        Evidence {
            facts: f,
            tally: t,
            books,
            went_up: None,
            pipeline: None,
            restart: Some(Restart::No),
            server: "127.0.0.1:6379".into(),
            interrupted: None,
            notes: Vec::new(),
            findings: Vec::new(),
            unjudged: None,
        }
    }

    #[test]
    fn books_that_add_up_pass_and_one_unit_too_many_fails() {
        let (f, t) = (facts(10, 3), tally(10, 3, 0));
        let r = conclude(evidence(&f, &t, Books::Ledger(Ok((0, ledger(&t, 3))))));
        assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
        // The stock fell by 4 for 3 told "bought": a unit sold to nobody.
        let r = conclude(evidence(&f, &t, Books::Ledger(Ok((-1, ledger(&t, 3))))));
        assert_eq!(r.verdict, Verdict::Fail);
    }

    #[test]
    fn unreadable_books_are_unknown_but_a_pipeline_violation_still_fails() {
        let (f, t) = (facts(10, 3), tally(10, 3, 0));
        let gone = || lockctl_core::Error::internal("the stock is gone");
        let r = conclude(evidence(&f, &t, Books::Ledger(Err(gone()))));
        assert_eq!(r.verdict, Verdict::Unknown);
        let mut ev = evidence(&f, &t, Books::Ledger(Err(gone())));
        ev.pipeline = Some((
            PipelineReport::default(),
            vec!["order hTEST-1 was told bought and is not in PostgreSQL".into()],
        ));
        let r = conclude(ev);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.unknown_because, None);
    }

    #[test]
    fn an_endpoint_without_patterns_is_unjudged_and_an_interruption_comes_first() {
        let (f, t) = (facts(4, 0), tally(4, 0, 0));
        let mut ev = evidence(&f, &t, Books::Unjudged);
        ev.restart = None;
        ev.interrupted = Some((4, 10));
        ev.notes = vec!["a driver's note".into()];
        let r = conclude(ev);
        assert_eq!(r.verdict, Verdict::Unknown);
        assert!(r.interrupted);
        assert!(
            r.notes[0].starts_with("interrupted: 4 of 10 requests made"),
            "{:?}",
            r.notes
        );
        assert!(r.notes.iter().any(|n| n == "a driver's note"));
    }

    /// Issue 50, item 5: a `--bought-if` that matches nothing (`json:/code="0"` for a shop
    /// answering `{"code":0}`) leaves every answer unclassified, each "may have bought": the
    /// stock fell by 4 and the books added up within that, so the run passed with nothing
    /// classified. Nothing was judged: unknown, naming an answer no pattern matched.
    #[test]
    fn a_run_whose_stock_fell_with_no_answer_classified_bought_is_unjudged_and_names_one() {
        let f = facts(6, 4);
        let mut t = Tally::new(6, 1);
        for index in 0..6 {
            t.add(&sample(
                index,
                Ended::Failed {
                    kind: ErrorKind::Unclassified,
                    indeterminate: true,
                    message: r#"HTTP 200 matched no pattern: {"code":0}"#.into(),
                    hint: None,
                },
            ));
        }
        let r = conclude(evidence(&f, &t, Books::Stock(Ok(0))));
        assert_eq!(r.verdict, Verdict::Unknown, "{:?}", r.violations);
        let why = r.unknown_because.unwrap_or_default();
        assert!(
            why.starts_with("nothing was judged: the stock fell by 4 but no answer was classified \"bought\" (6 answers matched no pattern, the first: HTTP 200 matched no pattern: {\"code\":0})"),
            "{why}"
        );
        assert!(why.contains("check the \"bought\" pattern"), "{why}");
    }

    /// Issue 50, item 5, on lockctl's own buyers: every lease lost under `fenced`, nothing
    /// sold while 3 units were there. Safe, but it shows nothing: not a plain PASS beside a
    /// strategy that really sold.
    #[test]
    fn a_run_that_sold_nothing_while_stock_was_there_is_not_a_pass() {
        let f = facts(5, 3);
        let mut t = Tally::new(5, 1);
        for index in 0..5 {
            t.add(&sample(
                index,
                Ended::Done {
                    outcome: Buy::LeaseLost,
                    replayed: false,
                    overran_lease: false,
                },
            ));
        }
        let r = conclude(evidence(&f, &t, Books::Ledger(Ok((3, ledger(&t, 0))))));
        assert_eq!(r.verdict, Verdict::Unknown, "{:?}", r.violations);
        assert_eq!(
            r.unknown_because.as_deref(),
            Some(
                "nothing was sold: 5 requests met a stock of 3 and none bought (5 lease lost); a run that sells nothing shows nothing about overselling"
            )
        );
        // With no stock to sell, selling nothing is the right answer: a PASS.
        let (f, t) = (facts(5, 0), tally(5, 0, 0));
        let r = conclude(evidence(&f, &t, Books::Ledger(Ok((0, ledger(&t, 0))))));
        assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    }

    #[test]
    fn a_restart_is_said_of_the_verdict_as_it_ends() {
        let (f, t) = (facts(10, 3), tally(10, 3, 0));
        let mut ev = evidence(&f, &t, Books::Stock(Ok(0)));
        ev.restart = Some(Restart::Yes { keeps: Some(false) });
        let r = conclude(ev);
        assert!(
            r.notes.iter().any(|n| n.contains("restarted")),
            "{:?}",
            r.notes
        );
    }
}
