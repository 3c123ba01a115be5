//! lockctl's reports as what a person or a script reads: text, JSON, Markdown, JUnit XML or
//! HTML.
//!
//! Rendering is pure (a report in, a `String` or a `Serialize` document out), so every format
//! is tested from hand-built reports with no Redis. Units live in field names (`p99_ms`,
//! `elapsed_s`). The crate speaks no command line: a fix the library names as a [`Hint`] is
//! worded by the [`Advice`] the caller passes in, and the JSON documents are typed structs
//! whose field names are the contract's. HTML goes through maud, which escapes every value
//! spliced into the markup by construction.
//!
//! Layout:
//! - here: `check`, `status` and `buy` as text, and `buy`'s JSON; `worded`: `check`'s and
//!   `status`'s JSON, each finding worded;
//! - `advice`: the [`Advice`] a caller words fixes with;
//! - `hammer`: the hammer's text, JSON and Markdown; `html`: its self-contained HTML page,
//!   with `chart`'s SVG line charts;
//! - `hunt`: the hunt's report and the strategies' matrix; `junit`: the hunt as JUnit XML;
//! - `timeline`: a round's timeline (lanes, faults, the stock) as a page;
//! - `escape`: text made safe for a terminal.
//!
//! [`Hint`]: lockctl_core::Hint

mod advice;
mod chart;
mod escape;
#[cfg(test)]
mod fixtures;
mod hammer;
mod html;
mod hunt;
mod junit;
mod timeline;
mod worded;

use std::fmt::Write as _;

pub use advice::{Advice, Unworded};
pub use escape::{terminal, terminal_lines};
pub use hammer::{
    Comparison, Context, HammerDocument, SCHEMA_VERSION, comparison_text, hammer_document,
    hammer_json, hammer_markdown, hammer_text,
};
pub use html::hammer_html;
pub use hunt::{
    CellJson, CleanedJson, FailureJson, FaultJson, HuntJson, LeaseJson, MatrixJson, Replay,
    hunt_json, hunt_text, matrix_html, matrix_json, matrix_text,
};
pub use junit::hunt_junit;
pub use timeline::timeline_html;
pub use worded::{CheckJson, NodeJson, StatusJson, check_json, status_json};

use lockctl_core::check::CheckReport;
use lockctl_core::status::Status;
use lockctl_core::stock::{Buy, Purchase, Strategy};
use lockctl_core::wire::BuyJson;

/// `check` for a person.
pub fn check_text(r: &CheckReport, advice: &dyn Advice) -> String {
    // A product other than Redis reports a redis_version of its own for compatibility: said
    // beside its own version, so that neither is mistaken for the other.
    let compat = match r.server.as_str() {
        "Redis" => String::new(),
        _ => format!(" (redis_version {})", r.redis_version),
    };
    let mut s = format!(
        "{} {}{compat} at {}: role {}, round trip {:.3} ms (max {:.3} ms)\n",
        r.server, r.version, r.addr, r.role, r.rtt_ms, r.rtt_max_ms
    );
    for n in &r.nodes {
        match (&n.rtt_ms, &n.error) {
            (Some(rtt), _) => {
                let _ = writeln!(s, "lock node {}: ok, round trip {rtt:.3} ms", n.addr);
            }
            (None, e) => {
                let _ = writeln!(
                    s,
                    "lock node {}: DOWN ({})",
                    n.addr,
                    e.as_ref().map_or("no answer".into(), |e| advice.finding(e))
                );
            }
        }
    }
    if let Some(q) = r.quorum {
        let _ = writeln!(
            s,
            "quorum: {}",
            if q { "reachable" } else { "NOT reachable" }
        );
    }
    if !r.native.is_empty() {
        let _ = writeln!(
            s,
            "native: {} (compare-and-delete without a script)",
            r.native.join(", ")
        );
    }
    for p in &r.problems {
        let _ = writeln!(s, "problem: {}", advice.finding(p));
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {}", advice.finding(w));
    }
    s.push_str(if r.ok {
        "ok: fit for locking\n"
    } else {
        "not fit for locking\n"
    });
    s
}

/// `status` for a person.
pub fn status_text(st: &Status, advice: &dyn Advice) -> String {
    let mut s = match st.stock {
        Some(stock) => format!(
            "{}: stock {stock}, seeded {}, sold {} (ledger: {} in {})\n",
            st.sku,
            st.seeded.map_or("unknown".into(), |n| n.to_string()),
            st.sold,
            lockctl_core::units::count(st.ledger_qty, "unit", "units"),
            lockctl_core::units::count(st.ledger_orders, "order", "orders")
        ),
        // A seed record without the stock key: damaged books, which the problems name.
        None if st.seeded.is_some() => format!(
            "{}: no stock key, seeded {}, sold {} (ledger: {} in {})\n",
            st.sku,
            st.seeded.unwrap_or_default(),
            st.sold,
            lockctl_core::units::count(st.ledger_qty, "unit", "units"),
            lockctl_core::units::count(st.ledger_orders, "order", "orders")
        ),
        None => format!(
            "{}: no stock (a lock name of lockctl run, or a SKU never seeded)\n",
            st.sku
        ),
    };
    match (st.reconciled, st.stock) {
        (Some(true), _) => {
            s.push_str("books: reconciled (stock + sold == seeded, ledger == sold)\n")
        }
        (Some(false), _) => {
            s.push_str("books: DO NOT RECONCILE\n");
            for p in &st.problems {
                let _ = writeln!(s, "  - {}", advice.finding(p));
            }
        }
        (None, Some(_)) => s.push_str(
            "books: cannot reconcile: no seed record (the stock was not set by lockctl seed)\n",
        ),
        (None, None) => {}
    }
    for w in &st.warnings {
        let _ = writeln!(s, "warning: {}", advice.finding(w));
    }
    if let Some(buckets) = &st.buckets {
        let _ = writeln!(
            s,
            "buckets: {}, {} in transit between them",
            buckets.len(),
            lockctl_core::units::count(st.in_transit.unwrap_or(0), "unit", "units")
        );
        for (i, b) in buckets.iter().enumerate() {
            let _ = writeln!(
                s,
                "  bucket {i}  {:<24} stock {:>6}  sold {:>6}  seeded {:>6}  moved in {:>5}  out {:>5}",
                b.sku, b.stock, b.sold, b.seeded, b.moved_in, b.moved_out
            );
        }
        s.push_str("locks: one per bucket (lockctl status '<bucket>' shows one)\n");
    } else {
        lock_lines(&mut s, st);
    }
    orders_lines(&mut s, st);
    s
}

/// The lock of an unbucketed SKU: its holder and lease, fence and waiters.
fn lock_lines(s: &mut String, st: &Status) {
    match &st.lock {
        Some(h) => {
            let _ = write!(
                s,
                "lock: held by {}, {:.3} s of lease left",
                h.token,
                h.ttl_ms as f64 / 1000.0
            );
            if let (Some(fence), Some(held)) = (h.fence, h.held_ms) {
                let _ = write!(
                    s,
                    " (fence {fence}, held for {:.3} s)",
                    held as f64 / 1000.0
                );
            }
            s.push('\n');
        }
        None => s.push_str("lock: free\n"),
    }
    let _ = writeln!(s, "fence: {}  waiters: {}", st.fence, st.waiters);
}

/// The orders pipeline's books (`status --db`).
fn orders_lines(s: &mut String, st: &Status) {
    if let Some(o) = &st.orders {
        let _ = writeln!(
            s,
            "orders: {} persisted ({} units), {} queued ({} units), {} dead-lettered ({} units), {} conflicts",
            o.persisted_orders,
            o.persisted_units,
            o.queued_orders,
            o.queued_units,
            o.dead_orders,
            o.dead_units,
            o.conflicts
        );
        if let Some(after) = &o.sale_after {
            let _ = writeln!(s, "sale: entries after {after} (the last seed)");
        }
    }
}

/// `buy` for a person, after the tutorial's three messages. `wait` is how long the buyer was
/// willing to wait for the lock (`--wait-ms`).
pub fn buy_text(sku: &str, p: &Purchase, wait: std::time::Duration) -> String {
    let mut s = match p.outcome {
        Buy::Bought { remaining } => match p.replayed {
            Some(q) => format!(
                "already bought: order {} bought {q} of {sku} before; nothing deducted now, {remaining} left",
                p.order_id
            ),
            None => format!(
                "bought, {remaining} left ({} of {sku}, order {})",
                p.qty, p.order_id
            ),
        },
        Buy::SoldOut { remaining } => {
            format!("sold out: {sku} has {remaining} left, {} wanted", p.qty)
        }
        Buy::Busy if wait.is_zero() => format!(
            "busy, try again: another buyer holds the lock on {sku} (or wait for it with --wait-ms)"
        ),
        Buy::Busy => format!(
            "busy, try again: another buyer held the lock on {sku} for the whole {} ms wait (wait longer with --wait-ms)",
            wait.as_millis()
        ),
        Buy::LeaseLost => format!(
            "lease lost: the lock on {sku} expired before the deduction; nothing was deducted \
             (raise --ttl-ms or add --watchdog)"
        ),
        Buy::LimitReached { bought, limit } => format!(
            "limit reached: this user already has {bought} of {sku} and may buy {limit} in all; \
             nothing was deducted"
        ),
    };
    s.push('\n');
    if p.overran_lease {
        s.push_str(
            "warning: the lease expired before the release: another buyer may have been inside \
             the lock at the same time (raise --ttl-ms, add --watchdog, or use --strategy fenced)\n",
        );
    }
    s
}

/// `buy --json`: the [`BuyJson`] object (the procs hammer reads the same type back).
pub fn buy_json(sku: &str, strategy: Strategy, p: &Purchase) -> BuyJson {
    BuyJson::new(sku, strategy, p)
}
