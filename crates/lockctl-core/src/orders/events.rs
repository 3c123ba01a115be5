//! What a worker has to say while it runs (a failure it waits out, a batch it sets aside, an
//! order it dead-letters), as values: the library never prints, the caller decides where they
//! go (the command line writes them on stderr; a service may log them).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One thing a worker wants said.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerEvent {
    /// An attempt failed and is waited out, the batch kept in hand.
    Waiting {
        /// The failure, in words.
        error: String,
        /// How long until the next attempt.
        backoff: Duration,
        /// How long the worker has been waiting so far.
        waiting: Duration,
    },
    /// All is well again, after waiting this long.
    Recovered {
        /// How long the failure lasted.
        after: Duration,
    },
    /// A batch's rows are locked by another session: left pending for later.
    SetAside {
        /// How many orders were set aside.
        orders: usize,
        /// The stream they were in.
        stream: String,
    },
    /// Order ids arrived that PostgreSQL already holds from another deduction or with other
    /// content: recorded in `lockctl_order_conflicts`.
    Conflicts {
        /// How many conflicts.
        count: u64,
    },
    /// An entry was moved to the dead letters.
    DeadLettered {
        /// The stream entry's id.
        id: String,
        /// The stream key.
        stream: String,
        /// Why, in words.
        why: String,
        /// The dead-letter stream it was moved to.
        dead_letters: String,
    },
}

impl fmt::Display for WorkerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerEvent::Waiting {
                error,
                backoff,
                waiting,
            } => write!(
                f,
                "{error}; retrying in {} ms (waiting for {:.1} s, batch kept)",
                backoff.as_millis(),
                waiting.as_secs_f64()
            ),
            WorkerEvent::Recovered { after } => {
                write!(
                    f,
                    "going again after {:.1} s of waiting",
                    after.as_secs_f64()
                )
            }
            WorkerEvent::SetAside { orders, stream } => write!(
                f,
                "{orders} orders of {stream} have rows another session holds locked (a worker stopped mid-transaction?): left pending, taken up again once they have been idle for the claim time"
            ),
            WorkerEvent::Conflicts { count } => write!(
                f,
                "{count} order id(s) already persisted from another deduction, or with another SKU, quantity or user: recorded in lockctl_order_conflicts"
            ),
            WorkerEvent::DeadLettered {
                id,
                stream,
                why,
                dead_letters,
            } => write!(
                f,
                "entry {id} of {stream} set aside ({why}): moved to {dead_letters}, whole, to be put back after a fix"
            ),
        }
    }
}

/// A function that hears a worker's events.
type Hear = Arc<dyn Fn(&WorkerEvent) + Send + Sync>;

/// Where a worker's events go. Default: nowhere.
#[derive(Clone, Default)]
pub struct Listener(Option<Hear>);

impl Listener {
    /// Events go to `f`.
    pub fn new(f: impl Fn(&WorkerEvent) + Send + Sync + 'static) -> Listener {
        Listener(Some(Arc::new(f)))
    }

    pub(super) fn tell(&self, event: WorkerEvent) {
        if let Some(f) = &self.0 {
            f(&event);
        }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Listener(set)"
        } else {
            "Listener(none)"
        })
    }
}
