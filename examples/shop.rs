//! A reference flash-sale shop on lockctl-core: the tutorial's `run_demo.php`, done right, as a
//! small HTTP service. One endpoint, `GET /buy?sku=S&order=O&user=U`, buys one unit and answers
//! in the tutorial's words:
//!
//! - `扣减成功 | 剩余库存: N` (bought; a retry of an order that bought is answered the same);
//! - `已售罄，拦截请求` (sold out);
//! - `并发过高，请稍后重试` (turned away: the lock stayed busy for the whole wait, or the user's
//!   limit is reached);
//! - 400 for a bad request (a missing or empty sku, order or, with --limit, user; a key given
//!   twice; an order or user id that `lockctl buy --order-id` / `--user` would refuse: a space,
//!   a control or invisible character, over 200 bytes, answered as JSON,
//!   `{"error": "order: 'a b' contains ' '; ...", "order": "a b"}`), 404 for a SKU with no stock, 405 for a method other than GET, 503 when Redis
//!   failed (the outcome is unknown: retry with the same order id).
//!
//! Query values are percent-decoded. Order ids are global, as the ledger keys them: a second
//! user's request with an order id already used is answered as that order's replay, so give
//! each order its own id (a UUID, say).
//!
//! By default it sells with the `batch` strategy: the purchases in flight are decided by one
//! script call (group commit), so every buyer is served while stock lasts instead of being
//! turned away busy as the tutorial's lock does. The order id is the idempotency key (the
//! ledger), `--limit` caps each user's units in the same script, and `--queue` appends each
//! order to the SKU's orders stream for `lockctl worker`. The hunt cannot break it
//! (`tests/it/examples.rs` hammers it and hunts it under every fault).
//!
//! ```text
//! cargo run --release --example shop -- --listen 127.0.0.1:8080 --redis redis://127.0.0.1:6379
//! lockctl seed sku_886 100
//! curl 'http://127.0.0.1:8080/buy?sku=sku_886&order=o1&user=u1'
//! lockctl hammer --url 'http://127.0.0.1:8080/buy?sku={sku}&order={order}&user={user}' \
//!     --preset tutorial -n 1000 -c 50 --stock 500
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use lockctl_core::aio::{AsyncBatch, AsyncBuyer};
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::error::ErrorKind;
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::{BadName, Sku, check_order_id, check_user_id};
use lockctl_core::stock::{Buy, BuyOptions, Purchase, Strategy};

/// The shop's command line.
#[derive(Parser)]
#[command(about = "A reference flash-sale shop on lockctl-core: GET /buy?sku=S&order=O&user=U")]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// The Redis that holds the stock.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// How a purchase deducts: batch (group commit), atomic or fenced (lock, the tutorial's
    /// unchecked write, is refused: it would charge a retried order twice).
    #[arg(long, default_value = "batch")]
    strategy: Strategy,
    /// At most this many units per user (a purchase must then name its user).
    #[arg(long)]
    limit: Option<u64>,
    /// Append each order to the SKU's orders stream, for `lockctl worker`.
    #[arg(long)]
    queue: bool,
    /// Under lock and fenced: how long a purchase waits for the lock before it is turned away.
    #[arg(long, default_value_t = 5000)]
    wait_ms: u64,
}

/// How one SKU is sold.
#[derive(Clone)]
enum Seller {
    /// The group committer: purchases in flight share a script call.
    Batch(AsyncBatch),
    /// One purchase at a time (atomic, fenced).
    Each(Box<AsyncBuyer>),
}

impl Seller {
    async fn buy(&self, order: &str, user: Option<&str>) -> lockctl_core::Result<Purchase> {
        match self {
            Seller::Batch(b) => b.buy(order, user).await,
            Seller::Each(b) => b.buy(order, user).await,
        }
    }
}

/// The most SKUs one shop sells at once: each has a seller (under `batch` and `atomic`, two
/// committer threads and their connections), so a client naming SKU after SKU must not make
/// sellers without end.
const MAX_SKUS: usize = 1024;

/// One seller a SKU, made on first use of a seeded SKU.
struct Shop {
    target: Target,
    options: BuyOptions,
    sellers: std::sync::Mutex<HashMap<Sku, Seller>>,
}

/// An answer: its status, its body, and whether the body is JSON.
struct Answer {
    status: StatusCode,
    body: String,
    json: bool,
}

fn answer(status: StatusCode, body: impl Into<String>) -> Answer {
    Answer {
        status,
        body: body.into(),
        json: false,
    }
}

/// 400 for a value of `field` that lockctl's rule for names refuses (the CLI's own, see
/// `check_order_id`): a JSON object whose `error` names the value escaped and says why, and
/// which carries the value itself under `field`.
fn bad_name(field: &str, value: &str, why: BadName) -> Answer {
    Answer {
        status: StatusCode::BAD_REQUEST,
        body: format!(
            "{}\n",
            serde_json::json!({ "error": format!("{field}: {why}"), field: value })
        ),
        json: true,
    }
}

impl Shop {
    /// The seller of `sku`, made on first use; a SKU with no stock is not given one.
    async fn seller(&self, sku: &Sku) -> Result<Seller, Answer> {
        if let Some(s) = self.lock().get(sku) {
            return Ok(s.clone());
        }
        let (target, key) = (self.target.clone(), format!("item:stock:{sku}"));
        let seeded = tokio::task::spawn_blocking(move || -> lockctl_core::Result<bool> {
            target.connect()?.query(redis::cmd("EXISTS").arg(key))
        })
        .await
        .unwrap_or_else(|e| Err(lockctl_core::Error::internal(e.to_string())));
        match seeded {
            Ok(true) => {}
            Ok(false) => return Err(unseeded(sku)),
            Err(e) => {
                return Err(answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("error: {e}\n"),
                ));
            }
        }
        let mut sellers = self.lock();
        if let Some(s) = sellers.get(sku) {
            return Ok(s.clone());
        }
        if sellers.len() >= MAX_SKUS {
            return Err(answer(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this shop sells at most {MAX_SKUS} SKUs at once\n"),
            ));
        }
        let seller = match self.options.strategy {
            Strategy::Batch => Seller::Batch(
                AsyncBatch::start(&self.target, sku, self.options.clone()).map_err(|e| {
                    answer(StatusCode::SERVICE_UNAVAILABLE, format!("error: {e}\n"))
                })?,
            ),
            _ => Seller::Each(Box::new(AsyncBuyer::new(
                &self.target,
                sku,
                self.options.clone(),
            ))),
        };
        sellers.insert(sku.clone(), seller.clone());
        Ok(seller)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Sku, Seller>> {
        self.sellers.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn buy(&self, query: &str) -> Answer {
        let q = match Query::parse(query, self.options.limit.is_some()) {
            Ok(q) => q,
            Err(refused) => return refused,
        };
        let seller = match self.seller(&q.sku).await {
            Ok(s) => s,
            Err(a) => return a,
        };
        match seller.buy(&q.order, q.user.as_deref()).await {
            Ok(p) => match p.outcome {
                Buy::Bought { remaining } => answer(
                    StatusCode::OK,
                    format!("扣减成功 | 剩余库存: {remaining}\n"),
                ),
                Buy::SoldOut { .. } => answer(StatusCode::OK, "已售罄，拦截请求\n"),
                _ => answer(StatusCode::OK, "并发过高，请稍后重试\n"),
            },
            Err(e) if e.kind() == ErrorKind::Unseeded => unseeded(&q.sku),
            // Redis failed: the purchase may or may not have been made.
            Err(e) => answer(StatusCode::SERVICE_UNAVAILABLE, format!("error: {e}\n")),
        }
    }
}

fn unseeded(sku: &Sku) -> Answer {
    answer(
        StatusCode::NOT_FOUND,
        format!("no such SKU: {sku} has no stock (seed it first: lockctl seed {sku} COUNT)\n"),
    )
}

/// What a purchase names: the query's `sku`, `order` and `user`, percent-decoded (a client
/// that encodes a retry differently is still asking for the same order).
struct Query {
    sku: Sku,
    order: String,
    user: Option<String>,
}

impl Query {
    /// The query's purchase, or the 400 that refuses it. An order id or user id is held to the
    /// rule the CLI holds `--order-id` and `--user` to (lockctl-core's), so the shop sells under
    /// no id that the tools would refuse to name.
    fn parse(query: &str, needs_user: bool) -> Result<Query, Answer> {
        let refuse = |why: String| answer(StatusCode::BAD_REQUEST, format!("{why}\n"));
        let mut found: HashMap<String, String> = HashMap::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if found.insert(k.to_string(), v.to_string()).is_some() {
                return Err(refuse(format!("{k} is given twice")));
            }
        }
        let mut take = |name: &str| found.remove(name).filter(|v| !v.is_empty());
        let (sku, order, user) = (take("sku"), take("order"), take("user"));
        let sku = sku.ok_or_else(|| refuse("need sku (and order)".into()))?;
        let sku = sku
            .parse::<Sku>()
            .map_err(|e| refuse(format!("sku: {e}")))?;
        let order = order
            .ok_or_else(|| refuse("need order: the order id is the idempotency key".into()))?;
        check_order_id(&order).map_err(|why| bad_name("order", &order, why))?;
        if let Some(u) = &user {
            check_user_id(u).map_err(|why| bad_name("user", u, why))?;
        }
        if needs_user && user.is_none() {
            return Err(refuse("need user: the shop has a per-user limit".into()));
        }
        Ok(Query { sku, order, user })
    }
}

async fn handle(
    shop: Arc<Shop>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let a = match (req.method(), req.uri().path()) {
        (&Method::GET, "/buy") => shop.buy(req.uri().query().unwrap_or("")).await,
        (_, "/buy") => answer(StatusCode::METHOD_NOT_ALLOWED, "GET /buy?sku=S&order=O\n"),
        _ => answer(
            StatusCode::NOT_FOUND,
            "not found: try GET /buy?sku=S&order=O\n",
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(a.body)));
    *response.status_mut() = a.status;
    if a.json {
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    Ok(response)
}

/// Errors print as the sentences they are (Display), once, with the program's name; not as
/// the `Debug` form a `main` that returns `Result` would print.
fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shop: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if matches!(args.strategy, Strategy::Lock | Strategy::Naive) {
        return Err(format!(
            "--strategy {}: the shop sells with batch, atomic or fenced; {} writes without \
             checking the order id, so a retried order would be charged twice",
            args.strategy, args.strategy
        )
        .into());
    }
    let options = BuyOptions {
        strategy: args.strategy,
        limit: args.limit,
        queue: args.queue,
        lock: LockOptions {
            wait: Duration::from_millis(args.wait_ms),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    let shop = Arc::new(Shop {
        target: Target::open(&args.redis, ConnectOptions::default())?,
        options,
        sellers: Default::default(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listen = args.listen;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e} (pick another --listen)"))?;
        println!("shop on http://{listen}/buy");
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of files (too many connections held open), say: the shop stays up and
                // accepts again once some close.
                Err(e) => {
                    eprintln!("shop: accept failed: {e}; trying again in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let shop = shop.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(shop.clone(), req));
                // A request whose head does not arrive within 10 s is dropped: idle
                // connections cannot pile up.
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}
