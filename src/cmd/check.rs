//! `lockctl check`: is this Redis reachable and fit for locking?

use lockctl::advice::CliAdvice;
use lockctl_core::check;
use lockctl_core::conn::Target;
use lockctl_render as render;

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, cluster: bool) -> anyhow::Result<Exit> {
    // On a cluster, the seed node answers for itself (INFO and CONFIG would be sent to every
    // node and come back as maps), and CLUSTER INFO for the cluster.
    let mut seed = match cluster {
        true => Target::open(&ctx.url, ctx.options.clone())?.connect()?,
        false => ctx.target.connect()?,
    };
    let mut report = check::check(&mut seed, cluster)?;
    if cluster {
        check::check_cluster(&mut report, &mut seed);
    }
    if let Some(q) = &ctx.quorum {
        check::check_quorum(&mut report, q);
    }
    // With -q the verdict comes first: it is the line a script wants.
    let text = || match ctx.quiet {
        true => render::check_text(&report, &CliAdvice)
            .lines()
            .last()
            .unwrap_or("")
            .to_string(),
        false => render::check_text(&report, &CliAdvice),
    };
    output(ctx, text, || render::check_json(&report, &CliAdvice))?;
    Ok(if report.ok { Exit::Ok } else { Exit::Refused })
}
