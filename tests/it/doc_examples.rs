//! lockctl-core's documentation examples, run: each file of `crates/lockctl-core/doc-examples/`
//! is compiled into the docs as a `no_run` example (every `cargo test` compiles it) and
//! included here as it is, to run against a server of its own. Without a `redis-server` these
//! fail, naming what to install; no example passes unchecked.
//!
//! Each test then reads raw Redis behind the library's back, where the example leaves a trace.

use redis::Commands;

use crate::support::RedisServer;

/// Runs an async example to its end on a runtime of its own, as a service's `main` would.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

mod crate_docs {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/fenced_purchase.rs");

    #[test]
    fn the_crate_docs_fenced_purchase_sells_the_one_unit_once() {
        let server = RedisServer::start();
        fenced_purchase(&server.url()).unwrap();
        let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
        assert_eq!(stock, 0);
    }
}

mod guard_fenced {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/fenced_write.rs");

    #[test]
    fn the_guards_fenced_write_lands_and_the_lock_is_given_back() {
        let server = RedisServer::start();
        fenced_write(&server.url()).unwrap();
        let mut raw = server.raw();
        let total: Option<String> = raw.get("{report}:total").unwrap();
        assert_eq!(total.as_deref(), Some("42"));
        let held: bool = raw.exists("dist_lock:{report}").unwrap();
        assert!(!held, "the example released the lock");
    }
}

mod async_buyer {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/async_buyers.rs");

    #[test]
    fn the_async_buyers_example_sells_exactly_the_stock() {
        let server = RedisServer::start();
        block_on(many_buyers(&server.url())).unwrap();
        let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
        assert_eq!(stock, 0);
    }
}

mod async_batch {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/async_batch.rs");

    #[test]
    fn the_async_batch_example_sells_exactly_the_stock() {
        let server = RedisServer::start();
        block_on(batched(&server.url())).unwrap();
        let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
        assert_eq!(stock, 0);
    }
}

mod async_lock {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/async_lock.rs");

    #[test]
    fn the_async_lock_example_leaves_the_lock_free() {
        let server = RedisServer::start();
        block_on(nightly_report(&server.url())).unwrap();
        let held: bool = server.raw().exists("dist_lock:nightly_report").unwrap();
        assert!(!held, "the example released the lock");
    }
}

mod using_body {
    use super::*;
    include!("../../crates/lockctl-core/doc-examples/using.rs");

    #[test]
    fn the_using_example_runs_its_body_and_leaves_the_lock_free() {
        let server = RedisServer::start();
        block_on(under_the_lock(&server.url())).unwrap();
        let held: bool = server.raw().exists("dist_lock:nightly_report").unwrap();
        assert!(!held, "the example released the lock");
    }
}
