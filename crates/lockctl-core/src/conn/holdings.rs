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

/// How to give one thing back, within a time limit per call, best effort. It may be called
/// twice (see [`Holdings::give_back_all`]), so it must be harmless the second time.
pub type GiveBack = Box<dyn Fn(Duration) + Send + Sync>;

/// How long [`Holdings::give_back_all`] lets calls already on their way land before it gives
/// everything back a second time.
pub const SETTLE: Duration = Duration::from_millis(100);

/// The things held through a target, and how to give each back. Cloning shares them.
#[derive(Clone, Default)]
pub struct Holdings(Arc<Inner>);

#[derive(Default)]
struct Inner {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, GiveBack>>,
    /// Everything was given back: the process is quitting, and nothing more is taken.
    closed: std::sync::atomic::AtomicBool,
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

    /// Registers something about to be taken; it is forgotten when the returned [`Held`] is
    /// dropped. `None` once everything was given back ([`Holdings::give_back_all`]): the
    /// process is quitting, and the caller must not take it.
    pub fn hold(&self, give_back: GiveBack) -> Option<Held> {
        let mut entries = self.entries();
        if self.0.closed.load(Ordering::SeqCst) {
            return None;
        }
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        entries.insert(id, give_back);
        Some(Held {
            id,
            holdings: self.clone(),
        })
    }

    /// Gives back everything still held, best effort, each within `limit`; returns how many.
    /// For a process about to exit: the threads that hold the things are not told, and go on
    /// until it exits. So everything is given back twice, `SETTLE` (100 ms) apart: a waiter's call
    /// already on its way (a refresh of its place in a queue) may queue it again, or be granted
    /// the lock, after the first time. From then on nothing new can be registered
    /// ([`Holdings::hold`] answers `None`), so no new wait begins.
    pub fn give_back_all(&self, limit: Duration) -> usize {
        let mut entries = self.entries();
        self.0.closed.store(true, Ordering::SeqCst);
        let n = entries.len();
        if n == 0 {
            return 0;
        }
        for give_back in entries.values() {
            give_back(limit);
        }
        std::thread::sleep(SETTLE);
        for give_back in entries.values() {
            give_back(limit);
        }
        entries.clear();
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
