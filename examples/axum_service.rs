//! A flash-sale service on axum and lockctl-core: the shape to copy for your own.
//!
//! - `POST /buy/{sku}` with `{"order_id": "...", "user": "..."}` buys one unit, fenced (the
//!   deduction runs only while the lock holds this buyer's token) and idempotent (the order id
//!   is the ledger's key: a retry deducts nothing and is answered as the first time). Answers
//!   JSON: 200 `{"outcome":"bought","remaining":N}`, 409 `{"outcome":"sold_out"}`, 503
//!   `{"outcome":"busy"}` (the lock stayed busy for the whole wait) or `{"outcome":"unknown"}`
//!   (Redis failed mid-purchase: retry with the same order id to learn the outcome), 400 for a
//!   bad SKU or order id.
//! - `POST /close/{sku}` writes the SKU's closing note under `aio::using`, the lock held
//!   around an async body, with the write fenced: `{"written":true}`, or `false` when the lease
//!   was lost before the write reached Redis.
//!
//! What makes it a service's rather than the command line's: `BuyOptions::for_service` (buyers
//! wait up to 5 s in the lock's FIFO queue instead of being turned away at the first try), one
//! `AsyncBuyer` per SKU shared by every request (its connections and waiting room), and every
//! await safe to drop (a client that hangs up cancels its handler: the purchase was made or
//! not, never half, and no lock is left held).
//!
//! ```text
//! cargo run --release --example axum_service -- 127.0.0.1:8080   # REDIS_URL, default :6379
//! lockctl seed sku_886 100
//! curl -X POST localhost:8080/buy/sku_886 -d '{"order_id":"o1","user":"u1"}' \
//!     -H 'content-type: application/json'
//! lockctl hunt --url 'http://127.0.0.1:8080/buy/{sku}' --method POST \
//!     --header 'Content-Type: application/json' --body '{"order_id":"{order}","user":"{user}"}' \
//!     --bought-if '"outcome":"bought"' --sold-out-if '"outcome":"sold_out"' \
//!     --busy-if '"outcome":"busy"' --redis redis://127.0.0.1:6379 --budget 30s
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use lockctl_core::aio::{AsyncBuyer, using};
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::{Fenced, Lock, LockOptions};
use lockctl_core::redis;
use lockctl_core::sku::{self, Sku};
use lockctl_core::stock::{Buy, BuyOptions, Strategy};
use serde::Deserialize;
use serde_json::{Value, json};

/// What every handler shares: the Redis target and one buyer per SKU.
#[derive(Clone)]
struct Shop {
    target: Target,
    buyers: Arc<Mutex<HashMap<Sku, AsyncBuyer>>>,
}

impl Shop {
    /// The SKU's buyer, made on first use and shared by every request after.
    fn buyer(&self, sku: &Sku) -> AsyncBuyer {
        let mut buyers = self.buyers.lock().unwrap_or_else(|p| p.into_inner());
        buyers
            .entry(sku.clone())
            .or_insert_with(|| {
                AsyncBuyer::new(&self.target, sku, BuyOptions::for_service(Strategy::Fenced))
            })
            .clone()
    }
}

#[derive(Deserialize)]
struct Order {
    order_id: String,
    user: Option<String>,
}

type Answer = (StatusCode, Json<Value>);

fn bad(what: impl std::fmt::Display) -> Answer {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": what.to_string() })),
    )
}

async fn buy(
    State(shop): State<Shop>,
    Path(sku): Path<String>,
    Json(order): Json<Order>,
) -> Answer {
    let sku: Sku = match sku.parse() {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    // The same rule as the command line's --order-id and --user: names that print as what
    // they are (no control or invisible characters), of a sane length.
    if let Err(e) = sku::check_order_id(&order.order_id) {
        return bad(e);
    }
    if let Some(Err(e)) = order.user.as_deref().map(sku::check_user_id) {
        return bad(e);
    }
    let purchase = shop
        .buyer(&sku)
        .buy(&order.order_id, order.user.as_deref())
        .await;
    match purchase.map(|p| p.outcome) {
        Ok(Buy::Bought { remaining }) => (
            StatusCode::OK,
            Json(json!({ "outcome": "bought", "remaining": remaining })),
        ),
        Ok(Buy::SoldOut { .. }) => (StatusCode::CONFLICT, Json(json!({ "outcome": "sold_out" }))),
        Ok(Buy::Busy | Buy::LeaseLost) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "outcome": "busy" })),
        ),
        Ok(Buy::LimitReached { .. }) => (
            StatusCode::CONFLICT,
            Json(json!({ "outcome": "limit_reached" })),
        ),
        // The library's errors print as sentences (Display), never Debug.
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "outcome": "unknown", "error": e.to_string() })),
        ),
    }
}

async fn close(State(shop): State<Shop>, Path(sku): Path<String>) -> Answer {
    let sku: Sku = match sku.parse() {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    // A lock of its own, named with the SKU's hash tag so that in a cluster the lock and the
    // note share a slot (a fenced write's keys must be on the lock's node).
    let lock = Lock::new(
        &shop.target,
        &format!("{{{sku}}}:close"),
        LockOptions::for_service(),
    );
    let note = format!("{{{sku}}}:closing_note");
    let held = using(lock, |held| async move {
        let write = redis::cmd("SET")
            .arg(&note)
            .arg(format!("closed under fence {}", held.fence))
            .clone();
        held.fenced(&write).await
    })
    .await;
    match held {
        Ok(Some((Ok(Fenced::Written(_)), _))) => (StatusCode::OK, Json(json!({ "written": true }))),
        Ok(Some((Ok(Fenced::LeaseLost), _))) => (StatusCode::OK, Json(json!({ "written": false }))),
        Ok(None) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "outcome": "busy" })),
        ),
        Ok(Some((Err(e), _))) | Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": e.to_string() })),
        ),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Errors print as the sentences they are (Display), not in `Debug` form.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("axum_service: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let target = Target::open(&redis_url, ConnectOptions::default())?;
    let shop = Shop {
        target,
        buyers: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/buy/{sku}", post(buy))
        .route("/close/{sku}", post(close))
        .with_state(shop);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    eprintln!("axum_service: listening on {listen}");
    axum::serve(listener, app).await?;
    Ok(())
}
