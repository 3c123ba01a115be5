//! Bucketed seeds of one SKU racing each other on a Redis Cluster: exactly one map wins, its
//! books are its own (its stock with its count), and no bucket outside it holds stock for
//! sale; a seed that loses says so and exits 1 rather than report stock that is not on sale.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::keys::StockKeys;
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::{Buckets, seed_buckets};
use lockctl_core::stock::{Buy, BuyOptions, Buyer, Strategy};

use crate::cluster::Cluster;
use crate::support::{Streams, code, finish_within, spawn_lockctl_with, stderr};

const SKU: &str = "{race}";

fn target(c: &Cluster) -> Target {
    Target::open_cluster(&c.url(), ConnectOptions::default()).unwrap()
}

/// Every bucket stock key of `SKU` on every node: `(key, stock)`.
fn bucket_stocks(c: &Cluster) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for n in &c.nodes {
        let mut r = n.raw();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("item:stock:*}}{SKU}"))
            .query(&mut r)
            .unwrap();
        for k in keys {
            let v: Option<i64> = redis::cmd("GET").arg(&k).query(&mut r).unwrap();
            out.push((k, v.unwrap_or(0)));
        }
    }
    out
}

/// Checks the raw state after a race: one map, only its buckets hold stock, the map's stock is
/// the count it was seeded with, one of `counts`, and status reconciles. Returns that count.
fn one_map_on_sale(c: &Cluster, counts: &[u64], round: usize) -> u64 {
    let t = target(c);
    let mut conn = t.connect().unwrap();
    let sku: Sku = SKU.parse().unwrap();
    let map = Buckets::read(&mut conn, &sku)
        .unwrap()
        .expect("a bucket map");
    let seeded: u64 = conn
        .query::<Option<u64>>(redis::cmd("GET").arg(StockKeys::new(&sku).seeded))
        .unwrap()
        .unwrap();
    let in_map: Vec<String> = map.skus.iter().map(|b| StockKeys::new(b).stock).collect();
    let stocks = bucket_stocks(c);
    let outside: Vec<&(String, i64)> = stocks.iter().filter(|(k, _)| !in_map.contains(k)).collect();
    assert!(
        outside.is_empty(),
        "round {round}: buckets outside the map hold stock: {outside:?} (map {:?})",
        map.skus
    );
    let total: i64 = stocks.iter().map(|(_, v)| v).sum();
    assert_eq!(
        total, seeded as i64,
        "round {round}: the map's stock is not its count"
    );
    assert!(counts.contains(&seeded), "round {round}: seeded {seeded}");
    let st = lockctl_core::status::status(&mut conn, &t, &sku).unwrap();
    assert_eq!(st.reconciled, Some(true), "round {round}: {st:?}");
    seeded
}

/// Buys one unit at a time (every buyer its own user, so purchases land in every bucket and
/// borrow) until sold out: the units sold.
fn sell_out(c: &Cluster) -> u64 {
    let t = target(c);
    let mut conn = t.connect().unwrap();
    let buyer = Buyer::new(
        &t,
        &SKU.parse().unwrap(),
        BuyOptions {
            strategy: Strategy::Atomic,
            ..Default::default()
        },
    );
    let mut sold = 0;
    for i in 0..1000 {
        match buyer
            .buy(
                &mut conn,
                &format!("o{}-{i}", rand::random::<u32>()),
                Some(&format!("u{i}")),
            )
            .unwrap()
            .outcome
        {
            Buy::Bought { .. } => sold += 1,
            Buy::SoldOut { .. } => return sold,
            other => panic!("{other:?}"),
        }
    }
    panic!("never sold out")
}

#[test]
fn racing_bucketed_seeds_leave_one_map_and_only_its_buckets_on_sale() {
    let c = Cluster::start();
    let counts = [6u64, 9, 12];
    let mut outrun = 0;
    for round in 0..20 {
        let start = Arc::new(Barrier::new(counts.len()));
        let seeds: Vec<_> = counts
            .iter()
            .map(|&n| {
                let (t, start) = (target(&c), start.clone());
                thread::spawn(move || {
                    let mut conn = t.connect().unwrap();
                    start.wait();
                    (n, seed_buckets(&mut conn, &SKU.parse().unwrap(), n, 3))
                })
            })
            .collect();
        let mut won = Vec::new();
        for s in seeds {
            match s.join().unwrap() {
                (n, Ok(_)) => won.push(n),
                (_, Err(e)) => {
                    outrun += 1;
                    assert!(
                        e.to_string().contains("another seed of '{race}' won"),
                        "round {round}: {e}"
                    )
                }
            }
        }
        let seeded = one_map_on_sale(&c, &counts, round);
        assert!(
            won.contains(&seeded),
            "round {round}: the map is of a seed that did not succeed ({seeded}, {won:?})"
        );
        assert_eq!(sell_out(&c), seeded, "round {round}");
    }
    eprintln!("{outrun} seeds of 60 were outrun");
}

#[test]
fn a_seed_command_that_loses_the_race_says_so_and_exits_1() {
    let c = Cluster::start();
    // A seed of many buckets started first, one of few buckets a moment later: the later one
    // takes the later generation and, with less to write, publishes first.
    let seeds = [("640", "64"), ("30", "3")];
    let counts = [640u64, 30];
    let mut lost = 0;
    for round in 0..8 {
        let mut children = Vec::new();
        for (n, k) in seeds {
            children.push(spawn_lockctl_with(
                &c.url(),
                &["--cluster", "seed", SKU, n, "--buckets", k],
                Streams::Capture,
            ));
            thread::sleep(Duration::from_millis(5 * round as u64));
        }
        let mut won = Vec::new();
        for (n, child) in counts.iter().zip(children) {
            let out = finish_within(child, Duration::from_secs(30), "a racing seed");
            match code(&out) {
                0 => won.push(*n),
                1 => {
                    lost += 1;
                    assert!(
                        stderr(&out)
                            .contains(&format!("another seed of '{SKU}' won at the same time")),
                        "{}",
                        stderr(&out)
                    );
                }
                other => panic!("exit {other}: {}", stderr(&out)),
            }
        }
        let seeded = one_map_on_sale(&c, &counts, round);
        assert!(won.contains(&seeded), "round {round}: {seeded}, {won:?}");
    }
    eprintln!("{lost} of 8 rounds had a loser");
    assert!(
        lost > 0,
        "no seed lost a race in 8 rounds: the test raced nothing"
    );
}
