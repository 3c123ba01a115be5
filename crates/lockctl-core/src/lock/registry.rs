//! A lock this process holds or is queued for, registered in its target's
//! [`Holdings`](crate::conn::Holdings) with how to give it back: leave the queue, release by
//! token, and give back the quorum's votes.

use std::sync::Arc;
use std::time::Duration;

use super::scripts::LEAVE;
use super::{Token, release_token};
use crate::conn::{Held, Target};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::redlock::Quorum;

/// Registers the lock (or the place in its queue) `token` is about to ask for, if `target`
/// keeps holdings. An error once the holdings were given back: the process is quitting.
pub(super) fn register(
    target: &Target,
    keys: &Arc<LockKeys>,
    token: &Token,
    ttl: Duration,
    quorum: Option<Arc<Quorum>>,
) -> Result<Option<Held>> {
    let Some(holdings) = target.holdings() else {
        return Ok(None);
    };
    let (target, keys, token) = (target.clone(), keys.clone(), token.clone());
    let held = holdings.hold(Box::new(move |limit| {
        give_back(&target, &keys, &token, ttl, quorum.as_deref(), limit);
    }));
    match held {
        Some(h) => Ok(Some(h)),
        None => Err(Error::internal(
            "this process is quitting: its locks were given back, and no new one is taken",
        )),
    }
}

/// Gives back the lock `token` holds or is queued for, best effort, each call within `limit`:
/// leaves the queue, releases by token (owner-checked: a lock since granted to another stays
/// theirs), and gives back the quorum's votes.
pub(super) fn give_back(
    target: &Target,
    keys: &LockKeys,
    token: &Token,
    ttl: Duration,
    quorum: Option<&Quorum>,
    limit: Duration,
) {
    let Ok(mut conn) = target.connect_within(limit) else {
        return;
    };
    let _ = conn.set_call_timeout(limit);
    let ttl_ms = ttl.as_millis() as u64;
    let _ = conn.script::<redis::Value>(&keys.invocation(
        &LEAVE,
        token.as_str(),
        ttl_ms,
        false,
        &keys.wake_of(token.as_str()),
        None,
    ));
    let _ = release_token(&mut conn, keys, token);
    if let Some(q) = quorum {
        q.release(&keys.lock, token.as_str(), ttl);
    }
}
