//! `lockctl worker` and `lockctl db init`: the orders pipeline's side that writes PostgreSQL.

use std::time::Duration;

use serde_json::json;

use lockctl::orders::db::{Db, SCHEMA_VERSION};
use lockctl::orders::worker::{self, WorkerOptions};

use super::{Ctx, Exit, output};
use crate::cli::WorkerArgs;
use crate::signals;

/// Runs until SIGINT/SIGTERM/SIGHUP (which finish the batch in hand first), or with `--once`
/// until what is queued is persisted.
pub fn run(ctx: &Ctx, args: WorkerArgs) -> anyhow::Result<Exit> {
    let stop = signals::listen(signals::First::Finish);
    let mut opts = WorkerOptions::new(args.sku);
    opts.batch = args.batch as usize;
    opts.claim_idle = Duration::from_millis(args.claim_idle_ms);
    opts.once = args.once;
    opts.stop = Some(stop.requested.clone());
    if !ctx.quiet && !ctx.json {
        eprintln!(
            "lockctl worker {}: persisting orders of {} (Ctrl-C to stop after the batch in hand)",
            opts.consumer,
            opts.skus
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let stats = worker::run(&ctx.target, &args.db, &opts)?;
    output(
        ctx,
        || {
            format!(
                "persisted {} orders ({} redelivered, {} conflicts, {} dead letters) in {} batches\n",
                stats.persisted,
                stats.redelivered,
                stats.conflicts,
                stats.dead_letters,
                stats.batches
            )
        },
        || {
            json!({
                "persisted": stats.persisted,
                "redelivered": stats.redelivered,
                "conflicts": stats.conflicts,
                "dead_letters": stats.dead_letters,
                "batches": stats.batches,
            })
        },
    )?;
    Ok(match stop.exit_code() {
        Some(code) => Exit::Signal(code),
        None => Exit::Ok,
    })
}

pub fn db_init(ctx: &Ctx, url: &str) -> anyhow::Result<Exit> {
    let mut db = Db::connect(url, ctx.options.connect_timeout)?;
    let r = db.init(url)?;
    output(
        ctx,
        || match (r.before == r.now, r.repaired.is_empty()) {
            (true, true) => format!("the orders schema is at version {}: nothing to do\n", r.now),
            (true, false) => format!(
                "the orders schema is at version {}: created again the missing {}\n",
                r.now,
                r.repaired.join(", ")
            ),
            (false, _) => format!(
                "the orders schema is now at version {} (was {})\n",
                r.now, r.before
            ),
        },
        || {
            json!({
                "schema_version_before": r.before,
                "schema_version": r.now,
                "latest": SCHEMA_VERSION,
                "repaired": r.repaired,
            })
        },
    )?;
    Ok(Exit::Ok)
}
