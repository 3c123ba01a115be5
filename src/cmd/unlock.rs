//! `lockctl unlock SKU`: the operator's escape hatch for a stuck lock.

use serde_json::json;

use lockctl::lock::{Lock, LockOptions, Release};
use lockctl::sku::Sku;

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, sku: &Sku, force: bool, token: Option<String>) -> anyhow::Result<Exit> {
    let mut conn = ctx.target.connect()?;
    let lock = Lock::new(&ctx.target, sku.as_str(), LockOptions::default());
    let holder = lock.holder(&mut conn)?;
    let key = &lock.keys().lock;
    let (removed, message, exit) = match (&holder, force, token) {
        (None, _, _) => (false, format!("{key} is not held: nothing to do"), Exit::Ok),
        (Some(_), true, _) => match lock.force_unlock(&mut conn)? {
            Some(t) => (true, format!("removed {key}, held by token {t}"), Exit::Ok),
            None => (
                false,
                format!("{key} was released meanwhile: nothing to do"),
                Exit::Ok,
            ),
        },
        (Some((held, _)), false, Some(t)) => match lock.release_by_token(&mut conn, &t)? {
            Release::Released => (true, format!("released {key}, held by token {t}"), Exit::Ok),
            Release::Expired => (
                false,
                format!("{key} is not held any more: nothing to do"),
                Exit::Ok,
            ),
            Release::NotOwner => (
                false,
                format!("not released: {key} is held by token {held}, not {t}"),
                Exit::Refused,
            ),
        },
        (Some((held, ttl)), false, None) => (
            false,
            format!(
                "{key} is held by token {held} for {:.3} s more; not removed (pass --force to delete it, or --token {held} to release it only if that holder still has it)",
                ttl.as_secs_f64()
            ),
            Exit::Refused,
        ),
    };
    output(
        ctx,
        || format!("{message}\n"),
        || {
            json!({
                "sku": sku.as_str(),
                "held_by": holder.as_ref().map(|(t, _)| t),
                "ttl_ms": holder.as_ref().map(|(_, d)| d.as_millis() as u64),
                "removed": removed,
                "message": message,
            })
        },
    )?;
    Ok(exit)
}
