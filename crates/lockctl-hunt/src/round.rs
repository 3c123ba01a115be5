//! One round of the hunt: its SKU, its load with the faults struck on a thread of their own,
//! the heal before the books are read, and its history judged with the findings beyond the
//! books.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::ServeError;
use crate::findings::findings;
use crate::liveness::{nothing_answered, quiet_reader, silent as silent_for};
use crate::plan::{self, Planner, Round, Shape};
use crate::{HuntOptions, checks, leases};
use lockctl_core::conn::Target;
use lockctl_core::sku::Sku;
use lockctl_hammer::Error;
use lockctl_hammer::history::{Fault, History, Recorded};
use lockctl_hammer::http::ids::{IdFormat, Ids};
use lockctl_hammer::http::{self, HttpOptions};
use lockctl_hammer::report::Report;
use lockctl_hammer::{Hook, LoadOptions};

/// How a round ended without a report.
pub(crate) enum RoundEnd {
    /// The system could not be brought back (a restart failed): that ends the hunt.
    CannotGoOn(ServeError),
    /// The round's own calls failed: with a fault in the round it is only left unjudged.
    Failed(Error),
}

impl From<Error> for RoundEnd {
    fn from(e: Error) -> Self {
        RoundEnd::Failed(e)
    }
}

/// What one round came to.
pub(crate) struct Ran {
    pub(crate) report: Report,
    pub(crate) history: Option<Box<History>>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) sku: String,
    /// The longest lease seen during the round.
    pub(crate) lease: Option<leases::Lease>,
}

/// A hunt's own SKUs: a random tag (text) or block of numbers or UUIDs of its own, so that a
/// replay of the same seed on the same servers meets none of the earlier hunt's keys or rows.
pub(crate) struct RoundSkus {
    pub(crate) tag: String,
    pub(crate) ids: Ids,
    /// Whether the system answered a request in an earlier round: one that answers nothing
    /// after that has stopped, not been given the wrong address.
    pub(crate) answered: AtomicBool,
}

/// The SKU of round `n` of the hunt `run`.
fn sku_of(opts: &HuntOptions, run: &RoundSkus, n: u64) -> Result<Sku, Error> {
    let name = match opts.sku_format {
        IdFormat::Text => format!("{}-{}-{n}", opts.sku, run.tag),
        _ => run.ids.name(n),
    };
    name.parse()
        .map_err(|e| Error::internal(format!("the round's SKU '{name}': {e}")))
}

/// One round: the load with its faults, healed before the books are read, then the checks
/// beyond the books and the liveness probe, all judged as one history.
pub(crate) fn round(
    target: &Target,
    opts: &HuntOptions,
    run: &RoundSkus,
    plan: &Round,
    planner: &mut Planner,
    known: Option<&leases::Lease>,
) -> std::result::Result<Ran, RoundEnd> {
    let sku = sku_of(opts, run, plan.number)?;
    opts.nemesis.round_sku(sku.as_str());
    if let Ok(mut skus) = opts.skus.lock() {
        skus.push(sku.clone());
    }
    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let healing = Healing::default();
    let answered = Arc::new(AtomicU64::new(0));
    let hook = healing.hook(target, opts, &sku, start, done.clone());
    let load = round_load(opts, plan, &sku, answered.clone(), hook);
    let http = round_http(opts, plan, &sku);
    let striker = strike(opts, plan, start, done.clone(), answered, planner);
    let watcher = opts
        .leases
        .then(|| leases::watch(target, sku.as_str(), done.clone()));
    let result = http::run_recorded(target, &load, &http);
    done.store(true, Ordering::SeqCst);
    let _ = striker.join();
    let lease = watcher.and_then(|w| w.join().ok().flatten());
    let (mut faults, healed, failed) = healing.take();
    let more = opts.nemesis.heal(start.elapsed());
    faults.extend(more.faults);
    if let Some(failed) = failed.or(more.failed) {
        return Err(RoundEnd::CannotGoOn(failed));
    }
    let Recorded {
        report,
        history,
        started,
    } = match result {
        Ok(recorded) => recorded,
        // A run that could not go on (its logins had no answer, say) because the system is
        // gone is the system's failure, judged with its seed, not the facts' error.
        Err(e) => {
            let Some(finding) = gone(target, opts, run, (&load, &http), true, EXIT_SEEN_WITHIN)
            else {
                return Err(e.into());
            };
            return Ok(Ran {
                report: unrun(&load, &http, &e, finding),
                history: None,
                faults,
                sku: sku.to_string(),
                lease,
            });
        }
    };
    // The faults were timed from the round's start, the answers from the run's, which
    // starts later (the stock set, the users logged in): onto the answers' clock, so that a
    // fault and a request can be told apart in time (and drawn where they were).
    let setup = started.saturating_duration_since(start);
    for f in &mut faults {
        f.start = f.start.saturating_sub(setup);
        f.stop = f.stop.map(|s| s.saturating_sub(setup));
    }
    // A process that died leaves requests that failed: only then is its end waited for.
    let within = match report.errors {
        0 => Duration::ZERO,
        _ => EXIT_SEEN_WITHIN,
    };
    let silent = nothing_answered(&report);
    let gone = gone(target, opts, run, (&load, &http), silent, within);
    if !silent {
        run.answered.store(true, Ordering::SeqCst);
    }
    let Some(mut history) = history else {
        return Ok(Ran {
            report,
            history: None,
            faults,
            sku: sku.to_string(),
            lease,
        });
    };
    let mut found = Vec::new();
    if let Some(k) = plan.retry_every {
        found.extend(checks::retries(&mut history.samples, k));
    }
    let this_round = this_rounds_lease(lease.as_ref(), known, opts, run, plan.number);
    let seen = (healed, this_round.as_ref());
    match gone {
        // A system that is gone cannot be probed for liveness, and its rows may be half
        // written: the round is its end.
        Some(gone) => found.insert(0, gone),
        None => {
            let (more, unjudged) = findings(target, opts, &load, &http, &history, &report, seen);
            found.extend(more);
            history.unjudged = unjudged;
            // It may have ended while its liveness was probed: said first, as the cause.
            found.splice(0..0, exit_finding(opts, Duration::ZERO));
        }
    }
    history.findings = found;
    history.faults = faults.clone();
    Ok(Ran {
        report: history.judge(),
        history: Some(history),
        faults,
        sku: sku.to_string(),
        lease,
    })
}

/// How long a system's first process is waited for to be seen exited, after a round whose
/// requests failed: its listening socket closes a moment before its parent can reap it.
const EXIT_SEEN_WITHIN: Duration = Duration::from_millis(500);

/// Whether the system is gone, and the finding that says so: the process `--serve` started
/// exited by itself (which one, how, and the last fault before it), or (`silent`: the round
/// answered nothing) once it answered in an earlier round, it answers nothing for the heal. A
/// system that never answered at all did not stop: its rounds stay unjudged (a wrong --url,
/// a service never started), whatever faults the hunt struck meanwhile. A service that stops answering for good is never a PASS: before
/// this, its rounds were each "unjudged", and a hunt with one judged round before them passed.
fn gone(
    target: &Target,
    opts: &HuntOptions,
    run: &RoundSkus,
    (load, http): (&LoadOptions, &HttpOptions),
    silent: bool,
    within: Duration,
) -> Option<String> {
    if let Some(found) = exit_finding(opts, within) {
        return Some(found);
    }
    let answered_before = run.answered.load(Ordering::SeqCst);
    if !silent || !answered_before {
        return None;
    }
    let (tries, last) = silent_for(target, opts, load, http)?;
    // It may have ended while it was probed.
    exit_finding(opts, Duration::ZERO).or_else(|| {
        Some(format!(
            "stopped answering {}: no request of the round was answered, nor any of {tries} more within {} ms after the faults were undone (the last: {last})",
            after_fault(opts),
            opts.heal.as_millis()
        ))
    })
}

/// The last fault that took effect, as what a failure followed.
fn after_fault(opts: &HuntOptions) -> String {
    match opts.nemesis.last_fault() {
        Some(f) => format!("after {f}"),
        None => "with no fault struck before it".to_string(),
    }
}

/// The finding of the system's first process ended by itself (seen within `within`): which
/// process, how it ended, and the last fault before.
fn exit_finding(opts: &HuntOptions, within: Duration) -> Option<String> {
    opts.nemesis.system_exit(within).map(|x| {
        format!(
            "the system's process {} ('{}') {}, {}",
            x.pid,
            lockctl_core::redact::redact(&x.command).escape_debug(),
            x.how(),
            after_fault(opts)
        )
    })
}

/// The report of a round that could not run (`e`) because the system is gone (`finding`): a
/// FAIL, with the round's facts and no requests.
fn unrun(load: &LoadOptions, http: &HttpOptions, e: &Error, finding: String) -> Report {
    let facts = lockctl_hammer::report::RunFacts {
        requests: 0,
        ..lockctl_hammer::report::RunFacts::of_load(load, http.qty)
    };
    let why = lockctl_core::Error::internal(e.to_string());
    let mut report = lockctl_hammer::judge::judge_unreadable(&facts, &[], &why);
    report.notes = vec![format!("the round could not run: {e}")];
    report.first_error = Some(e.to_string());
    report.violations.push(finding);
    report.verdict = lockctl_hammer::report::Verdict::Fail;
    report.unknown_because = None;
    report
}

/// The lease the liveness probe waits out and names: the round's own lock key (the one that
/// names its SKU) when it saw one; else the longest lease of the hunt so far, its key named
/// with this round's SKU in place of the earlier round's (a stall message that named another
/// round's key sent the reader to a key that had nothing to do with it).
fn this_rounds_lease(
    seen: Option<&leases::Lease>,
    known: Option<&leases::Lease>,
    opts: &HuntOptions,
    run: &RoundSkus,
    number: u64,
) -> Option<leases::Lease> {
    let sku = sku_of(opts, run, number).ok()?;
    let earlier = (1..number).filter_map(|n| sku_of(opts, run, n).ok().map(|s| s.to_string()));
    named_for_round(seen, known, sku.as_str(), earlier)
}

/// [`this_rounds_lease`], of the round whose SKU is `sku`, the earlier rounds' SKUs `earlier`.
fn named_for_round(
    seen: Option<&leases::Lease>,
    known: Option<&leases::Lease>,
    sku: &str,
    earlier: impl Iterator<Item = String>,
) -> Option<leases::Lease> {
    if let Some(l) = seen.filter(|l| l.key.contains(sku)) {
        return Some(l.clone());
    }
    let longest = [seen, known]
        .into_iter()
        .flatten()
        .max_by_key(|l| l.ttl_ms)?;
    // The earlier round whose SKU the key names: the longest match, so that round 12's SKU is
    // not read as round 1's with a "2" after it.
    let old = earlier
        .filter(|s| longest.key.contains(s.as_str()))
        .max_by_key(String::len);
    Some(leases::Lease {
        key: match old {
            Some(old) => longest.key.replace(&old, sku),
            None => longest.key.clone(),
        },
        ttl_ms: longest.ttl_ms,
    })
}

/// The round's load: its SKU, requests, concurrency, stock and users as planned, with the
/// heal's hook run before the books are read.
fn round_load(
    opts: &HuntOptions,
    plan: &Round,
    sku: &Sku,
    answered: Arc<AtomicU64>,
    hook: Hook,
) -> LoadOptions {
    LoadOptions {
        sku: sku.clone(),
        requests: plan.requests,
        concurrency: plan.shape.concurrency(),
        stock: Some(plan.stock),
        buckets: None,
        users: match plan.shape {
            Shape::DoubleClick { users } => Some(users),
            _ => opts.users,
        },
        users_from: 0,
        progress: Some(answered),
        stop: opts.stop.clone(),
        retries: plan.retry_every,
        history: true,
        before_read_back: Some(hook),
    }
}

/// The round's request: the hunt's, with the round's stock key, and its rate or sale shape.
fn round_http(opts: &HuntOptions, plan: &Round, sku: &Sku) -> HttpOptions {
    let mut http = opts.http.clone();
    http.stock_key = opts
        .http
        .stock_key
        .as_ref()
        .map(|k| k.replace("{sku}", sku.as_str()));
    http.rate = match plan.shape {
        Shape::Rate { rate, .. } => Some(rate),
        _ => None,
    };
    http.sale = match plan.shape {
        Shape::Sale { cap, .. } => Some(http::Sale {
            cap,
            think_min: plan::THINK_MIN,
            think_max: plan::THINK_MAX,
        }),
        _ => None,
    };
    http
}

/// What the round's heal did: the faults it undid, and when.
#[derive(Clone, Default)]
struct Healing {
    faults: Arc<Mutex<Vec<Fault>>>,
    at: Arc<Mutex<Option<Instant>>>,
    failed: Arc<Mutex<Option<ServeError>>>,
}

impl Healing {
    /// The hook the load calls when every request has ended: the load is done, the faults are
    /// undone, and the stock settles before the books are read.
    fn hook(
        &self,
        target: &Target,
        opts: &HuntOptions,
        sku: &Sku,
        start: Instant,
        done: Arc<AtomicBool>,
    ) -> Hook {
        let (me, nemesis) = (self.clone(), opts.nemesis.clone());
        let quiet = quiet_reader(target, opts, sku);
        Hook(Arc::new(move || {
            done.store(true, Ordering::SeqCst);
            let healed = nemesis.heal(start.elapsed());
            if let Ok(mut all) = me.faults.lock() {
                all.extend(healed.faults);
            }
            if let Ok(mut failed) = me.failed.lock() {
                *failed = failed.take().or(healed.failed);
            }
            quiet();
            // Liveness is counted from here: the system healed and at rest.
            if let Ok(mut at) = me.at.lock() {
                *at = Some(Instant::now());
            }
        }))
    }

    /// The faults undone, when, and a restart that failed (now, if the hook never ran).
    fn take(&self) -> (Vec<Fault>, Instant, Option<ServeError>) {
        let faults = self
            .faults
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default();
        let at = self.at.lock().ok().and_then(|a| *a);
        let failed = self.failed.lock().ok().and_then(|mut f| f.take());
        (faults, at.unwrap_or_else(Instant::now), failed)
    }
}

/// The faults of the round, done on a thread of their own at their moments, each lifted as
/// its hold ends or when the load is done.
fn strike(
    opts: &HuntOptions,
    plan: &Round,
    start: Instant,
    done: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    planner: &mut Planner,
) -> thread::JoinHandle<()> {
    use rand::SeedableRng;
    let nemesis = opts.nemesis.clone();
    let faults = plan.faults.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::RngExt::random(planner.rng()));
    thread::spawn(move || {
        let wait_until = |at: Instant| {
            while Instant::now() < at && !done.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5).min(at - Instant::now()));
            }
        };
        // The load is under way once its first request is answered (setting the stock and
        // connecting come before): a fault's moment counts from then, so that it meets the
        // system at work, not idle.
        while answered.load(Ordering::SeqCst) == 0 && !done.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1));
        }
        let underway = Instant::now();
        for f in faults {
            wait_until(underway + f.after);
            if done.load(Ordering::SeqCst) {
                return;
            }
            nemesis.strike(f.kind, f.hold, start.elapsed(), &mut rng);
            wait_until(Instant::now() + f.hold);
            nemesis.lift(f.kind, start.elapsed());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(key: &str, ttl_ms: u64) -> leases::Lease {
        leases::Lease {
            key: key.into(),
            ttl_ms,
        }
    }

    /// A stall names the round's own lock key: the one it saw, or the hunt's longest lease
    /// with the earlier round's SKU in its key replaced by this round's.
    #[test]
    fn the_lease_a_stall_names_is_keyed_by_this_rounds_sku() {
        let earlier = || (1..13).map(|n| format!("hunt-ab-{n}"));
        let known = lease("shop:lock:hunt-ab-12", 5000);
        let got = named_for_round(None, Some(&known), "hunt-ab-13", earlier()).unwrap();
        assert_eq!(got, lease("shop:lock:hunt-ab-13", 5000));
        let own = lease("shop:lock:hunt-ab-13", 2000);
        let got = named_for_round(Some(&own), Some(&known), "hunt-ab-13", earlier());
        assert_eq!(got, Some(own));
        // A key that names no round's SKU (one lock for the whole shop) is the same key.
        let global = lease("shop:lock", 3000);
        let got = named_for_round(None, Some(&global), "hunt-ab-13", earlier());
        assert_eq!(got, Some(global));
        assert_eq!(named_for_round(None, None, "hunt-ab-13", earlier()), None);
    }
}
