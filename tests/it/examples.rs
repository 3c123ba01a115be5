//! The library's examples (`examples/`) run as their docs say, against a private Redis: the
//! README's "Using lockctl from Rust" program among them. `cargo test` builds them beside the
//! tests (in `target/<profile>/examples/`).

use std::path::PathBuf;
use std::process::Command;

use crate::support::{RedisServer, run_ok, stdout};

/// The built example `name`, beside this test binary's directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} was not built (cargo test builds the examples)",
        path.display()
    );
    path
}

#[test]
fn the_fenced_purchase_and_the_hammer_examples_run_as_their_docs_say() {
    let redis = RedisServer::start();
    let out = run_ok(Command::new(example("fenced_purchase")).env("REDIS_URL", redis.url()));
    assert_eq!(
        stdout(&out),
        "bought order-1, 2 left\norder-1 again: already bought 1 unit(s), nothing deducted\n"
    );
    let out = run_ok(Command::new(example("hammer")).env("REDIS_URL", redis.url()));
    assert!(
        stdout(&out).starts_with("Pass: bought 300, sold out 700, stock 300 -> Some(0)"),
        "{}",
        stdout(&out)
    );
}

/// A service runs the hammer (orders pipeline included) from inside an async task: nothing
/// starts a runtime inside its runtime (the PostgreSQL read-back runs on a thread of its own),
/// and the verdict comes back.
#[test]
fn the_hammer_with_its_orders_pipeline_runs_from_inside_an_async_task() {
    use lockctl_core::conn::ConnectOptions;
    use lockctl_core::orders::db::Db;
    use lockctl_core::stock::Strategy;
    use lockctl_hammer::{HammerOptions, LoadOptions, PipelineOptions, Verdict};

    let redis = RedisServer::start();
    let db = crate::support::TestDb::create();
    Db::connect(&db.url, std::time::Duration::from_secs(5))
        .unwrap()
        .init(&db.url)
        .unwrap();
    let target = lockctl_core::conn::Target::open(&redis.url(), ConnectOptions::default()).unwrap();
    let mut options = HammerOptions {
        load: LoadOptions {
            sku: "async_pipe".parse().unwrap(),
            requests: 200,
            concurrency: 8,
            stock: Some(50),
            ..LoadOptions::default()
        },
        pipeline: Some(PipelineOptions::new(db.url.clone())),
        ..HammerOptions::default()
    };
    options.buy.strategy = Strategy::Atomic;
    options.buy.queue = true;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime
        .block_on(async { lockctl_hammer::run(&target, &options) })
        .expect("the hammer runs inside an async task");
    assert_eq!(report.verdict, Verdict::Pass, "{:?}", report.violations);
    assert_eq!(report.pipeline.as_ref().map(|p| p.row_units), Some(50));
}

/// The reference shop (`examples/shop.rs`) under the hunt: every fault the facts allow, users
/// with a limit of two, retries of the same order id. It passes.
#[test]
fn the_hunt_cannot_break_the_reference_shop() {
    let redis = RedisServer::start();
    let port = crate::support::free_port();
    let url = format!("http://127.0.0.1:{port}/buy?sku={{sku}}&order={{order}}&user={{user}}");
    let serve = format!(
        "REDIS_URL={} LIMIT=2 exec {} 127.0.0.1:{port}",
        redis.url(),
        example("shop").display()
    );
    let out = crate::support::lockctl(
        &redis.url(),
        &[
            "--json",
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--users",
            "4",
            "--limit",
            "2",
            "--idempotent",
            "--serve",
            &serve,
            "--budget",
            "8s",
            "--heal-ms",
            "3000",
        ],
    );
    let said = format!("{}{}", stdout(&out), crate::support::stderr(&out));
    assert_eq!(crate::support::code(&out), 0, "{said}");
    let v = crate::support::json(&out);
    // Several rounds judged, most with a fault (which faults, and whether each found
    // something to act on, is the schedule's and the moment's: not asserted here).
    assert!(v["judged"].as_u64().unwrap() >= 3, "{said}");
}
