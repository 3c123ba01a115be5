//! What the contract (CONTRACT.md) names, as the tests of both tiers check it.

/// The fields the contract requires in `hammer --json`.
pub const HAMMER_FIELDS: [&str; 16] = [
    "verdict",
    "requests",
    "concurrency",
    "strategy",
    "initial_stock",
    "final_stock",
    "bought",
    "sold_qty",
    "sold_out",
    "busy",
    "lease_lost",
    "errors",
    "oversold",
    "elapsed_s",
    "throughput_rps",
    "latency_ms",
];
