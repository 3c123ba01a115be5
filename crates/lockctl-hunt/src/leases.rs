//! The leases a system takes, learned by watching its Redis while a round runs: keys with a
//! time to live that were not there when the round began (or that carry the round's SKU),
//! read with `SCAN` and `PTTL` only, a few times a second and a bounded number of keys a look.
//!
//! Why: a holder stalled past its lease is the bug a lock with a lease invites, and a fault
//! shorter than the lease cannot show it. The longest lease seen sets how long some pauses and
//! stalls are held ([`super::plan::Planner::with_long_holds`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use lockctl_core::conn::Target;

/// A lease seen: the key and the most time to live it was seen with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The key.
    pub key: String,
    /// The most time to live it had when read, in ms (at most its lease).
    pub ttl_ms: u64,
}

/// How often the keys are looked at during a round.
const EVERY: Duration = Duration::from_millis(40);
/// The most keys one look reads (SCAN's COUNT over a few calls): a big keyspace is sampled,
/// never read whole.
const KEYS_A_LOOK: usize = 500;
/// The most keys remembered from before the round.
const BEFORE_MAX: usize = 10_000;

/// Watches `target` on a thread of its own until `done` is set; returns the longest lease seen
/// (`None`: none, or the Redis could not be read: learning is best effort).
pub fn watch(
    target: &Target,
    sku: &str,
    done: Arc<AtomicBool>,
) -> thread::JoinHandle<Option<Lease>> {
    // Named as lockctl's own, so that client-kill spares it.
    let target = target.clone().with_client_name(super::nemesis::OWN_NAME);
    let sku = sku.to_string();
    thread::spawn(move || {
        let mut c = target.connect().ok()?;
        let mut before = HashSet::new();
        let _ = look(&mut c, |key, _| {
            if before.len() < BEFORE_MAX {
                before.insert(key.to_string());
            }
        });
        let mut longest: Option<Lease> = None;
        // One last look once the load is done: a lease left behind by a holder that died is
        // still there, however short the round.
        let mut last = false;
        while !last {
            last = done.load(Ordering::SeqCst);
            let seen = look(&mut c, |key, ttl| {
                let new = !before.contains(key) || key.contains(sku.as_str());
                if new && longest.as_ref().is_none_or(|l| ttl > l.ttl_ms) {
                    longest = Some(Lease {
                        key: key.to_string(),
                        ttl_ms: ttl,
                    });
                }
            });
            if seen.is_err() {
                break;
            }
            if !last {
                thread::sleep(EVERY);
            }
        }
        longest
    })
}

/// One look at the keys: each key with a time to live, and that time in ms.
fn look(
    c: &mut lockctl_core::conn::Conn,
    mut each: impl FnMut(&str, u64),
) -> lockctl_core::error::Result<()> {
    let mut cursor: u64 = 0;
    let mut read = 0;
    loop {
        let (next, keys): (u64, Vec<String>) =
            c.query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(200))?;
        for k in &keys {
            let ttl: i64 = c.query(redis::cmd("PTTL").arg(k))?;
            if ttl > 0 {
                each(k, ttl as u64);
            }
        }
        read += keys.len();
        cursor = next;
        if cursor == 0 || read >= KEYS_A_LOOK {
            return Ok(());
        }
    }
}
