//! `lockctl exporter`: per-SKU state from Redis as Prometheus metrics, read on every scrape.

use std::sync::Arc;

use lockctl::endpoint::{self, EndpointOptions};
use lockctl::scrape;
use lockctl_core::sku::Sku;

use super::{Ctx, Exit, UsageError};

/// Serves until killed. It starts whether or not Redis answers: an unreachable Redis is what
/// `lockctl_scrape_error` reports, scrape by scrape.
pub fn run(ctx: &Ctx, skus: Vec<Sku>, listen: &str) -> anyhow::Result<Exit> {
    let target = ctx.target.clone();
    let options = EndpointOptions {
        scrape_limit: ctx.options.connect_timeout
            + ctx.options.call_timeout * (skus.len() as u32 * 4 + 1),
        ..EndpointOptions::default()
    };
    let bound = endpoint::serve(
        listen,
        Arc::new(move || scrape::scrape_fresh(&target, &skus)),
        options,
    )
    .map_err(|e| UsageError(format!("cannot listen on --listen '{listen}': {e}")))?;
    eprintln!("lockctl: serving http://{bound}/metrics (Ctrl-C to stop)");
    loop {
        std::thread::park();
    }
}
