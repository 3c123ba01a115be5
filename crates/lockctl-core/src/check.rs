//! `check`: is this Redis reachable, and is it fit to hold locks?
//!
//! The tutorial's step 1 only asks whether a connection opens. A lock also needs a server recent
//! enough (6.0, the tutorial's prerequisite), working scripts (release and renewal are scripts), and
//! settings that do not drop lock keys behind the holder's back: an eviction policy that can
//! evict keys with a TTL, no persistence, or asynchronous replicas that a failover promotes
//! without the lock. Problems make the server unfit; risks are warnings.

use std::time::Instant;

use serde::Serialize;

use crate::conn::Conn;
use crate::error::Result;
use crate::hint::{Finding, Hint};
use crate::redlock::Quorum;
use crate::units::round3;

/// The oldest server accepted.
pub const MIN_VERSION: (u32, u32) = (6, 0);

/// How many PINGs the round-trip time is measured over.
const RTT_SAMPLES: usize = 30;

/// What `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// True when nothing in `problems`.
    pub ok: bool,
    /// `host:port` of the server.
    pub addr: String,
    /// The server's product, by what INFO says: `Valkey` (it reports `valkey_version` or
    /// `server_name:valkey`), another product's `server_name`, else `Redis`.
    pub server: String,
    /// The product's own version: `valkey_version` for Valkey (which also reports
    /// `redis_version:7.2.4` for compatibility), else `redis_version`.
    pub version: String,
    /// The server's version, as INFO reports it (`redis_version`).
    pub redis_version: String,
    /// `master` or `slave`, as INFO says.
    pub role: String,
    /// Median round-trip time of a PING, in milliseconds.
    pub rtt_ms: f64,
    /// Slowest PING seen, in milliseconds.
    pub rtt_max_ms: f64,
    /// What makes the server unfit for locking.
    pub problems: Vec<Finding>,
    /// Settings that can silently break a lock.
    pub warnings: Vec<Finding>,
    /// The native lock primitives the server has, which lockctl uses where they replace a
    /// script (`DELIFEQ`: Valkey 9's compare-and-delete, for Redlock's release).
    pub native: Vec<String>,
    /// Redlock's nodes (`--lock-node`), each reachable or not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeCheck>,
    /// Whether a majority of the Redlock nodes answered; absent without `--lock-node`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum: Option<bool>,
}

/// One Redlock node as `check` found it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeCheck {
    /// The node's `host:port`.
    pub addr: String,
    /// Whether it answered a PING.
    pub ok: bool,
    /// Its PING round trip in milliseconds, when it answered.
    pub rtt_ms: Option<f64>,
    /// Why it did not answer, with its fix as data.
    pub error: Option<Finding>,
}

/// Adds each Redlock node's answer to `report`, and a problem when no majority answers.
pub fn check_quorum(report: &mut CheckReport, q: &Quorum) {
    let answers = q.ping_all();
    let up = answers.iter().filter(|(_, r)| r.is_ok()).count();
    report.nodes = answers
        .into_iter()
        .map(|(addr, r)| match r {
            Ok(rtt) => NodeCheck {
                addr,
                ok: true,
                rtt_ms: Some(round3(rtt.as_secs_f64() * 1000.0)),
                error: None,
            },
            Err(e) => NodeCheck {
                addr,
                ok: false,
                rtt_ms: None,
                error: Some(Finding::from(&e)),
            },
        })
        .collect();
    let quorum = up >= q.majority();
    report.quorum = Some(quorum);
    if !quorum {
        report.problems.push(
            Finding::from(format!(
                "only {up} of {} lock nodes answered; Redlock needs {}",
                report.nodes.len(),
                q.majority()
            ))
            .with_hint(Hint::LockNodes),
        );
        report.ok = false;
    }
}

/// Runs every check on `conn` (a cluster node when `cluster`, as `--cluster` says). Fails only
/// when the server cannot be talked to at all.
pub fn check(conn: &mut Conn, cluster: bool) -> Result<CheckReport> {
    let rtts = round_trips(conn)?;
    let info = conn.info("")?;
    let field = |name: &str| info.get::<String>(name);
    let version = field("redis_version").unwrap_or_else(|| "unknown".into());
    let (server, own_version) = product(&field);
    let role = field("role").unwrap_or_else(|| "unknown".into());
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    match parse_version(&version) {
        Some(v) if v >= MIN_VERSION => {}
        _ => problems.push(Finding::from(format!(
            "{server} {own_version} (redis_version {version}) is older than {}.{}, the oldest \
             this lock is built for",
            MIN_VERSION.0, MIN_VERSION.1
        ))),
    }
    match conn.query::<i64>(redis::cmd("EVAL").arg("return 7").arg(0)) {
        Ok(7) => {}
        Ok(n) => problems.push(Finding::from(format!(
            "EVAL 'return 7' answered {n}: scripting is broken"
        ))),
        Err(e) => problems.push(Finding::from(format!(
            "scripts do not run (EVAL failed: {e}); release and renewal need them"
        ))),
    }
    topology(&field, &role, cluster, &mut problems, &mut warnings);
    warnings.extend(durability_warnings(conn));
    warnings.extend(product_warnings(conn, &server, &own_version));
    let native = NATIVE
        .iter()
        .filter(|name| conn.has_command(name))
        .map(|name| name.to_string())
        .collect();

    Ok(CheckReport {
        ok: problems.is_empty(),
        addr: conn.addr().to_string(),
        server,
        version: own_version,
        redis_version: version,
        role,
        rtt_ms: round3(rtts[rtts.len() / 2]),
        rtt_max_ms: round3(rtts[rtts.len() - 1]),
        problems,
        warnings,
        native,
        nodes: Vec::new(),
        quorum: None,
    })
}

/// `RTT_SAMPLES` PINGs' round trips in ms, shortest first.
fn round_trips(conn: &mut Conn) -> Result<Vec<f64>> {
    let mut rtts = Vec::with_capacity(RTT_SAMPLES);
    for _ in 0..RTT_SAMPLES {
        let t = Instant::now();
        conn.query::<String>(&redis::cmd("PING"))?;
        rtts.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rtts.sort_by(f64::total_cmp);
    Ok(rtts)
}

/// What the server's place in its deployment means for a lock (INFO's `field`s): a cluster
/// node reached as a single server and a replica are problems, asynchronous replicas a
/// warning.
fn topology(
    field: &impl Fn(&str) -> Option<String>,
    role: &str,
    cluster: bool,
    problems: &mut Vec<Finding>,
    warnings: &mut Vec<Finding>,
) {
    if field("cluster_enabled").as_deref() == Some("1") && !cluster {
        problems.push(
            Finding::from("this server is a node of a Redis Cluster, reached as a single server")
                .with_hint(Hint::ClusterNode),
        );
    }
    if role == "slave" {
        problems.push(
            Finding::from("this server is a replica: writes fail here").with_hint(Hint::Replica),
        );
    } else {
        let replicas: u64 = field("connected_slaves")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if replicas > 0 {
            warnings.push(
                Finding::from(format!(
                    "this master has {replicas} replica(s), copied asynchronously: a failover \
                     can promote one that never saw a held lock"
                ))
                .with_hint(Hint::AsyncReplicas),
            );
        }
    }
}

/// Settings under which Redis itself may drop lock keys or stock: an eviction policy that
/// evicts keys with a TTL, and no persistence at all.
fn durability_warnings(conn: &mut Conn) -> Vec<Finding> {
    let mut warnings = Vec::new();
    match config(conn, "maxmemory-policy") {
        Some(p) if p == "noeviction" => {}
        Some(p) if p.starts_with("allkeys-") || p.starts_with("volatile-") => {
            warnings.push(Finding::from(format!(
                "maxmemory-policy is '{p}': under memory pressure Redis may evict lock keys (they \
             carry a TTL) and stock; set it to 'noeviction'"
            )))
        }
        Some(_) => {}
        None => warnings.push(Finding::from(
            "could not read maxmemory-policy (CONFIG is not allowed): eviction not checked",
        )),
    }
    let save = config(conn, "save");
    let aof = config(conn, "appendonly");
    if save.as_deref() == Some("") && aof.as_deref() == Some("no") {
        warnings.push(Finding::from(
            "no persistence (save \"\" and appendonly no): stock and locks vanish on restart",
        ));
    }

    warnings
}

/// The native commands `check` asks for: Valkey 9's `DELIFEQ key value` (compare-and-delete)
/// and Redis 8.4's `DELEX key IFEQ value`. lockctl uses `DELIFEQ` for Redlock's release; no
/// Redis 8.4 is installable on the machines lockctl is tested on, so `DELEX` is only reported.
pub const NATIVE: [&str; 2] = ["DELIFEQ", "DELEX"];

/// The products lockctl's tests run on (see the compatibility table of docs/cluster.md).
pub const TESTED: [&str; 2] = ["Redis", "Valkey"];

/// What is known to break locks on `server` (a product name as [`product`] gives it) at
/// `version`, and that lockctl is not tested on it.
fn product_warnings(conn: &mut Conn, server: &str, version: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    match server {
        "Dragonfly" => out.push(Finding::from(
            "Dragonfly refuses scripts that touch keys they did not declare (unless its Lua flag \
             allow-undeclared-keys is set); lockctl declares every key, but other clients' lock \
             scripts (Redisson's among them) may not",
        )),
        "Garnet" => out.push(Finding::from(
            "Garnet's scripting is its own implementation, and a lock release under contention has \
             been reported to fail on it: hammer a test sale on it before trusting it",
        )),
        "Keydb"
            if config(conn, "active-replica").as_deref() == Some("yes")
                || config(conn, "multi-master").as_deref() == Some("yes") =>
        {
            out.push(Finding::from(
                "KeyDB active replication (active-replica or multi-master yes) accepts writes \
                 on more than one node: two clients can each take the same lock; lock on one \
                 master",
            ));
        }
        _ => {}
    }
    if !TESTED.contains(&server) {
        out.push(Finding::from(format!(
            "{server} {version} is not among the servers lockctl is tested on ({}): the scripts \
             assume Redis's semantics",
            TESTED.join(", ")
        )));
    }
    out
}

/// For `--cluster`: `report` was made on the seed node; adds whether the cluster is healthy.
pub fn check_cluster(report: &mut CheckReport, seed: &mut Conn) {
    // CLUSTER INFO is written as INFO is: read by the same parser.
    match seed.query::<redis::InfoDict>(redis::cmd("CLUSTER").arg("INFO")) {
        Ok(info) => match info.get::<String>("cluster_state") {
            Some(state) if state == "ok" => {}
            state => report.problems.push(Finding::from(format!(
                "the cluster is not serving all slots (cluster_state:{})",
                state.as_deref().unwrap_or("unknown")
            ))),
        },
        Err(e) => report.problems.push(Finding::from(format!(
            "a cluster was asked for, but '{}' is not a cluster node ({e})",
            report.addr
        ))),
    }
    report.ok = report.problems.is_empty();
}

fn config(conn: &mut Conn, name: &str) -> Option<String> {
    let pairs: Vec<String> = conn.query(redis::cmd("CONFIG").arg("GET").arg(name)).ok()?;
    pairs.get(1).cloned()
}

/// The product and its own version, from INFO's fields (`field(name)`): Valkey says so with
/// `valkey_version` (and `server_name:valkey`) beside a `redis_version` of 7.2.4 that it keeps
/// for compatibility; a server naming itself otherwise is named as it says; else Redis.
pub fn product(field: &dyn Fn(&str) -> Option<String>) -> (String, String) {
    let redis_version = || field("redis_version").unwrap_or_else(|| "unknown".into());
    // Products that report a redis_version for compatibility and their own beside it.
    for (name, own) in [
        ("Valkey", "valkey_version"),
        ("Dragonfly", "dragonfly_version"),
        ("Garnet", "garnet_version"),
    ] {
        if let Some(v) = field(own) {
            return (name.into(), v);
        }
    }
    match field("server_name").filter(|n| !n.is_empty() && n != "redis") {
        Some(name) => {
            let version = field(&format!("{name}_version")).unwrap_or_else(redis_version);
            let mut named = name.clone();
            if let Some(first) = named.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            (named, version)
        }
        None => ("Redis".into(), redis_version()),
    }
}

/// A feature that needs a newer server than lockctl's oldest ([`MIN_VERSION`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// What needs it, as a message names it.
    pub feature: &'static str,
    /// The commands it needs.
    pub commands: &'static str,
    /// The oldest `redis_version` that has them.
    pub version: (u32, u32),
}

/// The orders worker: it claims a dead worker's orders with XAUTOCLAIM and trims the stream
/// with XTRIM MINID, both Redis 6.2.
pub const WORKER_NEEDS: Needs = Needs {
    feature: "the orders worker",
    commands: "XAUTOCLAIM and XTRIM MINID",
    version: (6, 2),
};

/// The hunt's `redis-pause` fault: `CLIENT PAUSE ms WRITE` and `CLIENT UNPAUSE`, Redis 6.2.
pub const REDIS_PAUSE_NEEDS: Needs = Needs {
    feature: "the redis-pause fault",
    commands: "CLIENT PAUSE ... WRITE and CLIENT UNPAUSE",
    version: (6, 2),
};

/// Fails with [`Error::TooOld`](crate::error::Error::TooOld) when `conn`'s server is older than `needs` says, naming the
/// server and what to do, instead of the first command it lacks failing obscurely later. A
/// server whose version cannot be read, or a user not allowed to read it, is let through (its
/// commands will say).
pub fn require(conn: &mut Conn, needs: Needs) -> Result<()> {
    // A user that may not run INFO (`-@dangerous`, as least-privilege accounts are set up)
    // is let through: its commands will say if the server lacks them.
    let Ok(info) = conn.info("server") else {
        return Ok(());
    };
    let field = |name: &str| info.get::<String>(name);
    match too_old(&field, needs) {
        Some((server, version)) => Err(crate::error::Error::TooOld {
            addr: conn.addr().to_string(),
            server,
            version,
            feature: needs.feature,
            commands: needs.commands,
            needs: needs.version,
        }),
        None => Ok(()),
    }
}

/// The server's product and version when its `redis_version` is below what `needs` says.
fn too_old(field: &dyn Fn(&str) -> Option<String>, needs: Needs) -> Option<(String, String)> {
    let v = parse_version(&field("redis_version")?)?;
    (v < needs.version).then(|| product(field))
}

/// `"7.0.15"` -> `(7, 0)`.
pub fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_product_is_named_by_what_info_says() {
        let info = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        // Valkey 9.1.2 as it answers INFO server.
        let valkey = info(&[
            ("redis_version", "7.2.4"),
            ("server_name", "valkey"),
            ("valkey_version", "9.1.2"),
        ]);
        assert_eq!(product(&valkey), ("Valkey".into(), "9.1.2".into()));
        let redis = info(&[("redis_version", "7.0.15")]);
        assert_eq!(product(&redis), ("Redis".into(), "7.0.15".into()));
        let other = info(&[("redis_version", "7.2.0"), ("server_name", "keydb")]);
        assert_eq!(product(&other), ("Keydb".into(), "7.2.0".into()));
        let dragonfly = info(&[
            ("redis_version", "7.4.0"),
            ("dragonfly_version", "df-v1.30.0"),
        ]);
        assert_eq!(
            product(&dragonfly),
            ("Dragonfly".into(), "df-v1.30.0".into())
        );
    }

    #[test]
    fn a_feature_names_the_server_too_old_for_it() {
        let at =
            |v: &'static str| move |name: &str| (name == "redis_version").then(|| v.to_string());
        assert_eq!(
            too_old(&at("6.0.16"), WORKER_NEEDS),
            Some(("Redis".into(), "6.0.16".into()))
        );
        assert_eq!(too_old(&at("6.2.0"), WORKER_NEEDS), None);
        assert_eq!(too_old(&at("7.0.15"), WORKER_NEEDS), None);
        assert_eq!(too_old(&at("garbage"), WORKER_NEEDS), None);
        let e = crate::error::Error::TooOld {
            addr: "127.0.0.1:6380".into(),
            server: "Redis".into(),
            version: "6.0.16".into(),
            feature: WORKER_NEEDS.feature,
            commands: WORKER_NEEDS.commands,
            needs: WORKER_NEEDS.version,
        };
        assert_eq!(
            e.to_string(),
            "the orders worker needs a server of Redis 6.2 or newer (redis_version), for \
             XAUTOCLAIM and XTRIM MINID; '127.0.0.1:6380' is Redis 6.0.16: upgrade it, or use \
             one that is"
        );
    }

    #[test]
    fn versions_compare_by_major_then_minor() {
        assert!(parse_version("7.0.15").unwrap() >= MIN_VERSION);
        assert!(parse_version("6.0.0").unwrap() >= MIN_VERSION);
        assert!(parse_version("5.0.14").unwrap() < MIN_VERSION);
        assert!(parse_version("10.2.1").unwrap() >= MIN_VERSION);
        assert_eq!(parse_version("garbage"), None);
    }
}
