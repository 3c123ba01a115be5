//! The leases a system takes, learned by watching its Redis while a round runs: keys with a
//! time to live that were not there when the round began (or that carry the round's SKU),
//! read with `SCAN` and `PTTL` only, a few times a second and a bounded number of keys a look.
//!
//! Why: a holder stalled past its lease is the bug a lock with a lease invites, and a fault
//! shorter than the lease cannot show it. The longest lease seen sets how long some pauses and
//! stalls are held ([`super::plan::Planner::with_long_holds`]).
//!
//! Not every key with a time to live is a lease. A logged-in user's session (`sess:<token>`,
//! 15 minutes) is new in the round too, and longer than any lock: taken for the lease, it
//! stretched the faults and its name, a live bearer token, was printed. So a key counts as a
//! lease first when it behaves like a lock: it names the round's SKU, or it is gone before
//! the round ends (released, or expired, as a lock is and a session is not); a key named like
//! a secret or by a random id (a session's, a token's) is never one. And a key is only ever
//! shown as its pattern ([`lockctl_core::redact::key_pattern`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use lockctl_core::conn::Target;

/// A lease seen: the key's pattern and the most time to live it was seen with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The key's pattern: its name with the parts that may be secrets as `*`, the round's SKU
    /// kept ([`lockctl_core::redact::key_pattern`]). Never the name itself, which may hold a
    /// live token.
    pub key: String,
    /// The most time to live it had when read, in ms (at most its lease).
    pub ttl_ms: u64,
}

/// How often the keys are looked at during a round.
const EVERY: Duration = Duration::from_millis(40);
/// The most keys one look reads (SCAN's COUNT over a few calls): a big keyspace is sampled,
/// never read whole.
const KEYS_A_LOOK: usize = 500;
/// The most keys remembered from before the round, and the most new keys followed in it.
const BEFORE_MAX: usize = 10_000;

/// A new key followed through a round.
#[derive(Clone, Debug)]
struct Seen {
    /// The most time to live it was read with, in ms.
    ttl_ms: u64,
    /// The last look that saw it.
    look: u64,
    /// Gone in a later look that read the whole keyspace: released or expired in the round.
    gone: bool,
}

/// How much a new key is like a lease, for choosing among them: a lock's behaviour first,
/// then any key that is neither a lock's nor a session's. `None`: a session's or a token's
/// key, never a lease.
fn rank(key: &str, seen: &Seen, sku: &str) -> Option<u8> {
    if !sku.is_empty() && key.contains(sku) {
        return Some(2);
    }
    let secret = lockctl_core::redact::names_a_secret(key)
        || lockctl_core::redact::key_pattern(key, "") != key;
    match (seen.gone, secret) {
        (_, true) => None,
        (true, false) => Some(2),
        (false, false) => Some(1),
    }
}

/// The lease among the new keys `seen`: the longest of the most lock-like.
fn choose(seen: &HashMap<String, Seen>, sku: &str) -> Option<Lease> {
    seen.iter()
        .filter_map(|(key, s)| rank(key, s, sku).map(|r| (r, s.ttl_ms, key)))
        .max_by(|a, b| (a.0, a.1, b.2).cmp(&(b.0, b.1, a.2)))
        .map(|(_, ttl_ms, key)| Lease {
            key: lockctl_core::redact::key_pattern(key, sku),
            ttl_ms,
        })
}

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
        let mut seen: HashMap<String, Seen> = HashMap::new();
        // One last look once the load is done: a lease left behind by a holder that died is
        // still there, however short the round.
        let mut last = false;
        let mut n = 0u64;
        while !last {
            last = done.load(Ordering::SeqCst);
            n += 1;
            let whole = look(&mut c, |key, ttl| {
                let new = !before.contains(key) || key.contains(sku.as_str());
                if !new || (seen.len() >= BEFORE_MAX && !seen.contains_key(key)) {
                    return;
                }
                let s = seen.entry(key.to_string()).or_insert(Seen {
                    ttl_ms: ttl,
                    look: n,
                    gone: false,
                });
                s.ttl_ms = s.ttl_ms.max(ttl);
                s.look = n;
            });
            match whole {
                // Only a look that read every key can tell a key is gone.
                Ok(true) => seen
                    .values_mut()
                    .filter(|s| s.look < n)
                    .for_each(|s| s.gone = true),
                Ok(false) => {}
                Err(_) => break,
            }
            if !last {
                thread::sleep(EVERY);
            }
        }
        choose(&seen, &sku)
    })
}

/// One look at the keys: each key with a time to live, and that time in ms; whether the look
/// read the whole keyspace (a big one is sampled).
fn look(
    c: &mut lockctl_core::conn::Conn,
    mut each: impl FnMut(&str, u64),
) -> lockctl_core::error::Result<bool> {
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
        if cursor == 0 {
            return Ok(true);
        }
        if read >= KEYS_A_LOOK {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ttl_ms: u64, gone: bool) -> Seen {
        Seen {
            ttl_ms,
            look: 1,
            gone,
        }
    }

    /// Issue 50, item 8: a 15-minute session key that outlives the round is no lease, and its
    /// name (a live token) is never what is shown; a lock is, by its SKU or by going away.
    #[test]
    fn a_lock_is_chosen_over_a_longer_session_and_shown_as_its_pattern() {
        let sku = "sku_886-hunt-0a0b0c-1";
        let token = "9f86d081884c7d659a2feaa0c55ad015";
        let mut keys = HashMap::new();
        keys.insert(format!("sess:{token}"), seen(900_000, false));
        keys.insert(format!("session:{token}:user"), seen(900_000, true));
        keys.insert(format!("lock:{sku}"), seen(2_500, false));
        let lease = choose(&keys, sku).unwrap();
        assert_eq!(lease.key, format!("lock:{sku}"));
        assert_eq!(lease.ttl_ms, 2_500);
        // A lock that names no SKU counts once it is seen to go.
        let mut keys = HashMap::new();
        keys.insert(format!("sess:{token}"), seen(900_000, false));
        keys.insert("cart_lock".to_string(), seen(60_000, false));
        keys.insert("checkout_lock".to_string(), seen(3_000, true));
        assert_eq!(choose(&keys, sku).unwrap().key, "checkout_lock");
        // Sessions only: no lease at all, and no token shown anywhere.
        let mut keys = HashMap::new();
        keys.insert(format!("sess:{token}"), seen(900_000, true));
        keys.insert("user_session:42".to_string(), seen(900_000, true));
        assert_eq!(choose(&keys, sku), None);
        // A key with a random id and the SKU: the SKU's lock, its id hidden.
        let mut keys = HashMap::new();
        keys.insert(format!("lock:{sku}:{token}"), seen(5_000, false));
        assert_eq!(choose(&keys, sku).unwrap().key, format!("lock:{sku}:*"));
    }
}
