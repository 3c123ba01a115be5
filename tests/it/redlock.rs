//! Redlock across five independent redis-servers, with nodes paused by SIGSTOP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{RedisServer, code, json, lockctl, stderr};

use code as code_of;
use lockctl_core::conn::Target;
use lockctl_core::lock::{Acquire, Lock, LockOptions};
use lockctl_core::redlock::{Quorum, Round};
use redis::Commands;

fn five() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start()).collect()
}

fn targets(nodes: &[RedisServer]) -> Vec<Target> {
    nodes.iter().map(RedisServer::target).collect()
}

/// How many of `nodes` hold `key` with `token`.
fn holding(nodes: &[RedisServer], key: &str, token: &str) -> usize {
    nodes
        .iter()
        .filter(|n| n.raw().get::<_, Option<String>>(key).unwrap().as_deref() == Some(token))
        .count()
}

fn node_args(nodes: &[RedisServer]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|n| ["--lock-node".to_string(), n.url()])
        .collect()
}

fn hammer(
    data: &RedisServer,
    nodes: &[RedisServer],
    extra: &[&str],
) -> (i32, serde_json::Value, Duration) {
    let mut args: Vec<String> = node_args(nodes);
    args.extend(
        ["hammer", "-n", "60", "-c", "6", "--stock", "20", "--json"]
            .iter()
            .map(|s| s.to_string()),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Instant::now();
    let out = lockctl(&data.url(), &argv);
    (code(&out), json(&out), t.elapsed())
}

#[test]
fn with_five_healthy_nodes_the_hammer_passes() {
    let data = RedisServer::start();
    let nodes = five();
    for strategy in ["lock", "fenced"] {
        let (code, v, _) = hammer(&data, &nodes, &["--strategy", strategy]);
        assert_eq!(code, 0, "{strategy}: {v}");
        assert_eq!(v["bought"], 20);
        assert_eq!(v["final_stock"], 0);
    }
    // Every node saw the lock (it is released after each purchase, so look at the stats).
    for n in &nodes {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut n.raw())
            .unwrap();
        assert!(info.contains("cmdstat_set:"), "a node was never asked");
    }
}

/// Redlock's release uses the node's native compare-and-delete where it has one (Valkey 9's
/// DELIFEQ), probed per connection, and the script where it has not (Redis 7.0): on a mixed
/// quorum, each node's own command counts say which it got, and the sale still passes.
#[test]
fn redlock_releases_by_delifeq_on_valkey_and_by_script_on_redis() {
    let data = RedisServer::start();
    let valkey = crate::support::valkey_server_program();
    let nodes: Vec<RedisServer> = vec![
        RedisServer::start_program(&valkey, &[]),
        RedisServer::start_program(&valkey, &[]),
        RedisServer::start_program(&crate::support::redis_server_program(), &[]),
    ];
    let (code, v, _) = hammer(&data, &nodes, &["--strategy", "lock"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["bought"], 20);
    for n in &nodes {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut n.raw())
            .unwrap();
        let has_delifeq = {
            let reply: Vec<redis::Value> = redis::cmd("COMMAND")
                .arg("INFO")
                .arg("DELIFEQ")
                .query(&mut n.raw())
                .unwrap();
            !matches!(reply.as_slice(), [redis::Value::Nil])
        };
        let delifeq = info.contains("cmdstat_delifeq:calls=");
        assert_eq!(delifeq, has_delifeq, "port {}: {info}", n.port);
        if !has_delifeq {
            assert!(info.contains("cmdstat_evalsha:"), "port {}: {info}", n.port);
        }
    }
}

#[test]
fn with_two_of_five_nodes_paused_the_hammer_still_sells_everything() {
    let data = RedisServer::start();
    let nodes = five();
    nodes[0].signal("STOP");
    nodes[3].signal("STOP");
    let (code, v, _) = hammer(&data, &nodes, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["bought"], 20);
    assert_eq!(v["final_stock"], 0);
    assert_eq!(v["oversold"], 0);
}

#[test]
fn with_three_of_five_nodes_paused_nothing_is_bought_and_the_run_ends() {
    let data = RedisServer::start();
    let nodes = five();
    for i in [1, 2, 4] {
        nodes[i].signal("STOP");
    }
    let (code, v, took) = hammer(&data, &nodes, &["--wait-ms", "500", "--timeout-ms", "500"]);
    // A buyer that got to ask the lock nodes learns there is no quorum (an error, not
    // "busy": nobody holds the lock, the nodes that could vote were too few); one still queued
    // behind it on the data node when its wait ran out was busy. Nothing is bought either way,
    // and a run that sold nothing while stock was there is "unknown" (exit 1), never a pass
    // on nothing.
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["verdict"], "unknown", "{v}");
    assert_eq!(v["bought"], 0);
    let no_quorum = v["errors_by_kind"]["no_quorum"].as_u64().unwrap_or(0);
    assert!(no_quorum > 0, "{v}");
    assert_eq!(
        v["busy"].as_u64().unwrap() + v["errors"].as_u64().unwrap(),
        60
    );
    assert_eq!(v["final_stock"], 20);
    // 10 rounds of 6 buyers, each giving up after its 500 ms wait; generous for slow machines.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let mut args = node_args(&nodes);
    args.extend(["buy".into(), "sku_886".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = lockctl(&data.url(), &argv);
    assert_eq!(code_of(&out), 1);
    assert!(
        stderr(&out).contains("no quorum: 2 of 5 lock nodes answered"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_grant_needs_a_healthy_majority_for_every_subset_of_failed_nodes() {
    let nodes = five();
    let targets = targets(&nodes);
    for mask in 0u32..32 {
        let down: Vec<usize> = (0..5).filter(|i| mask & (1 << i) != 0).collect();
        for &i in &down {
            nodes[i].signal("STOP");
        }
        // A fresh quorum each time: no memory of earlier failures.
        let q = Quorum::new(targets.clone());
        let key = format!("dist_lock:mask{mask}");
        let granted = q.try_acquire(&key, "tok", Duration::from_millis(2500));
        for &i in &down {
            nodes[i].signal("CONT");
        }
        let healthy = 5 - down.len();
        let won = match granted {
            Round::Won(v) => Some(v),
            Round::Lost { answered } => {
                assert_eq!(
                    answered, healthy,
                    "down {down:?}: every healthy node answers"
                );
                None
            }
        };
        assert_eq!(won.is_some(), healthy >= 3, "down {down:?}: {granted:?}");
        if let Some(validity) = won {
            assert!(validity <= Duration::from_millis(2500 - 25 - 2));
            // Held on every healthy node, with this token.
            for (i, n) in nodes.iter().enumerate().filter(|(i, _)| !down.contains(i)) {
                let v: Option<String> = n.raw().get(&key).unwrap();
                assert_eq!(v.as_deref(), Some("tok"), "node {i} of mask {mask:05b}");
            }
            q.release(&key, "tok", Duration::from_millis(2500));
        } else {
            // A failed round gives back what it took on the healthy nodes.
            for (i, n) in nodes.iter().enumerate().filter(|(i, _)| !down.contains(i)) {
                let v: Option<String> = n.raw().get(&key).unwrap();
                assert_eq!(
                    v, None,
                    "node {i} kept a minority grant for mask {mask:05b}"
                );
            }
        }
    }
}

#[test]
fn the_redlock_lock_also_excludes_single_node_clients_on_the_data_node() {
    let data = RedisServer::start();
    let nodes = five();
    let target = data.target();
    let q = Arc::new(Quorum::new(targets(&nodes)));
    let lock = Lock::new(&target, "both", LockOptions::default()).with_quorum(q.clone());
    let mut conn = data.conn();
    let Acquire::Acquired(g) = lock.acquire(&mut conn).unwrap() else {
        panic!("five healthy nodes and a free data node");
    };
    // The tutorial's PHP client looks only at the data node: it must find the lock taken.
    let php: Option<String> = redis::cmd("SET")
        .arg("dist_lock:both")
        .arg("php")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query(&mut data.raw())
        .unwrap();
    assert!(php.is_none());
    assert_eq!(holding(&nodes, "dist_lock:both", g.token()), 5);
    g.release(&mut conn).unwrap();
    for n in &nodes {
        assert!(!n.raw().exists::<_, bool>("dist_lock:both").unwrap());
    }
}

#[test]
fn the_watchdog_extends_the_lease_on_a_majority_while_the_holder_works() {
    let data = RedisServer::start();
    let nodes = five();
    nodes[4].signal("STOP"); // one node down: four can still extend
    let q = Arc::new(Quorum::new(targets(&nodes)));
    // A lease long enough that a loaded machine (2 shared cores) cannot starve the watchdog
    // of a whole third of it: the test is about the quorum, not about scheduling.
    let options = LockOptions {
        ttl: Duration::from_millis(1200),
        watchdog: true,
        ..LockOptions::default()
    };
    let lock = Lock::new(&data.target(), "dog", options).with_quorum(q);
    let mut conn = data.conn();
    let Acquire::Acquired(g) = lock.acquire(&mut conn).unwrap() else {
        panic!("four healthy nodes and a free data node");
    };
    std::thread::sleep(Duration::from_millis(3600)); // three leases
    // A majority of the five still holds it, three leases on. (Not all four healthy nodes
    // necessarily: one whose extension timed out under load has let its copy lapse, as
    // Redlock allows; the full run once saw 3 of 4.)
    let held = holding(&nodes[..4], "dist_lock:dog", g.token());
    assert!(
        held >= 3,
        "the extension reached {held} of the 4 healthy nodes, not a majority of 5"
    );
    assert!(!g.lease_lost());
    assert!(g.renewals() >= 3);
    g.release(&mut conn).unwrap();
    nodes[4].signal("CONT");
}

#[test]
fn check_reports_each_lock_node_and_the_quorum() {
    let data = RedisServer::start();
    let nodes = five();
    let mut args = node_args(&nodes);
    args.extend([
        "check".to_string(),
        "--json".to_string(),
        "--timeout-ms".into(),
        "300".into(),
    ]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&lockctl(&data.url(), &argv));
    assert_eq!(v["quorum"], true);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 5);
    for i in [0, 1, 2] {
        nodes[i].signal("STOP");
    }
    let out = lockctl(&data.url(), &argv);
    assert_eq!(code(&out), 3);
    let v = json(&out);
    assert_eq!(v["quorum"], false);
    let down = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["ok"] == false)
        .count();
    assert_eq!(down, 3);
}

#[test]
fn an_even_number_of_lock_nodes_is_a_usage_error() {
    let data = RedisServer::start();
    let out = lockctl(
        &data.url(),
        &[
            "--lock-node",
            &data.url(),
            "--lock-node",
            &data.url(),
            "check",
        ],
    );
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("odd number"));
}

#[test]
fn check_names_the_flag_that_set_a_lock_node_s_timeout() {
    let data = RedisServer::start();
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    nodes[2].signal("STOP");
    let mut args = node_args(&nodes);
    args.extend(
        [
            "--timeout-ms",
            "300",
            "--connect-timeout-ms",
            "300",
            "check",
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = lockctl(&data.url(), &argv);
    nodes[2].signal("CONT");
    let text = crate::support::stdout(&out);
    assert!(text.contains("DOWN"), "{text}");
    assert!(
        text.contains("300 ms")
            && (text.contains("--timeout-ms") || text.contains("--connect-timeout-ms")),
        "the timeout must be the one the flags set: {text}"
    );
    assert!(!text.contains("after 50 ms"), "{text}");
}
