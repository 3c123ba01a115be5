//! `check`: is this Redis reachable, and is it fit to hold locks?
//!
//! The seed's step 1 only asks whether a connection opens. A lock also needs a server recent
//! enough (6.0, the seed's prerequisite), working scripts (release and renewal are scripts), and
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
    let mut rtts = Vec::with_capacity(RTT_SAMPLES);
    for _ in 0..RTT_SAMPLES {
        let t = Instant::now();
        conn.query::<String>(&redis::cmd("PING"))?;
        rtts.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rtts.sort_by(f64::total_cmp);
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
    warnings.extend(durability_warnings(conn));

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
        nodes: Vec::new(),
        quorum: None,
    })
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

/// For `--cluster`: `report` was made on the seed node; adds whether the cluster is healthy.
pub fn check_cluster(report: &mut CheckReport, seed: &mut Conn) {
    match seed.query::<String>(redis::cmd("CLUSTER").arg("INFO")) {
        Ok(info) if info.contains("cluster_state:ok") => {}
        Ok(info) => {
            let state = info
                .lines()
                .find(|l| l.starts_with("cluster_state:"))
                .unwrap_or("cluster_state:unknown")
                .trim()
                .to_string();
            report.problems.push(Finding::from(format!(
                "the cluster is not serving all slots ({state})"
            )));
        }
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
    if let Some(v) = field("valkey_version") {
        return ("Valkey".into(), v);
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
