//! Every lock this process holds or is queued for, so that a process told to quit at once (a
//! second Ctrl-C, SIGTERM during a wait) can give them back before it exits instead of
//! leaving them held for a whole TTL and its queue entries behind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use super::scripts::LEAVE;
use super::{Token, release_token};
use crate::conn::Target;
use crate::keys::LockKeys;
use crate::redlock::Quorum;

struct Entry {
    target: Target,
    keys: Arc<LockKeys>,
    token: Token,
    ttl: Duration,
    quorum: Option<Arc<Quorum>>,
}

static ENTRIES: LazyLock<Mutex<HashMap<u64, Entry>>> = LazyLock::new(Default::default);
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A lock (or a place in its queue) this process has; forgotten when dropped.
#[derive(Debug)]
pub(super) struct Registration(u64);

pub(super) fn register(
    target: &Target,
    keys: &Arc<LockKeys>,
    token: &Token,
    ttl: Duration,
    quorum: Option<Arc<Quorum>>,
) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let entry = Entry {
        target: target.clone(),
        keys: keys.clone(),
        token: token.clone(),
        ttl,
        quorum,
    };
    entries().insert(id, entry);
    Registration(id)
}

impl Drop for Registration {
    fn drop(&mut self) {
        entries().remove(&self.0);
    }
}

fn entries() -> std::sync::MutexGuard<'static, HashMap<u64, Entry>> {
    ENTRIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Gives back every lock this process holds and leaves every queue it is in, best effort, on
/// fresh connections opened within `limit` each. Returns how many locks and places it tried.
/// For a process about to exit: the threads that hold the locks are not told.
pub fn give_back_all(limit: Duration) -> usize {
    let all: Vec<Entry> = entries().drain().map(|(_, e)| e).collect();
    for e in &all {
        let Ok(mut conn) = e.target.connect_within(limit) else {
            continue;
        };
        let _ = conn.set_call_timeout(limit);
        let ttl_ms = e.ttl.as_millis() as u64;
        let _ = conn.script::<redis::Value>(&e.keys.invocation(
            &LEAVE,
            e.token.as_str(),
            ttl_ms,
            false,
            true,
            None,
        ));
        let _ = release_token(&mut conn, &e.keys, &e.token);
        if let Some(q) = &e.quorum {
            q.release(&e.keys.lock, e.token.as_str(), e.ttl);
        }
    }
    all.len()
}
