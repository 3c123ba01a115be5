//! What a caller's connections hold on the servers (locks, places in lock queues), so that a
//! process told to quit at once (a second Ctrl-C, SIGTERM during a wait) can give it back
//! before it exits, instead of leaving locks held for a whole TTL and queue entries behind.
//!
//! Not process-wide: the caller makes one and gives it to its [`super::Target`]
//! ([`super::Target::with_holdings`]); whoever takes something through that target registers
//! how to give it back, and the registration ends when the thing is given back normally.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How to give one thing back, within a time limit per call, best effort.
pub type GiveBack = Box<dyn FnOnce(Duration) + Send>;

/// The things held through a target, and how to give each back. Cloning shares them.
#[derive(Clone, Default)]
pub struct Holdings(Arc<Inner>);

#[derive(Default)]
struct Inner {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, GiveBack>>,
}

impl std::fmt::Debug for Holdings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Holdings({} held)", self.entries().len())
    }
}

impl Holdings {
    /// Nothing held yet.
    pub fn new() -> Holdings {
        Holdings::default()
    }

    /// Registers something held; it is forgotten when the returned [`Held`] is dropped.
    pub fn hold(&self, give_back: GiveBack) -> Held {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.entries().insert(id, give_back);
        Held {
            id,
            holdings: self.clone(),
        }
    }

    /// Gives back everything still held, best effort, each within `limit`; returns how many.
    /// For a process about to exit: the threads that hold the things are not told.
    pub fn give_back_all(&self, limit: Duration) -> usize {
        let all: Vec<GiveBack> = self.entries().drain().map(|(_, g)| g).collect();
        let n = all.len();
        for give_back in all {
            give_back(limit);
        }
        n
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<u64, GiveBack>> {
        self.0.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One registration in [`Holdings`]; dropping it forgets the thing (it was given back).
pub struct Held {
    id: u64,
    holdings: Holdings,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({})", self.id)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.holdings.entries().remove(&self.id);
    }
}
