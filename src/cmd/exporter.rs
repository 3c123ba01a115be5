//! `lockctl exporter`: per-SKU state from Redis as Prometheus metrics, read on every scrape.

use std::sync::Mutex;

use lockctl::conn::Reconnecting;
use lockctl::sku::Sku;
use lockctl::{metrics, scrape};

use super::{Ctx, Exit, UsageError};

/// Serves until killed. One connection, reopened after a failed scrape.
pub fn run(ctx: &Ctx, skus: Vec<Sku>, listen: &str) -> anyhow::Result<Exit> {
    let mut conn = Reconnecting::new(&ctx.target);
    conn.get()?;
    let conn = Mutex::new(conn);
    let target = ctx.target.clone();
    let bound = metrics::serve(
        listen,
        || {},
        move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            let Ok(c) = conn.get() else {
                return "# Redis unreachable\n# EOF\n".into();
            };
            let (body, failed) = scrape::scrape(c, &target, &skus);
            if failed {
                conn.reset();
            }
            body
        },
    )
    .map_err(|e| UsageError(format!("cannot listen on --listen '{listen}': {e}")))?;
    eprintln!("lockctl: serving http://{bound}/metrics (Ctrl-C to stop)");
    loop {
        std::thread::park();
    }
}
