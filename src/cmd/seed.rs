//! `lockctl seed SKU COUNT [--buckets K]`: set the stock and clear the ledger.

use anyhow::Context;
use serde::Serialize;

use lockctl_core::sku::Sku;
use lockctl_core::stock;
use lockctl_core::stock::buckets::{Placement, seed_buckets};

use super::{Ctx, Exit, output};

/// `seed --json`. Fields in alphabetical order, the order `--json` has always printed them in.
#[derive(Serialize)]
struct Seeded<'a> {
    /// With `--buckets`: each bucket's SKU, units, slot and master.
    #[serde(skip_serializing_if = "Option::is_none")]
    buckets: Option<&'a [Placement]>,
    /// Always true: a seed clears the order ledger.
    ledger_cleared: bool,
    sku: &'a str,
    stock: u64,
}

impl<'a> Seeded<'a> {
    fn new(sku: &'a Sku, stock: u64, buckets: Option<&'a [Placement]>) -> Seeded<'a> {
        Seeded {
            sku: sku.as_str(),
            stock,
            ledger_cleared: true,
            buckets,
        }
    }
}

pub fn run(ctx: &Ctx, sku: &Sku, count: u64, buckets: Option<usize>) -> anyhow::Result<Exit> {
    let mut conn = ctx.target.connect()?;
    let Some(k) = buckets else {
        stock::seed(&mut conn, sku, count).with_context(|| format!("could not seed '{sku}'"))?;
        output(
            ctx,
            || format!("seeded {sku}: stock {count}, ledger cleared\n"),
            || Seeded::new(sku, count, None),
        )?;
        return Ok(Exit::Ok);
    };
    let placed = seed_buckets(&mut conn, sku, count, k)
        .with_context(|| format!("could not seed '{sku}' over {k} buckets"))?;
    let mut masters: Vec<&str> = placed.iter().map(|p| p.master.as_str()).collect();
    masters.sort();
    masters.dedup();
    if masters.len() < k {
        let warning = match ctx.target.is_cluster() {
            false => format!(
                "warning: {k} buckets on one server share its one core; buckets spread a sale only over the masters of a Redis Cluster (--cluster)\n"
            ),
            true => format!(
                "warning: the cluster has {} masters, so {k} buckets share them; a bucket beyond the masters adds borrowing, not capacity\n",
                masters.len()
            ),
        };
        eprint!("{warning}");
    }
    output(
        ctx,
        || {
            let mut s = format!(
                "seeded {sku}: stock {count} over {k} buckets on {} {}, ledgers cleared\n",
                masters.len(),
                if masters.len() == 1 {
                    "master"
                } else {
                    "masters"
                }
            );
            for p in &placed {
                s.push_str(&format!(
                    "  bucket {}  {:<24} {:>6} units  slot {:>5}  on {}\n",
                    p.bucket, p.sku, p.units, p.slot, p.master
                ));
            }
            s
        },
        || Seeded::new(sku, count, Some(&placed)),
    )?;
    Ok(Exit::Ok)
}
