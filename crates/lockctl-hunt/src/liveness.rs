//! What a round's system does once its faults are undone: its stock read where it keeps it,
//! waited on until it stops moving (judged at rest), and probed with single requests until
//! it sells again (liveness).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::HuntOptions;
use super::leases::Lease;
use lockctl_core::conn::Target;
use lockctl_core::keys::StockKeys;
use lockctl_core::sku::Sku;
use lockctl_hammer::LoadOptions;
use lockctl_hammer::http::{self, HttpOptions};
use lockctl_hammer::report::Report;

/// Waits until the round's stock stops moving (two reads 150 ms apart agree, at most 2 s):
/// a system whose paused worker was continued may still be finishing a request.
pub(super) fn quiet_reader(
    target: &Target,
    opts: &HuntOptions,
    sku: &Sku,
) -> impl Fn() + Send + Sync + 'static {
    let read = stock_reader(target, opts, sku);
    move || {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = read();
        while Instant::now() < deadline {
            thread::sleep(Duration::from_millis(150));
            let now = read();
            if now.is_some() && now == last {
                return;
            }
            last = now;
        }
    }
}

/// Reads the round's stock where the system keeps it (`None` when it cannot be read).
pub(super) fn stock_reader(
    target: &Target,
    opts: &HuntOptions,
    sku: &Sku,
) -> Arc<dyn Fn() -> Option<i64> + Send + Sync> {
    let sku = sku.clone();
    match &opts.http.store {
        Some(store) => {
            let store = store.clone();
            Arc::new(move || store.0.read(&sku).ok())
        }
        None => {
            let key = opts.http.stock_key.as_ref().map_or_else(
                || StockKeys::new(&sku).stock,
                |k| k.replace("{sku}", sku.as_str()),
            );
            let target = target.clone();
            Arc::new(move || {
                let mut c = target.connect().ok()?;
                lockctl_core::stock::read_stock_at(&mut c, &sku, &key)
                    .ok()
                    .flatten()
            })
        }
    }
}

/// With stock left after the round, single requests until one buys, for at most `heal` from
/// when the faults were undone: a system that only answers busy or fails meanwhile has
/// stalled (a lock that outlived its holder, say). `None` when it sold (a probe was answered
/// "bought", or the stock fell), or nothing was left.
pub(super) fn stalled(
    target: &Target,
    opts: &HuntOptions,
    load: &LoadOptions,
    http: &HttpOptions,
    healed: Instant,
    lease: Option<&Lease>,
) -> Option<String> {
    let read = stock_reader(target, opts, &load.sku);
    let left = read()?;
    if left < http.qty as i64 {
        return None;
    }
    let probe = probe_of(load);
    let mut probe_http = http.clone();
    probe_http.rate = None;
    let deadline = healed + opts.heal;
    let mut tries = 0;
    let mut last = String::from("no answer");
    // At least one probe, whatever the round's own work took of the time.
    while tries == 0 || Instant::now() < deadline {
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            return None;
        }
        tries += 1;
        // Each probe a user nobody used: a per-user limit turns no probe away.
        let probe = LoadOptions {
            users_from: 1_000_000 + tries,
            ..probe.clone()
        };
        let answer = http::run(target, &probe, &probe_http);
        // A probe whose answer was lost (a timeout, a 503) may have sold all the same: the
        // stock fell, so the system sells again (and a later "sold out" may be true).
        if !matches!(&answer, Ok(r) if r.bought > 0) && read().is_some_and(|now| now < left) {
            return None;
        }
        match answer {
            Ok(r) if r.bought > 0 => return None,
            // Users from a file are the round's own users again: one the rule refuses (it
            // bought already) says nothing of whether the system sells.
            Ok(r) if r.limit_reached > 0 && http.users.listed_len().is_some() => return None,
            Ok(r) if r.sold_out > 0 => {
                return Some(format!(
                    "under-sold after the faults were undone: answered sold out with {left} units left"
                ));
            }
            Ok(r) => last = probe_answer(&r),
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(100));
    }
    let mut found = format!(
        "stalled: {left} units were left, and for {} ms after the faults were undone none of {tries} requests bought (the last: {last})",
        opts.heal.as_millis()
    );
    // How long the system took, when a lease it was seen to take explains the stall.
    if let Some(l) = lease {
        let seen = (tries, left);
        found.push_str(&lease_explains(
            target,
            opts,
            (&probe, &probe_http),
            l,
            healed,
            seen,
            &*read,
        ));
    }
    Some(found)
}

/// The round's load as one probe: one request, nothing seeded, no users of the round's, no
/// history.
fn probe_of(load: &LoadOptions) -> LoadOptions {
    LoadOptions {
        requests: 1,
        concurrency: 1,
        stock: None,
        users: None,
        retries: None,
        history: false,
        before_read_back: None,
        // A probe is one request, sent whole; a Ctrl-C ends the probing between probes.
        stop: None,
        ..load.clone()
    }
}

/// How long a stalled system took, when a lease it was seen to take explains the stall:
/// probed on until that lease (and a margin) has run out since the heal, at most a minute
/// more. The words that follow the stall's.
fn lease_explains(
    target: &Target,
    opts: &HuntOptions,
    (probe, probe_http): (&LoadOptions, &HttpOptions),
    l: &Lease,
    healed: Instant,
    (tries, left): (u64, i64),
    read: &dyn Fn() -> Option<i64>,
) -> String {
    let ttl = Duration::from_millis(l.ttl_ms);
    let until = healed + (ttl + LEASE_MARGIN).min(opts.heal + AFTER_HEAL_MAX);
    let again = sells_again(target, probe, probe_http, opts, until, tries, read, left)
        .map(|at| at.saturating_duration_since(healed));
    let took = match again {
        Some(d) => format!(
            "it sold again {:.1} s after the faults were undone",
            d.as_secs_f64()
        ),
        None => format!(
            "it had not sold again {:.1} s after the faults were undone",
            until.saturating_duration_since(healed).as_secs_f64()
        ),
    };
    format!(
        "; {took}; a key with a {:.1} s TTL was held ('{}', the longest lease seen)",
        tenths_up(ttl),
        l.key.escape_debug()
    )
}

/// A lease in seconds, rounded up to a tenth: a key's time to live is read after it was set,
/// so it is always a little less than the lease.
pub(super) fn tenths_up(d: Duration) -> f64 {
    (d.as_millis() as f64 / 100.0).ceil() / 10.0
}

/// Past a lease seen, the stalled system is probed this much longer.
const LEASE_MARGIN: Duration = Duration::from_secs(2);
/// And at most this long past the heal.
const AFTER_HEAL_MAX: Duration = Duration::from_secs(60);

/// When the system sold again (a probe bought, or the stock fell), probing until `until`.
#[allow(clippy::too_many_arguments)]
fn sells_again(
    target: &Target,
    probe: &LoadOptions,
    http_opts: &HttpOptions,
    opts: &HuntOptions,
    until: Instant,
    mut tries: u64,
    read: &dyn Fn() -> Option<i64>,
    left: i64,
) -> Option<Instant> {
    while Instant::now() < until {
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            return None;
        }
        tries += 1;
        let probe = LoadOptions {
            users_from: 1_000_000 + tries,
            ..probe.clone()
        };
        let answer = http::run(target, &probe, http_opts);
        if matches!(&answer, Ok(r) if r.bought > 0) || read().is_some_and(|now| now < left) {
            return Some(Instant::now());
        }
        thread::sleep(Duration::from_millis(100));
    }
    None
}

fn probe_answer(r: &Report) -> String {
    if r.busy > 0 {
        return "busy".into();
    }
    r.first_error
        .clone()
        .unwrap_or_else(|| "unclassified".into())
}
