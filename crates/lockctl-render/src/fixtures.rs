//! Hand-built rounds for the renderers' tests: no server, no driver.

use std::time::Duration;

use lockctl_core::stock::Outcome;
use lockctl_hammer::history::{History, ReadBack, StockRead};
use lockctl_hammer::report::{RunFacts, Subject};
use lockctl_hammer::{Ended, Mode, Sample};

/// A round of an endpoint that sold `sold` of `stock`, one request every millisecond, the
/// stock read after each sale.
pub(crate) fn round(stock: i64, sold: u64) -> History {
    let samples: Vec<Sample> = (0..sold)
        .map(|i| Sample {
            index: i,
            ended: Ended::Answered {
                outcome: Some(Outcome::Bought),
                remaining: None,
                order: None,
            },
            latency: Duration::from_millis(1),
            lock_wait: None,
            lock_hold: None,
            sent: Duration::from_millis(i),
            at: Duration::from_millis(i + 1),
        })
        .collect();
    let stock_reads = (0..sold)
        .map(|i| StockRead {
            sent: Duration::from_millis(i + 1),
            at: Duration::from_millis(i + 1),
            stock: stock - i as i64 - 1,
        })
        .collect();
    History {
        facts: RunFacts {
            sku: "sku<b>".into(),
            run_id: "hab".into(),
            requests: sold,
            concurrency: 1,
            strategy: Subject::Endpoint,
            mode: Mode::Http,
            qty: 1,
            ttl_ms: 0,
            wait_ms: 0,
            work_ms: 0,
            watchdog: false,
            redlock_nodes: None,
            seeded: true,
            retry_every: None,
            initial_stock: stock,
            elapsed: Duration::from_millis(sold),
            client_cpu: None,
        },
        users: Some(2),
        samples,
        faults: Vec::new(),
        read_back: ReadBack {
            stock_after: Some(stock - sold as i64),
            error: None,
            ledger: None,
        },
        stock_reads,
        hunt: None,
        went_up: None,
        restart: None,
        server: "x".into(),
        interrupted: None,
        notes: Vec::new(),
        findings: Vec::new(),
        unjudged: None,
        pipeline: None,
        http: None,
        client_max_rss_mb: None,
    }
}
