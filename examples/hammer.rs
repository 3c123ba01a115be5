//! A 1,000-purchase hammer and its verdict, from a program: 1,000 buyers, 20 at a time, on a
//! stock of 300 with the atomic strategy; then the books read back and judged.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example hammer
//! ```

use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::stock::Strategy;
use lockctl_hammer::{HammerOptions, LoadOptions, Verdict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let target = Target::open(&url, ConnectOptions::default())?;
    let mut options = HammerOptions {
        load: LoadOptions {
            sku: "example_hammer".parse()?,
            requests: 1000,
            concurrency: 20,
            stock: Some(300),
            ..LoadOptions::default()
        },
        ..HammerOptions::default()
    };
    options.buy.strategy = Strategy::Atomic;
    let report = lockctl_hammer::run(&target, &options)?;
    println!(
        "{:?}: bought {}, sold out {}, stock {} -> {:?}, {:.0} purchases/s",
        report.verdict,
        report.bought,
        report.sold_out,
        report.run.initial_stock,
        report.final_stock,
        report.throughput_rps
    );
    for v in &report.violations {
        println!("  violation: {v}");
    }
    std::process::exit(if report.verdict == Verdict::Pass {
        0
    } else {
        3
    });
}
