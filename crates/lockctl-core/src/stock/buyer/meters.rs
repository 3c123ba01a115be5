//! A buyer's metrics: one counter per outcome and the stock gauge, looked up once.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;
use crate::sku::Sku;
use crate::stock::{Buy, Outcome};

/// This buyer's metrics, looked up once: a purchase then costs two atomic operations (none
/// when its target records nowhere: `Meters` is then `None`).
#[derive(Clone)]
pub(super) struct Meters {
    /// One counter per outcome, in the order of [`Outcome::ALL`].
    outcomes: [Counter; Outcome::ALL.len()],
    /// `lockctl_buy_total{outcome="error"}`.
    errors: Counter,
    stock: Gauge,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meters")
    }
}

impl Meters {
    pub(super) fn new(m: &Metrics, sku: &Sku) -> Meters {
        Meters {
            outcomes: Outcome::ALL.map(|o| m.buy_counter(o.as_str())),
            errors: m.buy_counter("error"),
            stock: m.stock_gauge(sku.as_str()),
        }
    }

    /// Counts one purchase: its outcome (and the stock it saw), or an error.
    pub(super) fn record(&self, result: std::result::Result<&Buy, ()>) {
        match result {
            Ok(buy) => {
                self.outcomes[buy.outcome() as usize].inc();
                if let Some(left) = buy.remaining() {
                    self.stock.set(left);
                }
            }
            Err(()) => {
                self.errors.inc();
            }
        }
    }
}
