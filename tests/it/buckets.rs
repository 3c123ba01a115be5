//! Bucketed stock (`seed SKU N --buckets K`) on a Redis Cluster of three masters, each with a
//! replica: sold to zero by every strategy with nothing stranded, per-user limits held, and a
//! master failed over mid-sale, with and without `--require-replicas`.

use std::thread;
use std::time::{Duration, Instant};

use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::keys::{StockKeys, key_slot};
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::Buckets;
use redis::Commands;

use crate::cluster::Cluster;
use crate::support::{
    RedisServer, Streams, code, eventually, json, lockctl, spawn_lockctl_with, stderr, stdout,
};

/// Three masters and three replicas, made with `redis-cli --cluster create --cluster-replicas
/// 1`, with a short node timeout so a failover comes within seconds.
struct Replicated {
    nodes: Vec<RedisServer>,
}

impl Replicated {
    fn start() -> Replicated {
        Replicated {
            nodes: Cluster::with_replicas(1, 1500).nodes,
        }
    }

    fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The node serving `slot` as master, and its replica.
    fn master_and_replica(&self, slot: u16) -> (usize, usize) {
        let master = (0..self.nodes.len())
            .find(|&i| {
                let repl = replication(&self.nodes[i]);
                repl.contains("role:master") && self.serves(i, slot)
            })
            .expect("a master serves the slot");
        let port = self.nodes[master].port;
        let replica = (0..self.nodes.len())
            .find(|&i| {
                let repl = replication(&self.nodes[i]);
                repl.contains(&format!("master_port:{port}\r"))
            })
            .expect("the master has a replica");
        (master, replica)
    }

    fn serves(&self, i: usize, slot: u16) -> bool {
        let nodes: String = try_raw(&self.nodes[i])
            .and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query(&mut c).ok())
            .unwrap_or_default();
        nodes.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 8
                && f[2].contains("myself")
                && f[8..].iter().any(|r| match r.split_once('-') {
                    Some((a, b)) => {
                        a.parse::<u16>().is_ok_and(|a| a <= slot)
                            && b.parse::<u16>().is_ok_and(|b| slot <= b)
                    }
                    None => r.parse::<u16>() == Ok(slot),
                })
        })
    }

    fn target(&self) -> Target {
        Target::open_cluster(&self.url(), ConnectOptions::default()).unwrap()
    }

    fn ok(&self) -> bool {
        self.nodes.iter().any(|n| {
            try_raw(n)
                .and_then(|mut c| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(&mut c)
                        .ok()
                })
                .is_some_and(|i| i.contains("cluster_state:ok"))
        })
    }
}

/// Each user's units over every bucket of `sku`.
/// `INFO replication` of node `n`, empty while it does not answer.
fn replication(n: &RedisServer) -> String {
    try_raw(n)
        .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c).ok())
        .unwrap_or_default()
}

/// A connection to node `n`, or `None` while it does not answer (killed, or not yet up).
fn try_raw(n: &RedisServer) -> Option<redis::Connection> {
    redis::Client::open(n.url()).ok()?.get_connection().ok()
}

fn per_user(c: &Replicated, sku: &str) -> std::collections::HashMap<String, i64> {
    let sku: Sku = sku.parse().unwrap();
    let mut conn = c.target().connect().unwrap();
    let b = Buckets::read(&mut conn, &sku).unwrap().unwrap();
    let mut out = std::collections::HashMap::new();
    for s in &b.skus {
        let hash: Vec<(String, i64)> = conn
            .query(redis::cmd("HGETALL").arg(StockKeys::new(s).buyers))
            .unwrap();
        for (u, n) in hash {
            *out.entry(u).or_insert(0) += n;
        }
    }
    out
}

#[test]
fn a_bucketed_sku_sells_to_zero_on_a_cluster_with_every_strategy() {
    let c = Replicated::start();
    let url = c.url();
    let out = lockctl(
        &url,
        &[
            "--cluster",
            "--json",
            "seed",
            "{hot}",
            "90",
            "--buckets",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    let placed = v["buckets"].as_array().unwrap();
    let mut masters: Vec<&str> = placed
        .iter()
        .map(|p| p["master"].as_str().unwrap())
        .collect();
    masters.sort();
    masters.dedup();
    assert_eq!(masters.len(), 3, "three buckets on three masters: {v}");
    let units: u64 = placed.iter().map(|p| p["units"].as_u64().unwrap()).sum();
    assert_eq!(units, 90, "{v}");
    for p in placed {
        // The bucket's slot is where its keys are, and its master serves it.
        let sku = p["sku"].as_str().unwrap();
        assert_eq!(
            key_slot(&format!("item:stock:{sku}")),
            p["slot"].as_u64().unwrap() as u16
        );
    }
    // Even demand (40 users, at most 3 each), then every purchase by one user: all demand
    // lands in one bucket and the other two must lend theirs.
    for (users, limit) in [("40", "3"), ("1", "1000")] {
        let out = lockctl(
            &url,
            &[
                "--cluster",
                "--json",
                "hammer",
                "--sku",
                "{hot}",
                "-n",
                "300",
                "-c",
                "12",
                "--stock",
                "90",
                "--buckets",
                "3",
                "--users",
                users,
                "--limit",
                limit,
                "--wait-ms",
                "5000",
                "--strategy",
                "atomic,batch,lock,fenced",
            ],
        );
        assert_eq!(
            code(&out),
            0,
            "users {users}: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        let v = json(&out);
        for run in v["runs"].as_array().unwrap() {
            let seen = format!("users {users}, {}: {run}", run["strategy"]);
            assert_eq!(run["verdict"], "pass", "{seen}");
            assert_eq!(run["final_stock"], 0, "stranded stock: {seen}");
            assert_eq!(run["sold_qty"], 90, "{seen}");
            assert_eq!(run["errors"], 0, "{seen}");
        }
        // The last run's users, over all buckets, each within the limit.
        let limit: i64 = limit.parse().unwrap();
        for (user, n) in per_user(&c, "{hot}") {
            assert!(n <= limit, "user {user} bought {n}, limit {limit}");
        }
        let st = lockctl(&url, &["--cluster", "--json", "status", "{hot}"]);
        let st = json(&st);
        assert_eq!(st["reconciled"], true, "{st}");
        assert!(
            st.get("warnings").is_none(),
            "no failover, no warning: {st}"
        );
        assert_eq!(st["stock"], 0, "{st}");
        assert_eq!(st["in_transit"], 0, "{st}");
        if users == "1" {
            let moved: i64 = st["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["moved_in"].as_i64().unwrap())
                .sum();
            assert!(
                moved >= 60,
                "one user's demand must have borrowed the others' 60: {st}"
            );
        }
    }
}

/// The nemesis of the failover tests: while a hammer buys, stops the replica of bucket 0's
/// master, lets purchases land on the master alone, kills the master (kill -9), wakes the
/// replica and makes it take over. Returns the hammer's output.
fn fail_over_mid_sale(
    c: &mut Replicated,
    sku: &str,
    strategy: &str,
    extra: &[&str],
) -> std::process::Output {
    let url = c.url();
    let out = lockctl(&url, &["--cluster", "seed", sku, "6000", "--buckets", "3"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let parsed: Sku = sku.parse().unwrap();
    let mut conn = c.target().connect().unwrap();
    let b = Buckets::read(&mut conn, &parsed).unwrap().unwrap();
    let (master, replica) = c.master_and_replica(key_slot(b.skus[0].as_str()));
    let mut args = vec![
        "--cluster",
        "--timeout-ms",
        "1000",
        "--json",
        "hammer",
        "--sku",
        sku,
        "-n",
        "3000",
        "-c",
        "4",
        "--users",
        "60",
        "--limit",
        "1000",
        "--strategy",
        strategy,
        "--work-ms",
        "2",
    ];
    args.extend_from_slice(extra);
    // The hammer is given the very node the nemesis kills: its new connections must find
    // the cluster through the nodes it learned.
    let hammer = spawn_lockctl_with(&c.nodes[master].url(), &args, Streams::Capture);
    thread::sleep(Duration::from_millis(800));
    // Stopped, and cut off: what the master sends from now on never reaches it (a stopped
    // replica alone would read it all from its socket once woken).
    c.nodes[replica].signal("STOP");
    let _: Result<i64, _> = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut c.nodes[master].raw());
    thread::sleep(Duration::from_millis(600));
    c.nodes[master].signal("KILL");
    c.nodes[replica].signal("CONT");
    let _: Result<(), _> = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut c.nodes[replica].raw());
    assert!(
        eventually(Duration::from_secs(30), || c.ok()),
        "the cluster never recovered from the failover"
    );
    // The old master comes back, and rejoins as the new master's replica (its nodes.conf
    // says which cluster it is in): the purchases that wait for a replica are answered again.
    c.nodes[master].restart();
    let started = Instant::now();
    let out = hammer.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(180),
        "the hammer hung"
    );
    out
}

#[test]
fn a_failover_that_loses_acknowledged_purchases_fails_the_hammer_and_names_the_failover() {
    let mut c = Replicated::start();
    let out = fail_over_mid_sale(&mut c, "{lost}", "atomic", &[]);
    let v = json(&out);
    let seen = format!("{v}\n{}", stderr(&out));
    assert_eq!(code(&out), 3, "{seen}");
    assert_eq!(v["verdict"], "fail", "{seen}");
    let text = v.to_string();
    assert!(
        text.contains("told it bought but is not in the ledger"),
        "{seen}"
    );
    assert!(
        text.contains("bucket 0's master changed during the run"),
        "{seen}"
    );
    // status cannot count the lost purchases, but names the failover, bucket by bucket.
    let st = json(&lockctl(
        &c.url(),
        &["--cluster", "--json", "status", "{lost}"],
    ));
    let warnings = st["warnings"].to_string();
    assert!(
        warnings.contains("bucket 0 (") && warnings.contains("master changed since the seed"),
        "{st}"
    );
    assert!(
        !warnings.contains("bucket 1 ("),
        "only bucket 0 failed over: {st}"
    );
}

#[test]
fn with_require_replicas_a_failover_loses_no_acknowledged_purchase() {
    kept_through_a_failover("{kept}", "atomic");
}

#[test]
fn with_require_replicas_a_failover_under_batch_loses_no_acknowledged_purchase() {
    kept_through_a_failover("{kept_batch}", "batch");
}

#[test]
fn with_require_replicas_a_failover_under_fenced_loses_no_acknowledged_purchase() {
    kept_through_a_failover("{kept_fenced}", "fenced");
}

#[test]
fn with_require_replicas_a_failover_under_lock_loses_no_acknowledged_purchase() {
    kept_through_a_failover("{kept_lock}", "lock");
}

/// A failover mid-sale with `--require-replicas 1`: PASS, the purchases the stopped replica
/// could not confirm are errors, and what the sale has left is then sold to zero.
fn kept_through_a_failover(sku: &str, strategy: &str) {
    let mut c = Replicated::start();
    let out = fail_over_mid_sale(&mut c, sku, strategy, &["--require-replicas", "1"]);
    let v = json(&out);
    let seen = format!("{strategy}: {v}\n{}", stderr(&out));
    assert_eq!(code(&out), 0, "{seen}");
    assert_eq!(v["verdict"], "pass", "{seen}");
    assert_eq!(v["oversold"], 0, "{seen}");
    // The purchases the stopped replica could not confirm were errors, not "bought".
    assert!(v["errors"].as_u64().unwrap() > 0, "{seen}");
    assert!(
        v.to_string()
            .contains("bucket 0's master changed during the run"),
        "{seen}"
    );
    // Nothing stranded: the rest of the stock sells to zero (more buyers than units).
    let st = json(&lockctl(&c.url(), &["--cluster", "--json", "status", sku]));
    assert_eq!(st["reconciled"], true, "{strategy}: {st}");
    let left = st["stock"].as_u64().unwrap();
    let out = lockctl(
        &c.url(),
        &[
            "--cluster",
            "--json",
            "hammer",
            "--sku",
            sku,
            "-n",
            &(left + 200).to_string(),
            "-c",
            "10",
            "--strategy",
            strategy,
            "--wait-ms",
            "5000",
        ],
    );
    let v = json(&out);
    assert_eq!(code(&out), 0, "{strategy}: {v}\n{}", stderr(&out));
    assert_eq!(
        v["final_stock"], 0,
        "{strategy}: stranded after the failover: {v}"
    );
}

#[test]
fn a_master_paused_mid_sale_oversells_nothing_and_strands_nothing() {
    let c = Replicated::start();
    // batch sells a few hundred units in a blink: it gets a sale long enough to be paused in.
    for (strategy, stock, n) in [
        ("atomic", 200, 400),
        ("lock", 200, 400),
        ("fenced", 200, 400),
        ("batch", 20_000, 40_000),
    ] {
        paused_mid_sale(&c, &format!("{{paused_{strategy}}}"), strategy, stock, n);
    }
}

/// Sells `sku` (`stock` units, `n` purchases by one user, so every bucket lends) with
/// `strategy` while bucket 1's master is stopped for 0.7 s, well under the node timeout (no
/// failover: the master comes back with all it had).
fn paused_mid_sale(c: &Replicated, sku: &str, strategy: &str, stock: u64, n: u64) {
    let url = c.url();
    let out = lockctl(
        &url,
        &[
            "--cluster",
            "seed",
            sku,
            &stock.to_string(),
            "--buckets",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let parsed: Sku = sku.parse().unwrap();
    let mut conn = c.target().connect().unwrap();
    let b = Buckets::read(&mut conn, &parsed).unwrap().unwrap();
    let (master, _) = c.master_and_replica(key_slot(b.skus[1].as_str()));
    let hammer = spawn_lockctl_with(
        &url,
        &[
            "--cluster",
            "--timeout-ms",
            "300",
            "--json",
            "hammer",
            "--sku",
            sku,
            "-n",
            &n.to_string(),
            "-c",
            "6",
            "--users",
            "1",
            "--limit",
            "1000000",
            "--strategy",
            strategy,
            "--wait-ms",
            "2000",
            "--work-ms",
            "3",
        ],
        Streams::Capture,
    );
    thread::sleep(Duration::from_millis(300));
    c.nodes[master].signal("STOP");
    thread::sleep(Duration::from_millis(700));
    c.nodes[master].signal("CONT");
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    let seen = format!("{strategy}: {v}\n{}", stderr(&out));
    assert_eq!(v["oversold"], 0, "{seen}");
    assert_ne!(v["verdict"], "fail", "{seen}");
    // Whatever a timed-out move left unfinished, the hammer finished before its read-back, and
    // one more purchase after the sale finds every unit sold.
    let st = json(&lockctl(&url, &["--cluster", "--json", "status", sku]));
    assert_eq!(st["reconciled"], true, "{strategy}: {st}");
    assert_eq!(st["in_transit"], 0, "{strategy}: {st}");
    let left = st["stock"].as_i64().unwrap();
    let sold = st["sold"].as_i64().unwrap();
    assert_eq!(left + sold, stock as i64, "{strategy}: {st}");
    // Demand exceeded supply: once the errors' purchases are counted, what is left is sold
    // to whoever asks next, from any bucket.
    for i in 0..left {
        let out = lockctl(
            &url,
            &[
                "--cluster",
                "--json",
                "buy",
                sku,
                "--strategy",
                strategy,
                "--wait-ms",
                "2000",
                "--order-id",
                &format!("after-{i}"),
            ],
        );
        assert_eq!(
            code(&out),
            0,
            "{strategy}: unit {i} of {left} left: {}",
            stderr(&out)
        );
    }
    let out = lockctl(
        &url,
        &["--cluster", "--json", "buy", sku, "--strategy", strategy],
    );
    assert_eq!(code(&out), 3, "{strategy}: {}", stdout(&out));
}

/// The orders pipeline across buckets (one server is enough: the pipeline is per bucket, and
/// a bucket is a SKU of its own). A worker started before the SKU was bucketed finds the
/// buckets' streams by itself; `status --db` adds every bucket's orders up; the hammer's
/// `--queue --db` verdict holds every order told bought to a row, whichever bucket sold it.
#[test]
fn a_bucketed_sales_orders_all_reach_postgresql() {
    use crate::pipeline::{init, rows, through_postgresql};
    use crate::support::TestDb;
    let server = RedisServer::start();
    let url = server.url();
    let db = TestDb::create();
    init(&url, &db);
    // The worker first, on a SKU not yet seeded.
    let worker = spawn_lockctl_with(
        &url,
        &["worker", "--db", &db.url, "--sku", "hotq"],
        Streams::Discard,
    );
    let worker = crate::support::Killed(worker);
    // Ready once it has made its consumer group on the SKU's own stream: only then is the SKU
    // bucketed, so the worker must find the buckets later, by itself.
    assert!(
        eventually(Duration::from_secs(30), || {
            server
                .raw()
                .exists::<_, bool>("item:order_events:hotq")
                .unwrap_or(false)
        }),
        "the worker never made its group"
    );
    let out = lockctl(&url, &["seed", "hotq", "60", "--buckets", "3"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // One user buys everything: all demand lands in one bucket and the others lend theirs.
    let out = lockctl(
        &url,
        &[
            "--json",
            "hammer",
            "--sku",
            "hotq",
            "-n",
            "90",
            "-c",
            "6",
            "--strategy",
            "atomic",
            "--queue",
            "--users",
            "1",
            "--limit",
            "1000",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["bought"], 60, "{}", stdout(&out));
    let b = {
        let mut conn = Target::open(&url, ConnectOptions::default())
            .unwrap()
            .connect()
            .unwrap();
        Buckets::read(&mut conn, &"hotq".parse().unwrap())
            .unwrap()
            .unwrap()
    };
    let persisted = || b.skus.iter().map(|s| rows(&db, s.as_str()).2).sum::<i64>();
    assert!(
        eventually(Duration::from_secs(30), || persisted() == 60),
        "the worker persisted {} of 60 units (it must find the buckets seeded after it started)",
        persisted()
    );
    drop(worker);
    let out = lockctl(&url, &["--json", "status", "hotq", "--db", &db.url]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let st = json(&out);
    assert_eq!(st["orders"]["persisted_units"], 60, "{st}");
    assert_eq!(st["orders"]["persisted_orders"], 60, "{st}");
    assert_eq!(st["orders"]["lost"], 0, "{st}");
    assert_eq!(st["orders"]["queued_units"], 0, "{st}");
    let text = stdout(&lockctl(&url, &["status", "hotq", "--db", &db.url]));
    assert!(text.contains("orders: 60 persisted (60 units)"), "{text}");

    // The hammer's own workers and verdict, for every strategy that buys buckets.
    for strategy in ["atomic", "batch", "lock", "fenced"] {
        let sku = format!("hq_{strategy}");
        through_postgresql(
            &url,
            &db,
            &sku,
            strategy,
            "120",
            "8",
            "75",
            &["--buckets", "3"],
        );
        let st = json(&lockctl(&url, &["--json", "status", &sku, "--db", &db.url]));
        assert_eq!(st["orders"]["persisted_units"], 75, "{strategy}: {st}");
        assert_eq!(st["reconciled"], true, "{strategy}: {st}");
    }
}

/// A target given one node of a cluster still connects once that node is dead: each
/// connection learns the cluster's nodes, and the next starts from them.
#[test]
fn a_cluster_target_connects_after_the_node_it_was_given_dies() {
    let c = Replicated::start();
    let sku: Sku = "{given}".parse().unwrap();
    let slot = key_slot(StockKeys::new(&sku).stock.as_str());
    let (master, replica) = c.master_and_replica(slot);
    let target = Target::open_cluster(&c.nodes[master].url(), ConnectOptions::default()).unwrap();
    lockctl_core::stock::seed(&mut target.connect().unwrap(), &sku, 10).unwrap();
    // The replica has the seed before its master dies (else the new master has no stock, and
    // the purchase below finds the SKU unseeded however long it tries).
    let stock_key = StockKeys::new(&sku).stock;
    assert!(
        eventually(Duration::from_secs(20), || {
            let mut r = c.nodes[replica].raw();
            let _: Result<(), _> = redis::cmd("READONLY").query(&mut r);
            r.get::<_, Option<i64>>(&stock_key).ok().flatten() == Some(10)
        }),
        "the replica never had the seed"
    );
    // The master lockctl was given dies, and its replica takes its slots over.
    c.nodes[master].signal("KILL");
    let _: Result<(), _> = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut c.nodes[replica].raw());
    assert!(
        eventually(Duration::from_secs(30), || c.serves(replica, slot)
            && c.ok()),
        "the replica never took the slot over"
    );
    let mut conn = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            conn = target.connect().ok();
            conn.is_some()
        }),
        "no connection once the given node died: {:?}",
        target.connect().err()
    );
    let buyer = lockctl_core::stock::Buyer::new(
        &target,
        &sku,
        lockctl_core::stock::BuyOptions {
            strategy: lockctl_core::stock::Strategy::Atomic,
            ..Default::default()
        },
    );
    let mut bought = false;
    assert!(
        eventually(Duration::from_secs(20), || {
            let c = conn.as_mut().unwrap();
            bought = matches!(
                buyer
                    .buy(c, "after-the-given-node", None)
                    .map(|p| p.outcome),
                Ok(lockctl_core::stock::Buy::Bought { .. })
            );
            bought
        }),
        "no purchase on the new master"
    );
}
