//! A reference flash-sale shop on lockctl-core: the tutorial's `run_demo.php`, done right, as a
//! small HTTP service. One endpoint, `GET /buy?sku=S&order=O&user=U`, buys one unit and answers
//! in the tutorial's words:
//!
//! - `扣减成功 | 剩余库存: N` (bought; a retry of an order that bought is answered the same);
//! - `已售罄，拦截请求` (sold out);
//! - `并发过高，请稍后重试` (turned away: the lock stayed busy for the whole wait, or the user's
//!   limit is reached);
//! - 503 when Redis failed (the outcome is unknown: retry with the same order id), 400 for a bad
//!   request.
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
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lockctl_core::aio::{AsyncBatch, AsyncBuyer};
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
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
    /// How a purchase deducts: batch (group commit), atomic, lock or fenced.
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
    /// One purchase at a time (atomic, lock, fenced).
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

/// One seller a SKU, made on first use.
struct Shop {
    target: Target,
    options: BuyOptions,
    sellers: std::sync::Mutex<HashMap<Sku, Seller>>,
}

impl Shop {
    fn seller(&self, sku: &Sku) -> lockctl_core::Result<Seller> {
        let mut sellers = self.sellers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = sellers.get(sku) {
            return Ok(s.clone());
        }
        let seller = match self.options.strategy {
            Strategy::Batch => {
                Seller::Batch(AsyncBatch::start(&self.target, sku, self.options.clone())?)
            }
            _ => Seller::Each(Box::new(AsyncBuyer::new(
                &self.target,
                sku,
                self.options.clone(),
            ))),
        };
        sellers.insert(sku.clone(), seller.clone());
        Ok(seller)
    }

    async fn buy(&self, query: &str) -> (StatusCode, String) {
        let args: HashMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let (Some(sku), Some(order)) = (args.get("sku"), args.get("order")) else {
            return (StatusCode::BAD_REQUEST, "need sku and order\n".into());
        };
        let sku = match sku.parse::<Sku>() {
            Ok(s) => s,
            Err(e) => return (StatusCode::BAD_REQUEST, format!("sku: {e}\n")),
        };
        let user = args.get("user").copied();
        if self.options.limit.is_some() && user.is_none() {
            return (
                StatusCode::BAD_REQUEST,
                "need user (the shop has a per-user limit)\n".into(),
            );
        }
        let bought = match self.seller(&sku) {
            Ok(seller) => seller.buy(order, user).await,
            Err(e) => Err(e),
        };
        match bought {
            Ok(p) => match p.outcome {
                Buy::Bought { remaining } => (
                    StatusCode::OK,
                    format!("扣减成功 | 剩余库存: {remaining}\n"),
                ),
                Buy::SoldOut { .. } => (StatusCode::OK, "已售罄，拦截请求\n".into()),
                _ => (StatusCode::OK, "并发过高，请稍后重试\n".into()),
            },
            // Redis failed: the purchase may or may not have been made.
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("error: {e}\n")),
        }
    }
}

async fn handle(
    shop: Arc<Shop>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match req.uri().path() {
        "/buy" => shop.buy(req.uri().query().unwrap_or("")).await,
        _ => (
            StatusCode::NOT_FOUND,
            "not found: try /buy?sku=S&order=O\n".into(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
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
            let (stream, _) = listener.accept().await?;
            let shop = shop.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(shop.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}
