//! `hammer --url`: anyone's flash-sale endpoint put to the test, the way the tutorial's `ab`
//! run meant to, with a verdict.
//!
//! The endpoint is a black box that answers each request in words; patterns say which words
//! mean bought, sold out or busy ([`Classifier`]). The books are the answers and the stock
//! counter the endpoint deducts in Redis, read before and after the run (`item:stock:<SKU>`,
//! or `--stock-key`); `judge_http` holds one against the other. Without patterns no
//! answer says what was sold: the run measures load and latency and has nothing to judge.
//!
//! Layout: `request` (the request templates and their placeholders), `classify` (what an
//! answer meant), `wire` (answers as they come off a connection), `driver` (connections, the
//! closed and open load models) and its `exchange` (one request on one connection), `socket`
//! (opening connections), `tls` (`https://`).

mod books;
mod classify;
mod driver;
pub mod ids;
mod login;
mod probe;
pub(crate) mod request;
mod socket;
mod tls;
mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use books::{StockStore, Store};
pub use classify::{AnswerClass, BadPattern, Classifier, Patterns, TUTORIAL_PATH};
pub use login::{DEFAULT_TOKEN_AT, Logins};
pub use probe::{Got, Probe};
pub use request::{Part, Problem, RequestError, RequestSpec, Unwritable, Vars};

use crate::drive::{Driven, Driver};
use crate::error::Result;
use crate::evidence::{Books, Evidence, conclude};
use crate::history::{History, Recorded};
use crate::judge::percentiles;
use crate::options::LoadOptions;
use crate::report::{HttpFacts, LoadModel, Report, RunFacts};
use crate::run::interrupted;
use crate::usage;
use lockctl_core::conn::Target;
use lockctl_core::keys::StockKeys;
use lockctl_core::units::millis;

/// What to send and how to read the answers. No `Default`: there is no endpoint to default
/// to; each field says its default where it has one.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The request, with its placeholders.
    pub request: RequestSpec,
    /// What the answers mean. No patterns: nothing is judged.
    pub classifier: Classifier,
    /// The Redis key of the stock the endpoint deducts. Default (`None`): `item:stock:<SKU>`.
    pub stock_key: Option<String>,
    /// The stock kept somewhere else than Redis (a SQL table): set and read through it
    /// instead of `stock_key`. Default: none.
    pub store: Option<Store>,
    /// Requests per second on a fixed schedule (the open model). Default (`None`): the closed
    /// model, each connection sending its next request when the last is answered.
    pub rate: Option<f64>,
    /// Demand like a sale ([`Sale`]): `requests` is then a bound, and each connection clicks
    /// again until it is told sold out or the cap is reached. Default (`None`): the run's
    /// requests, each sent once.
    pub sale: Option<Sale>,
    /// The bound on each request, connecting included.
    pub timeout: Duration,
    /// The bound on opening a connection.
    pub connect_timeout: Duration,
    /// Units each "bought" answer stands for (`--qty`). Default: 1.
    pub qty: u64,
    /// What `{user}` is. Default: [`ids::Ids::text_users`] (`u0`, `u1`, ...).
    pub users: ids::Ids,
    /// How users get their `{token}`: each logs in once, before the first run that needs it,
    /// or the tokens are given. Default (`None`): `{token}` is empty.
    pub logins: Option<Arc<Logins>>,
    /// For an `https://` URL: the CA to trust instead of the system's roots, and a client
    /// certificate. Default: none (the system's roots, no client certificate).
    pub tls: lockctl_core::conn::TlsFiles,
}

/// Demand like a sale: each connection is a buyer who clicks again after a busy or failed
/// answer, after a moment's thought, until told sold out or until the cap; a buyer who bought
/// makes room for the next. The requests are those taken, at most the run's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sale {
    /// No request is sent after this long from the run's start.
    pub cap: Duration,
    /// The shortest think time between a buyer's clicks.
    pub think_min: Duration,
    /// The longest think time.
    pub think_max: Duration,
}

impl Sale {
    /// A buyer's pause before clicking again, drawn between the bounds.
    pub(crate) fn think(&self) -> Duration {
        use rand::RngExt;
        let (lo, hi) = (self.think_min, self.think_max.max(self.think_min));
        match lo == hi {
            true => lo,
            false => rand::rng().random_range(lo..=hi),
        }
    }
}

/// Fires `load.requests` requests at the endpoint, `load.concurrency` connections at a time,
/// and judges the answers against the stock in Redis at `target` (read only when the answers
/// can be classified). `load.stock` sets the stock key first.
pub fn run(target: &Target, load: &LoadOptions, http: &HttpOptions) -> Result<Report> {
    run_recorded(target, load, http).map(|r| r.report)
}

/// How many users log in before a run at least; the rest when the run reaches them.
const SET_UP_LOGINS: usize = 64;

/// [`run`], with the run's history when `load.history` asks for one.
pub fn run_recorded(target: &Target, load: &LoadOptions, http: &HttpOptions) -> Result<Recorded> {
    crate::capacity::ensure_endpoint_descriptors(load)?;
    let dial = tls::Dial {
        addr: http.request.resolve()?,
        tls: tls::Tls::of(&http.request, &http.tls)?,
    };
    let judged = http.classifier.judges();
    let key = http
        .stock_key
        .clone()
        .unwrap_or_else(|| StockKeys::new(&load.sku).stock);
    let books = match judged {
        true => Some(books::open(target, load, http, &key)?),
        false => None,
    };
    // Logins are set-up: done before the run's clock starts, never timed nor judged.
    let tokens = tokens(load, http)?;
    // The run's clock, which the answers and the stock reads are both timed from.
    let started = Instant::now();
    let plan = plan(http, dial, tokens, started);
    let cpu_before = usage::cpu_time();
    let driven = Endpoint(&plan, load, http.qty).drive(&plan.run_id)?;
    let elapsed = started.elapsed();
    let client_cpu = usage::cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let made = driven.tally.samples();
    let stopped_early = interrupted(load, made);
    if let Some(quiet) = &load.before_read_back {
        quiet.call();
    }
    let initial_stock = books.as_ref().map_or(0, books::Opened::initial);
    let facts = RunFacts {
        run_id: plan.run_id.clone(),
        requests: match (stopped_early, driven.taken) {
            (true, _) => made,
            (false, taken) => taken.unwrap_or(load.requests),
        },
        initial_stock,
        elapsed,
        client_cpu,
        ..RunFacts::of_load(load, http.qty)
    };
    let (books, went_up, restart, reads) = match books {
        Some(opened) => opened.close(target, &load.sku, started),
        None => (Books::Unjudged, None, None, Vec::new()),
    };
    let evidence = Evidence {
        facts: &facts,
        tally: &driven.tally,
        books,
        went_up,
        pipeline: None,
        restart,
        server: target.addr().to_string(),
        interrupted: stopped_early.then_some((made, load.requests)),
        notes: late_note(http, &driven).into_iter().collect(),
        findings: Vec::new(),
        unjudged: None,
    };
    let history = History::of(&evidence, load.users);
    let mut report = conclude(evidence);
    let stock_at = match &http.store {
        Some(store) => store.0.shown(),
        None => key,
    };
    report.http = Some(http_facts(http, judged.then_some(stock_at), &driven));
    let history = history.map(|mut h| {
        h.http = report.http.clone();
        h.stock_reads = reads;
        Box::new(h)
    });
    Ok(Recorded {
        report,
        history,
        started,
    })
}

/// Each user's `{token}`, when the requests carry one: the users of the run log in.
fn tokens(load: &LoadOptions, http: &HttpOptions) -> Result<Option<login::Tokens>> {
    let Some(logins) = http.logins.as_ref().filter(|_| http.request.uses_token()) else {
        return Ok(None);
    };
    // The users the run starts with log in before it; the rest (a sale's users are a bound:
    // 16 buyers clicking for 4 s are 12,800 users, of whom a sale of 20 units reaches a few
    // dozen) when the run reaches them (`driver::token_of`). The Flask fixture logged 12,800
    // users in for 50 s before a round of 21 requests.
    let mut users = driver::users_of(load, &http.users);
    users.truncate(SET_UP_LOGINS.max(4 * load.in_flight() as usize));
    let tokens = logins.tokens_of(
        &users,
        load.sku.as_str(),
        http.timeout,
        load.in_flight() as usize,
    )?;
    Ok(Some(tokens))
}

/// What the driver is to do: `http`'s requests to `dial`, each user with its token, timed
/// from `start`, under a run id of their own.
fn plan(
    http: &HttpOptions,
    dial: tls::Dial,
    tokens: Option<login::Tokens>,
    start: Instant,
) -> driver::Plan {
    driver::Plan {
        spec: http.request.clone(),
        classifier: http.classifier.clone(),
        dial,
        run_id: format!("h{}", hex::encode(rand::random::<[u8; 4]>())),
        rate: http.rate,
        timeout: http.timeout,
        connect_timeout: http.connect_timeout,
        start,
        users: http.users.clone(),
        tokens,
        logins: http.logins.clone().filter(|_| http.request.uses_token()),
        sale: http.sale,
    }
}

/// Someone's endpoint, driven as the plan says.
struct Endpoint<'a>(&'a driver::Plan, &'a LoadOptions, u64);

impl Driver for Endpoint<'_> {
    fn drive(&self, _run_id: &str) -> lockctl_core::Result<Driven> {
        driver::drive(self.1, self.2, self.0)
    }
}

/// An open model's requests that left late, if any.
fn late_note(http: &HttpOptions, driven: &Driven) -> Option<String> {
    if http.rate.is_none() || driven.late == 0 {
        return None;
    }
    let (n, ms) = (driven.late, crate::report::LATE_AFTER_MS);
    let requests = if n == 1 { "request" } else { "requests" };
    Some(format!(
        "{n} {requests} left more than {ms} ms after the scheduled moment (every connection was busy, or lockctl fell behind): latency counts from the schedule; more connections or a lower rate keep to it"
    ))
}

/// What the report says of the endpoint and the load model.
fn http_facts(http: &HttpOptions, stock_key: Option<String>, driven: &Driven) -> HttpFacts {
    let open = http.rate.is_some();
    HttpFacts {
        url: http.request.shown_url().to_string(),
        method: http.request.method().to_string(),
        stock_key,
        load: if open {
            LoadModel::Open
        } else {
            LoadModel::Closed
        },
        rate_rps: http.rate,
        timeout_ms: http.timeout.as_millis() as u64,
        service_ms: driven.service.as_ref().map(percentiles),
        late: open.then_some(driven.late),
        max_lag_ms: open.then(|| millis(driven.max_lag)),
    }
}
