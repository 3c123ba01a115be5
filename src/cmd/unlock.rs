//! `lockctl unlock SKU`: the operator's escape hatch for a stuck lock.

use serde::Serialize;

use lockctl_core::conn::Conn;
use lockctl_core::lock::{Lock, LockOptions, Release};
use lockctl_core::sku::Sku;

use super::{Ctx, Exit, output};

/// `unlock --json`: what held the lock and what was removed. Fields in alphabetical order,
/// the order `--json` has always printed them in.
#[derive(Serialize)]
struct Unlocked<'a> {
    /// Under `--force`: queue entries not written by lockctl, removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    damaged_removed: Option<u64>,
    /// The holder's token, if the lock was held.
    held_by: Option<&'a str>,
    message: &'a str,
    removed: bool,
    sku: &'a str,
    /// The holder's lease left; null under `--force`, which does not wait on it.
    ttl_ms: Option<u64>,
    /// Under `--force`: queued waiters removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters_removed: Option<u64>,
}

pub fn run(ctx: &Ctx, sku: &Sku, force: bool, token: Option<String>) -> anyhow::Result<Exit> {
    let mut conn = ctx.target.connect()?;
    let lock = Lock::new(&ctx.target, sku.as_str(), LockOptions::default());
    if force {
        return forced(ctx, sku, &lock, &mut conn);
    }
    let holder = lock.holder(&mut conn)?;
    let key = &lock.keys().lock;
    let (removed, message, exit) = match (&holder, token) {
        (None, _) => (false, format!("{key} is not held: nothing to do"), Exit::Ok),
        (Some((held, _)), Some(t)) => match lock.release_by_token(&mut conn, &t)? {
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
        (Some((held, ttl)), None) => (
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
        || Unlocked {
            sku: sku.as_str(),
            held_by: holder.as_ref().map(|(t, _)| t.as_str()),
            ttl_ms: holder.as_ref().map(|(_, d)| d.as_millis() as u64),
            removed,
            waiters_removed: None,
            damaged_removed: None,
            message: &message,
        },
    )?;
    Ok(exit)
}

/// `--force`: deletes the lock whoever holds it and empties its queue (handing the lock to
/// nobody: right after a crash the queue holds dead waiters), dropping damaged entries too.
fn forced(ctx: &Ctx, sku: &Sku, lock: &Lock, conn: &mut Conn) -> anyhow::Result<Exit> {
    let key = &lock.keys().lock;
    let f = lock.force_unlock(conn)?;
    let mut parts = vec![match &f.holder {
        Some(t) => format!("removed {key}, held by token {t}"),
        None => format!("{key} was not held"),
    }];
    if f.waiters > 0 {
        parts.push(format!(
            "emptied its queue of {} waiter{} (live ones queue again within a second; none was handed the lock)",
            f.waiters,
            if f.waiters == 1 { "" } else { "s" }
        ));
    }
    if f.damaged > 0 {
        parts.push(format!(
            "dropped {} damaged queue entr{} (not written by lockctl)",
            f.damaged,
            if f.damaged == 1 { "y" } else { "ies" }
        ));
    }
    let changed = f.holder.is_some() || f.waiters > 0 || f.damaged > 0;
    let message = if changed {
        parts.join("; ")
    } else {
        format!("{key} is not held and its queue is empty: nothing to do")
    };
    output(
        ctx,
        || format!("{message}\n"),
        || Unlocked {
            sku: sku.as_str(),
            held_by: f.holder.as_deref(),
            ttl_ms: None,
            removed: f.holder.is_some(),
            waiters_removed: Some(f.waiters),
            damaged_removed: Some(f.damaged),
            message: &message,
        },
    )?;
    Ok(Exit::Ok)
}
