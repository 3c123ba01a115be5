//! The JSON objects that cross a process boundary, each defined once.
//!
//! `buy --json` prints a [`BuyJson`] and every command prints an [`ErrorJson`] when it fails
//! under `--json`; `hammer --mode procs` reads the same types back from its children. One
//! `Serialize`/`Deserialize` type per object means the two sides cannot drift apart: a field
//! renamed on one side is renamed on the other.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};
use crate::stock::{Buy, Outcome, Purchase, Strategy};
use crate::units::millis;

/// `buy --json`. Fields are in alphabetical order, the order earlier versions printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuyJson {
    /// The fencing token of the lock grant (lock strategies).
    pub fence: Option<u64>,
    /// The lock strategy deducted, then found its lease gone at the release.
    pub lease_overrun: bool,
    /// With `limit_reached`: the most units the user may buy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// How long the lock was held, in milliseconds (lock strategies).
    pub lock_hold_ms: Option<f64>,
    /// How long the buyer waited for the lock, in milliseconds (lock strategies).
    pub lock_wait_ms: Option<f64>,
    /// The order id (the idempotency key).
    pub order_id: String,
    /// With a replayed order id: the units of the original order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_qty: Option<u64>,
    /// What the purchase came to.
    pub outcome: Outcome,
    /// Units per purchase.
    pub qty: u64,
    /// The stock after the deduction (or seen), for `bought` and `sold_out`.
    pub remaining: Option<i64>,
    /// How many times the watchdog renewed the lease.
    pub renewals: u64,
    /// The order id had bought before: nothing was deducted now.
    pub replayed: bool,
    /// The SKU.
    pub sku: String,
    /// The strategy that made it.
    pub strategy: Strategy,
    /// With `limit_reached`: the units the user already has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_bought: Option<u64>,
}

impl BuyJson {
    /// The JSON of purchase `p` of `sku` under `strategy`.
    pub fn new(sku: &str, strategy: Strategy, p: &Purchase) -> BuyJson {
        let (user_bought, limit) = match p.outcome {
            Buy::LimitReached { bought, limit } => (Some(bought), Some(limit)),
            _ => (None, None),
        };
        BuyJson {
            fence: p.fence,
            lease_overrun: p.overran_lease,
            limit,
            lock_hold_ms: p.lock_hold.map(millis),
            lock_wait_ms: p.lock_wait.map(millis),
            order_id: p.order_id.clone(),
            original_qty: p.replayed,
            outcome: p.outcome.outcome(),
            qty: p.qty,
            remaining: p.outcome.remaining(),
            renewals: p.renewals,
            replayed: p.replayed.is_some(),
            sku: sku.to_string(),
            strategy,
            user_bought,
        }
    }

    /// The purchase outcome this object reports.
    pub fn buy(&self) -> Buy {
        let remaining = self.remaining.unwrap_or(0);
        match self.outcome {
            Outcome::Bought => Buy::Bought { remaining },
            Outcome::SoldOut => Buy::SoldOut { remaining },
            Outcome::Busy => Buy::Busy,
            Outcome::LeaseLost => Buy::LeaseLost,
            Outcome::LimitReached => Buy::LimitReached {
                bought: self.user_bought.unwrap_or(0),
                limit: self.limit.unwrap_or(0),
            },
        }
    }
}

/// What any command prints on stdout when it fails under `--json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorJson {
    /// The message, as printed on stderr.
    pub error: String,
    /// The kind of failure (stable names: `refused`, `timed_out`, ...).
    pub error_kind: ErrorKind,
    /// The failed call may still have been applied (Jepsen's "indeterminate").
    pub indeterminate: bool,
}

impl ErrorJson {
    /// An error's JSON: its words, its kind, and whether it may have been applied.
    pub fn new(message: String, kind: ErrorKind, indeterminate: bool) -> ErrorJson {
        ErrorJson {
            error: message,
            error_kind: kind,
            indeterminate,
        }
    }

    /// The object for a library error, with `message` (its full context) as the text.
    pub fn from_error(message: String, e: &Error) -> ErrorJson {
        ErrorJson::new(message, e.kind(), e.is_indeterminate())
    }
}

/// What a `lockctl buy --json` child printed: a purchase or an error.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum BuyReply {
    /// The purchase failed: the error, as the child printed it.
    Failed(ErrorJson),
    /// The purchase ended with an outcome.
    Done(Box<BuyJson>),
}
