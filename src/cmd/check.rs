//! `lockctl check`: is this Redis reachable and fit for locking?

use lockctl::conn::Target;
use lockctl::{check, render};

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, cluster: bool) -> anyhow::Result<Exit> {
    // On a cluster, the seed node answers for itself (INFO and CONFIG would be sent to every
    // node and come back as maps), and CLUSTER INFO for the cluster.
    let mut seed = match cluster {
        true => Target::open(&ctx.url, ctx.options.clone())?.connect()?,
        false => ctx.target.connect()?,
    };
    let mut report = check::check(&mut seed)?;
    if cluster {
        check::check_cluster(&mut report, &mut seed);
    }
    if let Some(q) = &ctx.quorum {
        check::check_quorum(&mut report, q, ctx.options.call_timeout);
    }
    output(
        ctx,
        || render::check_text(&report),
        || render::check_json(&report),
    )?;
    Ok(if report.ok { Exit::Ok } else { Exit::Refused })
}
