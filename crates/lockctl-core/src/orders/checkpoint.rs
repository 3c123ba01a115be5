//! Points in a worker's round where its caller may step in: a test that makes the worker die
//! there (as a `kill -9` would) or stall there (as a paused VM would), to prove that nothing is
//! lost or doubled whatever instant a worker stops at. The worker is given them as a value, so
//! a worker that was given none (every production one) has nothing to consult.

use std::fmt;
use std::sync::Arc;

/// Where in a round a worker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Checkpoint {
    /// A batch is read and about to be written: nothing of it is in PostgreSQL yet.
    BeforeCommit,
    /// The batch is inserted in its transaction, which is not committed yet (its rows are
    /// locked by this worker's session).
    InTransaction,
    /// The batch is committed and not yet acknowledged in the stream.
    AfterCommit,
}

/// What to run at each [`Checkpoint`]: called on the worker's thread, so it may block (the
/// worker stalls there) or unwind (the worker dies there). Default: nothing.
#[derive(Clone, Default)]
pub struct Checkpoints(Option<Arc<dyn Fn(Checkpoint) + Send + Sync>>);

impl Checkpoints {
    /// `f` runs at every checkpoint the worker reaches.
    pub fn new(f: impl Fn(Checkpoint) + Send + Sync + 'static) -> Checkpoints {
        Checkpoints(Some(Arc::new(f)))
    }

    pub(super) fn reach(&self, at: Checkpoint) {
        if let Some(f) = &self.0 {
            f(at);
        }
    }
}

impl fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Checkpoints(set)",
            None => "Checkpoints(none)",
        })
    }
}
