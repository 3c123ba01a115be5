//! The promises checked beyond the books once a round is healed: the per-user limit, the
//! order rows (read again while they disagree), and that the system sells again.

use std::thread;
use std::time::{Duration, Instant};

use crate::error::SqlError;
use crate::liveness::{stalled, stock_reader};
use crate::sql::SkuParam;
use crate::{HuntOptions, OrdersSql, checks, leases};
use lockctl_core::conn::Target;
use lockctl_hammer::LoadOptions;
use lockctl_hammer::history::History;
use lockctl_hammer::http::HttpOptions;
use lockctl_hammer::report::{Report, Verdict};
use std::sync::atomic::Ordering;

/// How often order rows that disagree with the answers are read again.
const ORDERS_REREAD: Duration = Duration::from_millis(250);

/// How long order rows that came late are watched once they agree, at least: a consumer that
/// flushes every second or two writes a redelivered order's second row a flush later.
const ORDERS_SETTLE: Duration = Duration::from_secs(2);

/// The promises checked beyond the books: the per-user limit, the order rows (at rest: read
/// again while they disagree, and a while after they come to agree if they came late, for at
/// most the heal), and that the system sells again after
/// the faults are undone.
pub(crate) fn findings(
    target: &Target,
    opts: &HuntOptions,
    load: &LoadOptions,
    http: &HttpOptions,
    history: &History,
    report: &Report,
    (healed, lease): (Instant, Option<&leases::Lease>),
) -> (Vec<String>, Option<String>) {
    let mut v = Vec::new();
    let mut unjudged = None;
    let qty = http.qty;
    let stopping = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
    if let (Some(users), Some(limit)) = (load.users, opts.limit) {
        v.extend(checks::user_limit(
            &history.samples,
            load.retries,
            users,
            limit,
            qty,
        ));
    }
    if let Some(orders) = &opts.orders {
        match order_findings(target, opts, orders, (load, http), history, report) {
            Ok(f) => v.extend(f),
            // lockctl's own read failed: nothing is known of the rows, so no PASS is claimed.
            Err(e) => unjudged = Some(format!("the order rows could not be read ({e})")),
        }
    }
    // An interrupted round proves nothing about liveness: its probes would not be sent. A
    // round judged unknown because nothing was sold while answers came (every request busy,
    // say) is probed all the same, whenever its stock was read: a system that never sells
    // again is stalled, not unjudged round after round (a shop whose lock leaked passed so).
    // A round in which every request failed is not: a system still starting (its proxy's
    // 502s) or never there is no stalled one, and a silent one was held against its earlier
    // rounds already (`round::gone`).
    let sold_nothing = report.final_stock.is_some() && report.errors < report.run.requests;
    if (report.verdict != Verdict::Unknown || sold_nothing)
        && !report.interrupted
        && !stopping()
        && let Some(stalled) = stalled(target, opts, load, http, healed, lease)
    {
        v.push(stalled);
    }
    (v, unjudged)
}

/// The order rows against the answers, at rest: read again while they disagree (and a while
/// after they come to agree, if they came late), for at most the heal.
fn order_findings(
    target: &Target,
    opts: &HuntOptions,
    orders: &OrdersSql,
    (load, http): (&LoadOptions, &HttpOptions),
    history: &History,
    report: &Report,
) -> Result<Vec<String>, SqlError> {
    let qty = http.qty;
    let stopping = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
    // At rest: a system that writes its orders a moment after it answers (a queue, and a
    // consumer that flushes every second or two) is read again while the rows disagree
    // with the answers, every 250 ms, for at most the heal; what disagrees then counts.
    let user_of = |base: u64| {
        http.users
            .name(load.users_from + load.users.map_or(base, |k| base % k.max(1)))
    };
    let ids = if http.classifier.takes_order_ids() {
        checks::OrderIds::Answered
    } else if http.request.uses_order() {
        checks::OrderIds::Requested(&report.run.run_id)
    } else {
        checks::OrderIds::Counted(
            http.request
                .uses_user()
                .then_some(&user_of as &dyn Fn(u64) -> String),
        )
    };
    let read_stock = stock_reader(target, opts, &load.sku);
    let check = || {
        orders
            .db
            .orders(
                &orders.query,
                SkuParam {
                    text: load.sku.as_str(),
                    format: opts.sku_format,
                },
            )
            .map(|rows| {
                // Units first: rows beyond what the stock gave up are an oversell whatever
                // the answers were, then each answer against its rows.
                // The stock is read again with the rows: a unit the system finished after
                // the client gave up (a timeout) is taken from the stock and written to a row
                // after the books were first read, and both are at rest only now.
                let seeded = report.run.initial_stock;
                let taken = read_stock().or(report.final_stock).map(|f| seeded - f);
                let mut found = checks::rows_within_stock(&rows, seeded, taken);
                found.extend(checks::order_rows(
                    &history.samples,
                    load.retries,
                    ids,
                    &rows,
                    qty,
                ));
                found
            })
    };
    // Rows that came late are watched a while longer once they agree (ORDERS_SETTLE, or
    // as long as they took to come): a consumer that delivers at least once writes its
    // duplicate a flush later. Rows that agree at the first read are at rest already.
    let (started, deadline) = (Instant::now(), Instant::now() + opts.heal);
    let mut found = check();
    let mut agreed: Option<(Instant, Duration)> = None;
    let mut late = false;
    loop {
        if matches!(&found, Ok(f) if f.is_empty()) {
            let (at, lag) = *agreed.get_or_insert((Instant::now(), started.elapsed()));
            if !late || at.elapsed() >= lag.max(ORDERS_SETTLE) {
                break;
            }
        } else {
            (agreed, late) = (None, true);
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        if stopping() {
            break;
        }
        thread::sleep(ORDERS_REREAD.min(left));
        found = check();
    }
    found
}
