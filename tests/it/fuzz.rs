//! Property tests (proptest) over the inputs that reach Redis and Lua: SKU parsing, and any
//! valid SKU and order id going through every strategy's scripts on a real server.

use crate::support::RedisServer;
use lockctl_core::keys::{StockKeys, keys_of};
use lockctl_core::sku::{MAX_SKU_BYTES, NameProblem, Sku};
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Strategy as Protect};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use redis::Commands;

/// `cases` cases, with failures kept in `fuzz.proptest-regressions` next to this file.
///
/// Proptest's default (`SourceParallel`) climbs from the source file to the first directory
/// holding a `main.rs` or `lib.rs`: here that is `tests/it/` itself, which would put the
/// regressions in `tests/proptest-regressions/fuzz.txt`. Named explicitly, they stay beside
/// the tests they replay.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::with_cases(cases)
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn any_string_parses_to_a_safe_sku_or_a_message(s in any::<String>()) {
        match s.parse::<Sku>() {
            Ok(sku) => {
                prop_assert!(!s.is_empty() && s.len() <= MAX_SKU_BYTES);
                prop_assert!(!s.chars().any(|c| c.is_whitespace() || c.is_control()));
                let k = StockKeys::new(&sku);
                prop_assert!(k.stock.ends_with(&s));
                prop_assert!(keys_of(&sku).iter().all(|key| key.contains(&s)));
            }
            Err(bad) => {
                prop_assert_eq!(&bad.name, &s);
                prop_assert!(!bad.to_string().is_empty());
                match bad.problem {
                    NameProblem::Empty => prop_assert!(s.is_empty()),
                    NameProblem::TooLong { bytes } => prop_assert!(bytes == s.len() && bytes > MAX_SKU_BYTES),
                    NameProblem::Blank(c) | NameProblem::Invisible(c) => prop_assert!(s.contains(c)),
                }
            }
        }
    }
}

/// Printable names, including quotes, brackets, percent signs and non-ASCII letters.
fn name() -> impl proptest::strategy::Strategy<Value = String> {
    "[a-zA-Z0-9'\"{}%$()._:;,!?=+*&^~`|<>/\\\\商品\\[\\]-]{1,40}"
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn any_valid_sku_and_order_id_reach_redis_only_as_keys_and_fields(
        sku in name(), order in name(), pick in 0usize..3,
    ) {
        thread_local! {
            static SERVER: RedisServer = RedisServer::start();
        }
        let sku: Sku = sku.parse().unwrap();
        let strategy = [Protect::Lock, Protect::Fenced, Protect::Atomic][pick];
        SERVER.with(|server| {
            let target = server.target();
            let mut conn = server.conn();
            stock::seed(&mut conn, &sku, 3).unwrap();
            let p = Buyer::new(&target, &sku, BuyOptions { strategy, ..BuyOptions::default() })
                .buy(&mut conn, &order, None)
                .unwrap();
            assert_eq!(p.outcome, Buy::Bought { remaining: 2 }, "{sku} {strategy}");
            let ledger: Option<i64> = server.raw().hget(format!("item:orders:{sku}"), &order).unwrap();
            assert_eq!(ledger, Some(1));
            let lock: bool = server.raw().exists(format!("dist_lock:{sku}")).unwrap();
            assert!(!lock);
        });
    }
}
