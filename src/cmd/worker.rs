//! `lockctl worker` and `lockctl db init`: the orders pipeline's side that writes PostgreSQL.

use std::time::Duration;

use serde::Serialize;

use lockctl_core::keys::StockKeys;
use lockctl_core::orders::db::{Db, SCHEMA_VERSION};
use lockctl_core::orders::dead::{self, Requeued};
use lockctl_core::orders::events::Listener;
use lockctl_core::orders::worker::{self, WorkerOptions};
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::with_buckets;
use lockctl_core::units::count;

use super::{Ctx, Exit, UsageError, output};
use crate::cli::WorkerArgs;
use crate::signals;

/// Runs until SIGINT/SIGTERM/SIGHUP (which finish the batch in hand first), or with `--once`
/// until what is queued is persisted; with `--requeue-dead`, puts dead letters back instead.
pub fn run(ctx: &Ctx, args: WorkerArgs) -> anyhow::Result<Exit> {
    if args.requeue_dead {
        return requeue_dead(ctx, &args.sku);
    }
    let Some(db) = args.db.as_deref() else {
        return Err(UsageError("lockctl worker needs --db URL (or DATABASE_URL)".into()).into());
    };
    if let Some(addr) = &args.metrics_addr {
        super::reporting::serve_metrics(ctx, addr, "the worker", || {})?;
    }
    let stop = signals::listen(signals::First::Finish("the batch in hand, then stopping"));
    let mut opts = WorkerOptions::new(args.sku);
    opts.batch = args.batch as usize;
    opts.claim_idle = Duration::from_millis(args.claim_idle_ms);
    opts.once = args.once;
    opts.stop = Some(stop.requested.clone());
    opts.events = to_stderr();
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
    let stats = worker::run(&ctx.target, db, &opts)?;
    output(
        ctx,
        || {
            format!(
                "persisted {} orders ({} redelivered, {} conflicts, {} dead letters) in {} batches; {} waited out, {} set aside\n",
                stats.persisted,
                stats.redelivered,
                stats.conflicts,
                stats.dead_letters,
                stats.batches,
                count(stats.retries, "failed attempt", "failed attempts"),
                count(stats.set_aside, "locked batch", "locked batches"),
            )
        },
        || stats,
    )?;
    Ok(match stop.exit_code() {
        Some(code) => Exit::Signal(code),
        None => Exit::Ok,
    })
}

/// A worker's events, said on stderr as `lockctl worker: ...`.
pub(super) fn to_stderr() -> Listener {
    Listener::new(|event| eprintln!("lockctl worker: {event}"))
}

/// `worker --requeue-dead --json`: what was put back, SKU by SKU.
#[derive(Serialize)]
struct RequeuedJson<'a> {
    requeued: Vec<SkuRequeued<'a>>,
}

/// One SKU's (or bucket's) dead letters put back, and those left.
#[derive(Serialize)]
struct SkuRequeued<'a> {
    sku: &'a str,
    #[serde(flatten)]
    done: Requeued,
}

/// `db init --json`: the schema's version before and after. Fields in alphabetical order, the
/// order `--json` has always printed them in.
#[derive(Serialize)]
struct DbInitJson<'a> {
    /// The version this lockctl knows.
    latest: usize,
    /// Tables created again although their version was recorded.
    repaired: &'a [String],
    schema_version: usize,
    schema_version_before: usize,
}

/// `--requeue-dead`: each SKU's dead letters that hold orders, back on its queue (of a
/// bucketed SKU, each bucket's too: a line per bucket).
fn requeue_dead(ctx: &Ctx, skus: &[Sku]) -> anyhow::Result<Exit> {
    let mut conn = ctx.target.connect()?;
    let mut per_sku = Vec::new();
    for given in skus {
        for sku in with_buckets(&mut conn, given)? {
            let keys = StockKeys::new(&sku);
            let done = dead::requeue(&mut conn, &keys)?;
            per_sku.push((sku, keys, done));
        }
    }
    output(
        ctx,
        || {
            per_sku
                .iter()
                .map(|(sku, keys, d)| {
                    let left = match d.left {
                        0 => String::new(),
                        n => format!(
                            "; {} left in {} (not orders, or their entry is gone)",
                            count(n, "dead letter", "dead letters"),
                            keys.dead_letters
                        ),
                    };
                    format!(
                        "{sku}: {} put back on {}{left}\n",
                        count(d.requeued, "order", "orders"),
                        keys.events
                    )
                })
                .collect()
        },
        || RequeuedJson {
            requeued: per_sku
                .iter()
                .map(|(sku, _, done)| SkuRequeued {
                    sku: sku.as_str(),
                    done: *done,
                })
                .collect(),
        },
    )?;
    Ok(Exit::Ok)
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
        || DbInitJson {
            schema_version_before: r.before,
            schema_version: r.now,
            latest: SCHEMA_VERSION,
            repaired: &r.repaired,
        },
    )?;
    Ok(Exit::Ok)
}
