//! Redis Cluster: three masters made with `redis-cli --cluster create`, hash-tagged SKUs, and a
//! slot moved to another master while buyers are buying.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    RedisServer, Streams, code, eventually, json, lockctl, redis_cli_program, run_ok,
    spawn_lockctl_with, stderr, stdout,
};

/// Three masters; shared with the adversarial tests, which pause the one that owns a slot.
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<RedisServer>,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        Cluster::with_replicas(0, 5000)
    }

    /// Three masters with `replicas` replicas each (`redis-cli --cluster create
    /// --cluster-replicas`), ready once every node sees `cluster_state:ok` and every replica's
    /// link to its master is up. A short `node_timeout_ms` makes a failover come sooner.
    pub(crate) fn with_replicas(replicas: usize, node_timeout_ms: u64) -> Cluster {
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    &timeout,
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        run_ok(
            Command::new(redis_cli_program())
                .args(["--cluster", "create"])
                .args(&addrs)
                .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]),
        );
        let cluster = Cluster { nodes };
        let ready = eventually(Duration::from_secs(30), || {
            cluster.nodes.iter().all(|n| {
                let ask = |cmd: &str, section: &str| -> String {
                    redis::cmd(cmd)
                        .arg(section)
                        .query(&mut n.raw())
                        .unwrap_or_default()
                };
                let repl = ask("INFO", "replication");
                ask("CLUSTER", "INFO").contains("cluster_state:ok")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            })
        });
        assert!(
            ready,
            "the cluster never reached cluster_state:ok with its replicas in sync"
        );
        cluster
    }

    pub(crate) fn url(&self) -> String {
        self.nodes[0].url()
    }

    fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].raw())
            .unwrap()
    }

    /// The index of the node serving `slot`.
    pub(crate) fn owner(&self, slot: u16) -> usize {
        let id: String = (0..3)
            .find_map(|i| {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut self.nodes[i].raw())
                    .ok()?;
                nodes.lines().find_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    f[8..]
                        .iter()
                        .any(|r| slot_in(r, slot))
                        .then(|| f[0].to_string())
                })
            })
            .unwrap();
        (0..3).find(|&i| self.node_id(i) == id).unwrap()
    }

    /// Moves `slot` and its keys from node `from` to node `to`, the way `redis-cli --cluster
    /// reshard` does: IMPORTING/MIGRATING, MIGRATE in batches, then the new owner everywhere.
    pub(crate) fn move_slot(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let mut src = self.nodes[from].raw();
        let mut dst = self.nodes[to].raw();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query(&mut dst)
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query(&mut src)
            .unwrap();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(2)
                .query(&mut src)
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut src)
                .unwrap();
            // Slowly, so buyers meet the slot half-moved.
            thread::sleep(Duration::from_millis(30));
        }
        for n in &self.nodes {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query(&mut n.raw())
                .unwrap();
        }
    }
}

fn slot_in(range: &str, slot: u16) -> bool {
    match range.split_once('-') {
        Some((a, b)) => {
            a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b)
        }
        None => range.parse::<u16>() == Ok(slot),
    }
}

#[test]
fn the_hammer_passes_on_a_cluster_with_every_strategy() {
    let cluster = Cluster::start();
    for strategy in ["lock", "fenced", "atomic", "batch"] {
        let out = lockctl(
            &cluster.url(),
            &[
                "--cluster",
                "hammer",
                "--sku",
                "{sku_886}",
                "-n",
                "200",
                "-c",
                "8",
                "--stock",
                "50",
                "--strategy",
                strategy,
                "--json",
            ],
        );
        assert_eq!(code(&out), 0, "{strategy}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["bought"], 50, "{strategy}: {v}");
        assert_eq!(v["final_stock"], 0);
        assert_eq!(v["errors"], 0, "{strategy}: {v}");
    }
    let v = json(&lockctl(
        &cluster.url(),
        &["--cluster", "status", "{sku_886}", "--json"],
    ));
    assert_eq!(v["reconciled"], true, "{v}");
    let out = lockctl(&cluster.url(), &["--cluster", "check"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_sku_whose_keys_span_slots_is_refused_with_the_fix() {
    let cluster = Cluster::start();
    let out = lockctl(&cluster.url(), &["--cluster", "seed", "sku_886", "10"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("'{sku_886}'"), "{}", stderr(&out));
    // Without --cluster, a node says it is one (CROSSSLOT or MOVED), and so does check.
    for args in [&["buy", "sku_886"][..], &["check"][..]] {
        let out = lockctl(&cluster.url(), args);
        assert_ne!(code(&out), 0, "{args:?}");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(said.contains("add --cluster"), "{args:?}: {said}");
    }
    for n in &cluster.nodes {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut n.raw()).unwrap();
        assert!(keys.is_empty(), "{keys:?}");
    }
}

#[test]
fn buyers_follow_the_slot_when_it_moves_to_another_master_mid_run() {
    let cluster = Cluster::start();
    let slot = lockctl_core::keys::key_slot("{sku_886}");
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    let hammer = spawn_lockctl_with(
        &cluster.url(),
        &[
            "--cluster",
            "hammer",
            "--sku",
            "{sku_886}",
            "-n",
            "3000",
            "-c",
            "6",
            "--stock",
            "1000",
            "--strategy",
            "atomic",
            "--json",
        ],
        Streams::Capture,
    );
    // Move the slot once buying is under way.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let n: i64 = redis::cmd("HLEN")
            .arg("item:orders:{sku_886}")
            .query(&mut cluster.nodes[from].raw())
            .unwrap_or(0);
        if n > 50 {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    cluster.move_slot(slot, from, to);
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    eprintln!(
        "during the move: {} errors {}",
        v["errors"], v["errors_by_kind"]
    );
    // Every request is accounted for and nothing is oversold, whatever errors the move caused.
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(v["oversold"], 0);
    assert_eq!(cluster.owner(slot), to, "the slot did not move");
    let stock: i64 = redis::cmd("GET")
        .arg("item:stock:{sku_886}")
        .query(&mut cluster.nodes[to].raw())
        .unwrap();
    assert_eq!(stock, v["final_stock"].as_i64().unwrap());
}

/// The async API on a cluster: 300 buyers as tasks (fenced, atomic) or through the batch
/// handle, each on a stock of 100, sell exactly 100 and the books reconcile; on a SKU bucketed
/// over the three masters too, with nothing left in transit.
#[test]
fn async_buyers_sell_exactly_on_a_cluster() {
    use lockctl_core::aio::{AsyncBatch, AsyncBuyer};
    use lockctl_core::conn::{ConnectOptions, Target};
    use lockctl_core::lock::LockOptions;
    use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

    let cluster = Cluster::start();
    let target = Target::open_cluster(&cluster.url(), ConnectOptions::default()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Plain, then bucketed over the three masters with every purchase by one user, so that
    // all demand lands in one bucket and the async buyers borrow from the other two.
    for (strategy, buckets) in [
        (Strategy::Fenced, None),
        (Strategy::Batch, None),
        (Strategy::Atomic, Some(3)),
        (Strategy::Batch, Some(3)),
        (Strategy::Fenced, Some(3)),
    ] {
        let sku = format!("{{aio_{strategy}_{}}}", buckets.unwrap_or(1))
            .parse()
            .unwrap();
        let mut conn = target.connect().unwrap();
        match buckets {
            Some(k) => {
                stock::buckets::seed_buckets(&mut conn, &sku, 100, k).unwrap();
            }
            None => stock::seed(&mut conn, &sku, 100).unwrap(),
        }
        let user = buckets.map(|_| "one".to_string());
        let options = BuyOptions {
            strategy,
            lock: LockOptions {
                wait: Duration::from_secs(60),
                ..LockOptions::default()
            },
            limit: buckets.map(|_| 1000),
            ..BuyOptions::default()
        };
        let (each, batch) = match strategy {
            Strategy::Batch => (None, AsyncBatch::start(&target, &sku, options).ok()),
            _ => (Some(AsyncBuyer::new(&target, &sku, options)), None),
        };
        let bought = runtime.block_on(async {
            let tasks: Vec<_> = (0..300)
                .map(|i| {
                    let (each, batch, user) = (each.clone(), batch.clone(), user.clone());
                    tokio::spawn(async move {
                        let order = format!("o{i}");
                        let user = user.as_deref();
                        match (each, batch) {
                            (Some(b), _) => b.buy(&order, user).await,
                            (_, Some(b)) => b.buy(&order, user).await,
                            _ => unreachable!(),
                        }
                    })
                })
                .collect();
            let mut bought = 0;
            for t in tasks {
                let p = t.await.unwrap().unwrap();
                bought += u32::from(matches!(p.outcome, Buy::Bought { .. }));
            }
            bought
        });
        assert_eq!(bought, 100, "{strategy} {buckets:?}");
        let v = json(&lockctl(
            &cluster.url(),
            &["--cluster", "status", sku.as_str(), "--json"],
        ));
        assert_eq!(
            (v["stock"].as_u64(), v["reconciled"].as_bool()),
            (Some(0), Some(true)),
            "{v}"
        );
        if buckets.is_some() {
            assert_eq!(v["in_transit"], 0, "{v}");
            let moved_in: i64 = v["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["moved_in"].as_i64().unwrap())
                .sum();
            assert!(moved_in >= 60, "the other buckets lent theirs: {v}");
        }
    }
}

/// A bucket's slot moved to another master as `redis-cli --cluster reshard` moves it: status
/// says a slot migration (the old master is still a master, with the id the seed recorded),
/// not a failover or a restart, and the books reconcile.
#[test]
fn status_calls_a_planned_slot_migration_a_migration_not_a_failover() {
    let c = Cluster::start();
    let url = c.url();
    let out = lockctl(
        &url,
        &[
            "--cluster",
            "--json",
            "seed",
            "{mig}",
            "30",
            "--buckets",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let slot = json(&out)["buckets"][0]["slot"].as_u64().unwrap() as u16;
    let from = c.owner(slot);
    c.move_slot(slot, from, (from + 1) % 3);
    let out = lockctl(&url, &["--cluster", "--json", "status", "{mig}"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let st = json(&out);
    let warnings = st["warnings"].to_string();
    assert!(
        warnings.contains("a slot migration") && warnings.contains("loses no purchase"),
        "{st}"
    );
    assert!(!warnings.contains("a failover or a restart"), "{st}");
    assert_eq!(st["reconciled"], true, "{st}");
}
