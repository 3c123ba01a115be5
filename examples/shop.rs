//! A reference flash-sale shop on lockctl-core: one HTTP endpoint, `GET /buy?sku=S&order=O&user=U`,
//! that buys one unit with the `atomic` strategy (one script checks and deducts; the ledger makes
//! an order id idempotent; the per-user limit is in the same script), and answers in the
//! tutorial's words. The hunt cannot break it (`tests/it/examples.rs` hunts it under every
//! fault, with users, a limit and retries).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 LIMIT=2 cargo run --release --example shop -- 127.0.0.1:8080
//! lockctl hunt --url 'http://127.0.0.1:8080/buy?sku={sku}&order={order}&user={user}' \
//!     --preset tutorial --users 4 --limit 2 --idempotent
//! ```
//!
//! Answers: `扣减成功 | 剩余库存: N` (bought), `已售罄，拦截请求` (sold out), `并发过高，请稍后重试`
//! (turned away: the user's limit is reached), 503 when Redis failed (the outcome is unknown).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lockctl_core::aio::AsyncBuyer;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock::{Buy, BuyOptions, Strategy};

/// One buyer a SKU, made on first use.
struct Shop {
    target: Target,
    limit: Option<u64>,
    buyers: std::sync::Mutex<HashMap<String, AsyncBuyer>>,
}

impl Shop {
    fn buyer(&self, sku: &Sku) -> AsyncBuyer {
        let mut buyers = self.buyers.lock().unwrap_or_else(|p| p.into_inner());
        buyers
            .entry(sku.to_string())
            .or_insert_with(|| {
                let options = BuyOptions {
                    strategy: Strategy::Atomic,
                    limit: self.limit,
                    ..BuyOptions::default()
                };
                AsyncBuyer::new(&self.target, sku, options)
            })
            .clone()
    }

    async fn buy(&self, query: &str) -> (StatusCode, String) {
        let args: HashMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let (Some(sku), Some(order)) = (args.get("sku"), args.get("order")) else {
            return (StatusCode::BAD_REQUEST, "need sku and order\n".into());
        };
        let Ok(sku) = sku.parse::<Sku>() else {
            return (StatusCode::BAD_REQUEST, "a bad sku\n".into());
        };
        // With a limit, a purchase must name its user.
        let user = args.get("user").copied().filter(|_| self.limit.is_some());
        match self.buyer(&sku).buy(order, user).await {
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
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let limit = std::env::var("LIMIT").ok().and_then(|l| l.parse().ok());
    let shop = Arc::new(Shop {
        target: Target::open(&url, ConnectOptions::default())?,
        limit,
        buyers: Default::default(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
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
