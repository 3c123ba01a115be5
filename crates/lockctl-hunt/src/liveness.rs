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
    // The users the per-user rule turned away: once every user the hunt was given has been,
    // the units left are units no user may buy, not a stall.
    let mut refused = std::collections::BTreeSet::new();
    // Whether any probe had an answer: a system none of whose probes did is not stalled but
    // gone (its process exited, its port closed), and the finding says that.
    let mut answered = false;
    // At least one probe, whatever the round's own work took of the time.
    while tries == 0 || Instant::now() < deadline {
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            return None;
        }
        tries += 1;
        let user = probe_user(opts, tries, &refused);
        let probe = LoadOptions {
            users_from: user,
            ..probe.clone()
        };
        let answer = http::run(target, &probe, &probe_http);
        answered |= match &answer {
            Ok(r) => !nothing_answered(r),
            Err(e) => matches!(e, lockctl_hammer::Error::Login { answered: true, .. }),
        };
        // A probe whose answer was lost (a timeout, a 503) may have sold all the same: the
        // stock fell, so the system sells again (and a later "sold out" may be true).
        if !matches!(&answer, Ok(r) if r.bought > 0) && read().is_some_and(|now| now < left) {
            return None;
        }
        match answer {
            Ok(r) if r.bought > 0 => return None,
            // A user the rule refuses (it bought its share already) says nothing of whether
            // the system sells: the next user is asked, and when every user given has been
            // refused, what is left is no user's to buy.
            Ok(r) if r.limit_reached > 0 => {
                refused.insert(user);
                if opts.users.is_some_and(|k| refused.len() as u64 >= k) {
                    return None;
                }
                last = "refused by the per-user rule".into();
            }
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
    if !answered {
        let after = opts
            .nemesis
            .last_fault()
            .map_or("with no fault struck before it".into(), |f| {
                format!("after {f}")
            });
        return Some(format!(
            "stopped answering {after}: {left} units were left, and for {} ms after the faults were undone none of {tries} requests was answered (the last: {last})",
            opts.heal.as_millis()
        ));
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

/// Whether a round's report is one of a system that answered nothing: every request failed,
/// and none with an answer (each refused, timed out or cut).
pub(super) fn nothing_answered(r: &Report) -> bool {
    use lockctl_core::error::ErrorKind as K;
    let told = r.bought + r.sold_out + r.busy + r.limit_reached + r.answered + r.lease_lost;
    r.errors > 0
        && told == 0
        && r.errors_by_kind
            .keys()
            .all(|k| matches!(k, K::Refused | K::TimedOut | K::Broken | K::Abandoned))
}

/// After a round the system answered nothing in: single requests (a login first, when users
/// log in) for at most `heal`, until one is answered, whatever it says. `None` when one was;
/// else what the last one came to. A system that is not there any more is not one whose
/// rounds could not be judged: it stopped serving.
pub(super) fn silent(
    target: &Target,
    opts: &HuntOptions,
    load: &LoadOptions,
    http: &HttpOptions,
) -> Option<(u64, String)> {
    let probe = probe_of(load);
    let mut probe_http = http.clone();
    probe_http.rate = None;
    probe_http.sale = None;
    let deadline = Instant::now() + opts.heal;
    let (mut tries, mut last) = (0, String::from("no answer"));
    while tries == 0 || Instant::now() < deadline {
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            return None;
        }
        tries += 1;
        let probe = LoadOptions {
            users_from: probe_user(opts, tries, &Default::default()),
            ..probe.clone()
        };
        match http::run(target, &probe, &probe_http) {
            Ok(r) if !nothing_answered(&r) => return None,
            Ok(r) => last = probe_answer(&r),
            Err(lockctl_hammer::Error::Login { answered: true, .. }) => return None,
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(100));
    }
    Some((tries, last))
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
            users_from: probe_user(opts, tries, &Default::default()),
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

/// The user of probe `tries`: with users given (`--users`, a users file), each of them in
/// turn, skipping those the per-user rule refused (a system that knows only its own users
/// refuses anyone else's login); without, a user no round used, whom no per-user rule turns
/// away.
fn probe_user(opts: &HuntOptions, tries: u64, refused: &std::collections::BTreeSet<u64>) -> u64 {
    match opts.users {
        Some(k) => {
            let k = k.max(1);
            (0..k)
                .map(|i| (tries + i) % k)
                .find(|u| !refused.contains(u))
                .unwrap_or(tries % k)
        }
        None => 1_000_000 + tries,
    }
}

fn probe_answer(r: &Report) -> String {
    if r.busy > 0 {
        return "busy".into();
    }
    r.first_error
        .clone()
        .unwrap_or_else(|| "unclassified".into())
}
