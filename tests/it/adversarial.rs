//! The standing adversarial suite of issue 12: one test per attack, each reproducing the attack
//! through the real binary (and real servers, paused, stopped and signalled) and asserting the
//! fixed behaviour. Every test here failed against the code before the fixes (eb832db); the
//! comment on each says what that code did.
//!
//! Timing: these tests assert correctness, never speed. Where an attack needs a moment (a pause
//! that outlasts a lease, a stop that lands mid-work), the test waits for the state it needs in
//! Redis rather than for a fixed time where it can, and every wait for a process to end has a
//! generous bound after which it is killed and the test fails as a hang.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Output};
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::faults::tls_server;
use crate::support::{
    RedisServer, Streams, accounted, code, eventually, finish_within, has_client, json, lockctl,
    lockctl_env, signal, spawn_lockctl, spawn_lockctl_with, stderr, stdout,
};
use redis::Commands;

/// How long any started `lockctl` gets to end by itself before the test calls it a hang. Every
/// run here ends in a few seconds; a minute is for a slow, loaded machine.
const HANG: Duration = Duration::from_secs(60);

/// How the process ended, for messages: an exit code, or the signal that killed it.
fn ended(o: &Output) -> String {
    match (o.status.code(), o.status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s} (no exit code, nothing cleaned up)"),
        _ => format!("{:?}", o.status),
    }
}

/// Everything a purchase writes for `sku`: the stock string, the sold counter and the ledger,
/// exactly as stored.
type Books = (Option<String>, Option<String>, BTreeMap<String, String>);

fn books(raw: &mut redis::Connection, sku: &str) -> Books {
    (
        raw.get(format!("item:stock:{sku}")).unwrap(),
        raw.get(format!("item:sold:{sku}")).unwrap(),
        raw.hgetall(format!("item:orders:{sku}")).unwrap(),
    )
}

/// The units in a ledger.
fn units(ledger: &BTreeMap<String, String>) -> i64 {
    ledger.values().map(|u| u.parse::<i64>().unwrap()).sum()
}

/// Every key whose name contains `part`.
fn keys_containing(raw: &mut redis::Connection, part: &str) -> Vec<String> {
    raw.keys(format!("*{part}*")).unwrap()
}

fn queue_len(raw: &mut redis::Connection, sku: &str) -> u64 {
    raw.zcard(format!("dist_lock_queue:{sku}")).unwrap()
}

fn lock_held(raw: &mut redis::Connection, sku: &str) -> bool {
    raw.exists(format!("dist_lock:{sku}")).unwrap()
}

/// Waits until `sku`'s lock is held and at least `waiters` buyers queue for it; a run that never
/// gets there is killed and fails the test.
fn wait_for_queue(server: &RedisServer, run: &mut Child, sku: &str, waiters: u64) {
    let mut raw = server.raw();
    let queued = eventually(Duration::from_secs(30), || {
        lock_held(&mut raw, sku) && queue_len(&mut raw, sku) >= waiters
    });
    if !queued {
        let _ = run.kill();
        let _ = run.wait();
        panic!("{waiters} buyers never queued for the lock on {sku}");
    }
}

/// Attack 1. A Redis Cluster driver that resends a request after a timeout applies a
/// non-idempotent write again. Old: the lock strategy answered `bought, -2 left` and the ledger
/// held 3 units for its one order; atomic answered `"replayed":true` for a fresh order id (its
/// own resend). Now nothing is sent twice: the buy times out (indeterminate) or buys once.
#[test]
fn a_cluster_master_paused_mid_purchase_applies_the_write_once() {
    let cluster = Cluster::start();
    let owner = cluster.owner(lockctl_core::keys::key_slot("{cs}"));
    for strategy in ["lock", "fenced", "atomic"] {
        // A SKU per strategy, all in {cs}'s slot: a buy that timed out leaves its lock to expire.
        let sku = format!("{{cs}}{strategy}");
        let out = lockctl(&cluster.url(), &["--cluster", "seed", &sku, "1"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let buy = spawn_lockctl_with(
            &cluster.url(),
            &[
                "--cluster",
                "--timeout-ms",
                "200",
                "--json",
                "buy",
                &sku,
                "--strategy",
                strategy,
                "--work-ms",
                "300",
            ],
            Streams::Capture,
        );
        // Stop the owner while the write is on its way: inside the 300 ms of work, after the
        // read. The lock strategies show where they are (the lock is taken before the read);
        // atomic works before its one script, so 150 ms in is mid-work.
        if strategy == "atomic" {
            thread::sleep(Duration::from_millis(150));
        } else {
            let mut raw = cluster.nodes[owner].raw();
            assert!(
                eventually(Duration::from_secs(20), || lock_held(&mut raw, &sku)),
                "{strategy}: the buyer never took the lock"
            );
            thread::sleep(Duration::from_millis(100));
        }
        // 1.5 s: several times --timeout-ms, far below the cluster's 5 s node timeout (no
        // failover).
        cluster.nodes[owner].signal("STOP");
        thread::sleep(Duration::from_millis(1500));
        cluster.nodes[owner].signal("CONT");
        let out = finish_within(buy, HANG, "the buy");
        let (stock, sold, ledger) = books(&mut cluster.nodes[owner].raw(), &sku);
        let stock: i64 = stock.unwrap().parse().unwrap();
        let sold: i64 = sold.map_or(0, |s| s.parse().unwrap());
        let seen = format!(
            "{strategy}: {}, stdout {}; stock {stock}, sold {sold}, ledger {ledger:?}",
            ended(&out),
            stdout(&out)
        );
        assert!(stock >= 0, "oversold: {seen}");
        assert_eq!(stock + units(&ledger), 1, "{seen}");
        assert_eq!(sold, units(&ledger), "{seen}");
        let v = json(&out);
        match code(&out) {
            0 => {
                assert_eq!(v["outcome"], "bought", "{seen}");
                assert_eq!(v["remaining"], 0, "{seen}");
                // A fresh order id cannot be a replay unless the purchase was sent twice.
                assert_ne!(v["replayed"], true, "{seen}");
                assert_eq!(ledger.get(v["order_id"].as_str().unwrap()).unwrap(), "1");
            }
            1 => {
                assert_eq!(v["error_kind"], "timed_out", "{seen}");
                assert_eq!(v["indeterminate"], true, "{seen}");
            }
            _ => panic!("neither bought nor timed out: {seen}"),
        }
    }
}

/// Attack 2. A watchdog holder stopped past its lease (SIGSTOP, a long GC pause) wrote when it
/// resumed, although another buyer had held the lock meanwhile. Old: both bought, stock -1.
/// Now the holder checks its lease by its own clock before writing: `lease_lost`, exit 5.
#[test]
fn a_watchdog_holder_stopped_past_its_lease_writes_nothing_when_it_resumes() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "wd", "1"]);
    let a = spawn_lockctl_with(
        &server.url(),
        &[
            "--json",
            "buy",
            "wd",
            "--strategy",
            "lock",
            "--watchdog",
            "--ttl-ms",
            "300",
            "--work-ms",
            "2000",
        ],
        Streams::Capture,
    );
    let a_pid = a.id();
    let mut raw = server.raw();
    assert!(
        eventually(Duration::from_secs(20), || lock_held(&mut raw, "wd")),
        "A never took the lock"
    );
    // Stop A 300 ms into its 2000 ms of work (1.7 s before its write: room for a slow machine),
    // for 2 s: its lease (300 ms, renewed by a watchdog that is stopped too) runs out and the
    // remaining work is over, so A goes straight to its write when it resumes.
    thread::sleep(Duration::from_millis(300));
    signal(a_pid, "STOP");
    thread::sleep(Duration::from_secs(2));
    let b = lockctl(
        &server.url(),
        &[
            "--json",
            "buy",
            "wd",
            "--strategy",
            "lock",
            "--wait-ms",
            "5000",
        ],
    );
    signal(a_pid, "CONT");
    let a = finish_within(a, HANG, "A");
    assert_eq!(code(&b), 0, "B: {}", stdout(&b));
    assert_eq!(json(&b)["outcome"], "bought");
    assert_eq!(code(&a), 5, "A: {} {}", ended(&a), stdout(&a));
    assert_eq!(json(&a)["outcome"], "lease_lost");
    let (stock, _, ledger) = books(&mut raw, "wd");
    assert_eq!(stock.as_deref(), Some("0"), "ledger {ledger:?}");
    assert_eq!(ledger.len(), 1, "{ledger:?}");
}

/// Attack 3. Stock strings Redis would never write itself (`+5`, `05`, `-0`, `00`) or that are
/// no number at all. Old: `+5`/`05` under lock and naive failed half-way (sold 1 and a ledger
/// entry, stock unchanged); `-0`/`00` were sold out. Now every strategy refuses them as
/// `bad_stock`, determinately, and writes nothing.
#[test]
fn a_non_canonical_stock_is_bad_stock_for_every_strategy_and_nothing_is_written() {
    let server = RedisServer::start();
    let mut raw = server.raw();
    // 2^53 + 1: beyond what Lua's numbers hold exactly, so no strategy may count with it.
    for value in ["+5", "05", "-0", "00", "abc", "9007199254740993"] {
        for strategy in ["lock", "fenced", "atomic", "naive", "batch"] {
            lockctl(&server.url(), &["seed", "bad", "5"]);
            let _: () = raw.set("item:stock:bad", value).unwrap();
            let before = books(&mut raw, "bad");
            let out = lockctl(
                &server.url(),
                &["--json", "buy", "bad", "--strategy", strategy],
            );
            let seen = format!("stock '{value}', {strategy}: {}", stdout(&out));
            assert_eq!(code(&out), 1, "{seen}");
            let v = json(&out);
            assert_eq!(v["error_kind"], "bad_stock", "{seen}");
            assert_eq!(v["indeterminate"], false, "{seen}");
            assert_eq!(books(&mut raw, "bad"), before, "{seen}");
        }
    }
}

/// A stock already below zero (an earlier oversale) is no place to start a run from: every
/// hammer, lockctl's own and `--url`, refuses it before a request, naming the value, rather
/// than judge the run by an oversale that was there before it. A line break in a bad stock
/// is shown escaped.
#[test]
fn a_run_refuses_to_start_from_a_negative_stock_and_shows_bad_values_escaped() {
    let server = RedisServer::start();
    let mut raw = server.raw();
    lockctl(&server.url(), &["seed", "neg", "5"]);
    let _: () = raw.set("item:stock:neg", "-5").unwrap();
    let before = books(&mut raw, "neg");
    let runs: [&[&str]; 2] = [
        &["hammer", "--sku", "neg", "-n", "10", "--strategy", "atomic"],
        // Nothing listens on port 1: the refusal comes before any request.
        &[
            "hammer",
            "--sku",
            "neg",
            "-n",
            "10",
            "--url",
            "http://127.0.0.1:1/",
            "--preset",
            "tutorial",
        ],
    ];
    for args in runs {
        let out = lockctl(&server.url(), args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("('item:stock:neg') is -5, below zero"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(books(&mut raw, "neg"), before, "{args:?}");
    }
    let _: () = raw.set("item:stock:neg", "5\n").unwrap();
    let out = lockctl(&server.url(), &["buy", "neg"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds '5\\n', not a stock count"),
        "{}",
        stderr(&out)
    );
    // An integer past what Lua counts exactly is not called "not an integer".
    let _: () = raw.set("item:stock:neg", i64::MAX.to_string()).unwrap();
    let out = lockctl(&server.url(), &["buy", "neg"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("holds '9223372036854775807', not a stock count")
            && err.contains("no larger than 9007199254740991"),
        "{err}"
    );
    assert_eq!(
        raw.get::<_, String>("item:stock:neg").unwrap(),
        i64::MAX.to_string()
    );
}

/// Attack 3, the sold counter. Old: the lock and naive strategies bought past a sold counter
/// holding `zz` (their MULTI applied everything but the INCRBY); fenced and atomic failed
/// mid-script, after the stock and ledger were written; `status` failed with a conversion error.
/// Now every strategy refuses (`bad_data`) before writing, and `status` names the key (exit 3).
#[test]
fn a_damaged_sold_counter_is_bad_data_for_every_strategy_and_status_names_it() {
    let server = RedisServer::start();
    let mut raw = server.raw();
    lockctl(&server.url(), &["seed", "bad", "5"]);
    let _: () = raw.set("item:sold:bad", "zz").unwrap();
    let before = books(&mut raw, "bad");
    for strategy in ["lock", "fenced", "atomic", "naive", "batch"] {
        let out = lockctl(
            &server.url(),
            &["--json", "buy", "bad", "--strategy", strategy],
        );
        assert_eq!(code(&out), 1, "{strategy}: {}", stdout(&out));
        let v = json(&out);
        assert_eq!(v["error_kind"], "bad_data", "{strategy}: {v}");
        assert_eq!(v["indeterminate"], false, "{strategy}: {v}");
        assert_eq!(books(&mut raw, "bad"), before, "{strategy}");
    }
    let out = lockctl(&server.url(), &["status", "bad"]);
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("item:sold:bad"), "{}", stdout(&out));
}

/// Attack 4. One queue member lockctl did not write. Old: every `buy` of the SKU failed with a
/// Lua error (`attempt to perform arithmetic on local 'sep'`, `invalid expire time in 'set'`),
/// while `status` said all was well (exit 0). Now buyers drop the entry, `status` reports the
/// damaged queue (exit 3), and `unlock --force` repairs it.
#[test]
fn a_malformed_queue_entry_neither_locks_the_sku_out_nor_survives_a_forced_unlock() {
    let server = RedisServer::start();
    let mut raw = server.raw();
    let damage = |raw: &mut redis::Connection, member: &str| {
        let _: () = redis::cmd("FLUSHALL").query(raw).unwrap();
        lockctl(&server.url(), &["seed", "g1", "5"]);
        let _: () = raw.zadd("dist_lock_queue:g1", member, 1).unwrap();
    };
    for member in ["garbage", "abc/xyz", "tok/0", "tok/-5"] {
        damage(&mut raw, member);
        let out = lockctl(&server.url(), &["status", "g1"]);
        assert_eq!(code(&out), 3, "{member}: {}", stdout(&out));
        assert!(
            stdout(&out).contains("queue is damaged"),
            "{member}: {}",
            stdout(&out)
        );
        let out = lockctl(&server.url(), &["status", "g1", "--json"]);
        assert_eq!(code(&out), 3, "{member}");
        let v = json(&out);
        assert_eq!(v["queue_damaged"], 1, "{member}: {v}");
        assert_eq!(v["reconciled"], false, "{member}: {v}");
        for strategy in ["lock", "fenced"] {
            let out = lockctl(
                &server.url(),
                &["--json", "buy", "g1", "--strategy", strategy],
            );
            assert_eq!(code(&out), 0, "{member} {strategy}: {}", stdout(&out));
            assert_eq!(json(&out)["outcome"], "bought");
        }

        damage(&mut raw, member);
        let out = lockctl(&server.url(), &["unlock", "g1", "--force"]);
        assert_eq!(code(&out), 0, "{member}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("dropped 1 damaged queue entry"),
            "{member}: {}",
            stdout(&out)
        );
        let out = lockctl(&server.url(), &["status", "g1", "--json"]);
        assert_eq!(code(&out), 0, "{member}: {}", stdout(&out));
        assert_eq!(json(&out)["queue_damaged"], 0);
    }
}

/// Attack 5. `unlock --force` right after the holder's process died with its waiters. Old: the
/// forced unlock granted the lock to the next (dead) waiter, so the lock stayed held for that
/// waiter's 60 s TTL and every buyer was busy. Now it empties the queue and hands the lock to
/// nobody.
#[test]
fn a_forced_unlock_right_after_a_crash_hands_the_lock_to_no_dead_waiter() {
    let server = RedisServer::start();
    let mut hammer = spawn_lockctl(
        &server.url(),
        &[
            "hammer",
            "--sku",
            "k5",
            "-n",
            "50",
            "-c",
            "5",
            "--stock",
            "50",
            "--ttl-ms",
            "60000",
            "--wait-ms",
            "60000",
            "--work-ms",
            "2000",
        ],
    );
    wait_for_queue(&server, &mut hammer, "k5", 2);
    hammer.kill().unwrap(); // SIGKILL: the holder and its queued waiters die without a word
    hammer.wait().unwrap();
    let out = lockctl(&server.url(), &["unlock", "k5", "--force"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut raw = server.raw();
    let ttl: i64 = raw.pttl("dist_lock:k5").unwrap();
    assert!(
        !lock_held(&mut raw, "k5"),
        "the lock was handed on (PTTL {ttl} ms): {}",
        stdout(&out)
    );
    assert_eq!(queue_len(&mut raw, "k5"), 0, "{}", stdout(&out));
    let out = lockctl(&server.url(), &["--json", "buy", "k5"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["outcome"], "bought");
}

/// Attack 6. Ctrl-Z and `fg` (SIGSTOP, SIGCONT) while a buyer waits for the lock. Old: the
/// interrupted socket read was an error, `Interrupted system call (os error 4)`, exit 1. Now the
/// read is retried and the buyer buys once the foreign lock expires.
#[test]
fn a_buyer_stopped_and_continued_while_waiting_still_buys() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "ei", "1"]);
    // A lock held by a client that knows nothing of lockctl, long enough to stop the buyer
    // while it waits however slowly it starts.
    server.hold_lock("ei", "other", 5000);
    let buy = spawn_lockctl_with(
        &server.url(),
        &["--json", "buy", "ei", "--wait-ms", "20000"],
        Streams::Capture,
    );
    let pid = buy.id();
    let mut raw = server.raw();
    assert!(
        eventually(Duration::from_secs(20), || queue_len(&mut raw, "ei") >= 1),
        "the buyer never queued"
    );
    assert!(
        eventually(Duration::from_secs(20), || has_client(
            &mut raw,
            &["flags=b"]
        )),
        "the buyer never blocked reading its wake-up"
    );
    signal(pid, "STOP");
    thread::sleep(Duration::from_millis(200));
    signal(pid, "CONT");
    let out = finish_within(buy, HANG, "the buyer");
    assert_eq!(code(&out), 0, "{} {}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "bought");
    let stock: i64 = raw.get("item:stock:ei").unwrap();
    assert_eq!(stock, 0);
}

/// The pids of `pid`'s children, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn cmdline(pid: u32) -> Option<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
}

/// A child `lockctl buy` the test stopped: continued and killed on drop if it is still there
/// (the same command line, so not some other process that got its pid), whatever happened.
struct Stopped {
    pid: u32,
    cmdline: String,
}

impl Stopped {
    fn still_there(&self) -> bool {
        cmdline(self.pid).is_some_and(|c| c == self.cmdline)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if self.still_there() {
            for sig in ["CONT", "KILL"] {
                let _ = std::process::Command::new("kill")
                    .arg(format!("-{sig}"))
                    .arg(self.pid.to_string())
                    .output();
            }
        }
    }
}

/// Attack 7. A `--mode procs` child that is stopped (SIGSTOP) never answers. Old: the hammer
/// waited for it forever (no report after 30 s; killed by hand). Now each child has a deadline
/// from the run's limits and is killed past it: the request is an error of kind `child`,
/// counted as indeterminate, and the run reports.
#[test]
fn a_procs_hammer_reports_when_one_of_its_children_is_stopped() {
    let server = RedisServer::start();
    let hammer = spawn_lockctl_with(
        &server.url(),
        &[
            "hammer",
            "--sku",
            "p7",
            "--mode",
            "procs",
            "-n",
            "6",
            "-c",
            "2",
            "--stock",
            "6",
            "--work-ms",
            "200",
            "--timeout-ms",
            "500",
            "--connect-timeout-ms",
            "500",
            "--wait-ms",
            "500",
            "--ttl-ms",
            "1000",
            "--json",
        ],
        Streams::Capture,
    );
    let hammer_pid = hammer.id();
    let mut child = None;
    eventually(Duration::from_secs(20), || {
        child = children_of(hammer_pid)
            .into_iter()
            .find_map(|c| Some((c, cmdline(c).filter(|l| l.contains(" buy "))?)));
        child.is_some()
    });
    let Some((pid, line)) = child else {
        drop(finish_within(hammer, HANG, "the hammer"));
        panic!("the procs hammer never started a child lockctl buy");
    };
    // Stopped before it is registered for cleanup would leave it stopped if the test failed.
    let stopped = Stopped { pid, cmdline: line };
    signal(pid, "STOP");
    // The hammer's own deadline for a child here is about 9 s; a minute before calling it a hang.
    let out = finish_within(hammer, HANG, "the procs hammer with a stopped child");
    assert!(
        !stopped.still_there(),
        "the hammer ended but left its stopped child {pid} behind"
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(accounted(&v), 6, "{v}");
    assert!(v["errors_by_kind"]["child"].as_u64() >= Some(1), "{v}");
    assert!(v["indeterminate"].as_u64() >= Some(1), "{v}");
}

/// Attack 8. An ACL user that may load scripts but not run them (`-evalsha -eval`): every atomic
/// purchase fails while the stock is there. Old: verdict PASS, exit 0 ("nothing oversold", with
/// 20 errors). Now nothing was measured, so the verdict is UNKNOWN (exit 1) and says why.
/// (With `-script` as well, both old and new refuse the run before it starts: the hammer loads
/// its scripts first. That is not this attack.)
#[test]
fn a_run_in_which_every_request_failed_is_unknown_not_pass() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ])
        .query(&mut server.raw())
        .unwrap();
    let limited = format!("redis://limited:pw@127.0.0.1:{}", server.port);
    let run = [
        "hammer",
        "--sku",
        "a8",
        "-n",
        "20",
        "-c",
        "2",
        "--stock",
        "10",
        "--strategy",
        "atomic",
    ];
    let out = lockctl(&limited, &[&run[..], &["--json"]].concat());
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "unknown", "{v}");
    assert_eq!(v["errors"], 20, "{v}");
    assert_eq!(v["bought"], 0, "{v}");

    let out = lockctl(&limited, &run);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with("verdict"))
        .unwrap_or_else(|| panic!("no verdict line:\n{text}"));
    assert!(verdict.contains("UNKNOWN"), "{verdict}");
    assert!(verdict.contains("20 requests failed"), "{verdict}");
    assert!(verdict.contains("redis"), "{verdict}");

    // With no stock to sell it is no different: nothing was tried, nothing is passed. The
    // same for an endpoint that is not there (nothing listens on port 1).
    let empty = [&run[..8], &["0", "--strategy", "atomic", "--json"]].concat();
    let down = [
        "hammer",
        "--sku",
        "a9",
        "-n",
        "5",
        "--stock",
        "0",
        "--json",
        "--url",
        "http://127.0.0.1:1/",
        "--preset",
        "tutorial",
    ];
    for (url, args) in [(&limited, &empty[..]), (&server.url(), &down[..])] {
        let out = lockctl(url, args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stdout(&out));
        assert_eq!(json(&out)["verdict"], "unknown", "{args:?}");
    }
}

/// Attack 9. Signals other than one Ctrl-C. Old: SIGTERM and SIGHUP killed the hammer outright
/// (no exit code, no report) and, like a second Ctrl-C, left the lock held for its 60 s TTL
/// with the queue full of dead waiters. Now each exits 128+n, giving back every lock and queue
/// place; one SIGHUP lets the requests in flight finish and reports.
#[test]
fn sigterm_sighup_and_a_second_ctrl_c_give_the_lock_back() {
    let server = RedisServer::start();
    let cases: [(&[&str], i32, &str); 3] = [
        (&["TERM", "TERM"], 143, "SIGTERM twice"),
        (&["HUP"], 129, "one SIGHUP"),
        (&["INT", "INT"], 130, "Ctrl-C twice"),
    ];
    for (signals, expected, label) in cases {
        let sku = format!("sig{expected}");
        let mut hammer = spawn_lockctl_with(
            &server.url(),
            &[
                "hammer",
                "--sku",
                &sku,
                "-n",
                "1000",
                "-c",
                "5",
                "--stock",
                "1000",
                "--ttl-ms",
                "60000",
                "--wait-ms",
                "60000",
                "--work-ms",
                "200",
            ],
            Streams::Capture,
        );
        // Running: one buyer holds the lock and others queue behind it.
        wait_for_queue(&server, &mut hammer, &sku, 2);
        for (i, sig) in signals.iter().enumerate() {
            if i > 0 {
                thread::sleep(Duration::from_millis(100));
            }
            signal(hammer.id(), sig);
        }
        let out = finish_within(hammer, HANG, label);
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{label}: {}\n{}",
            ended(&out),
            stderr(&out)
        );
        let mut raw = server.raw();
        let ttl: i64 = raw.pttl(format!("dist_lock:{sku}")).unwrap();
        assert!(
            !lock_held(&mut raw, &sku),
            "{label}: the lock was left held (PTTL {ttl} ms)"
        );
        assert_eq!(queue_len(&mut raw, &sku), 0, "{label}: waiters left queued");
        if expected == 129 {
            assert!(stdout(&out).contains("interrupted"), "{}", stdout(&out));
        }
    }
}

/// Attack 10. Memory that grows with -n. Old: ~250 bytes held per request until the end (by
/// /usr/bin/time: 14.0 MB at -n 10k, 61.3 MB at -n 200k). Now answers are folded into a tally
/// as they come, and the report carries the peak RSS (`client_max_rss_mb`).
#[test]
fn the_hammers_memory_stays_flat_as_the_request_count_grows() {
    let server = RedisServer::start();
    let rss = |n: &str| {
        let out = lockctl(
            &server.url(),
            &[
                "hammer",
                "--sku",
                "m10",
                "--strategy",
                "atomic",
                "-c",
                "20",
                "--stock",
                n,
                "-n",
                n,
                "--json",
            ],
        );
        assert_eq!(code(&out), 0, "-n {n}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["verdict"], "pass", "{v}");
        v["client_max_rss_mb"]
            .as_f64()
            .unwrap_or_else(|| panic!("no client_max_rss_mb: {v}"))
    };
    let small = rss("10000");
    let large = rss("200000");
    // 190,000 more requests at the old ~250 B each would be ~48 MB more. The bound allows 50 %
    // and 8 MB of noise (allocator arenas, histograms, a slower machine's larger backlog) and
    // still fails any cost per request above ~70 bytes.
    assert!(
        large < 1.5 * small + 8.0,
        "peak RSS {small} MB at -n 10000 but {large} MB at -n 200000"
    );
}

/// Attack 11. More buyers than the server's maxclients. Old: the connections past the limit
/// failed (`Connection reset by peer`, 40 errors), the run seeded the stock and still said
/// PASS, exit 0. Now a run on threads (a connection a buyer) is refused before anything is
/// written, saying to lower -c; on tasks the same buyers fit in a few connections.
#[test]
fn a_hammer_wider_than_maxclients_is_refused_before_it_writes_anything() {
    let server = RedisServer::start_with(&["--maxclients", "30"]);
    let wide = |mode: &[&'static str]| {
        let mut args = vec![
            "hammer",
            "--sku",
            "m11",
            "-c",
            "50",
            "-n",
            "100",
            "--stock",
            "10",
            "--strategy",
            "atomic",
        ];
        args.extend_from_slice(mode);
        lockctl(&server.url(), &args)
    };
    let out = wide(&["--mode", "threads"]);
    // Too many buyers for the server is a bad argument: exit 2, like any other.
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("maxclients"), "{err}");
    assert!(err.contains("-c"), "{err}");
    let mut raw = server.raw();
    assert!(!raw.exists::<_, bool>("item:stock:m11").unwrap(), "seeded");
    assert_eq!(keys_containing(&mut raw, "m11"), Vec::<String>::new());

    // The same run on tasks (atomic's default on a single server) needs a few connections,
    // not one a buyer: it fits, and sells exactly the stock.
    let out = wide(&[]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        raw.get::<_, Option<String>>("item:stock:m11")
            .unwrap()
            .as_deref(),
        Some("0")
    );

    // A server with no room for even one buyer is not told "lower -c to at most 0".
    let full = RedisServer::start_with(&["--maxclients", "4"]);
    let out = lockctl(&full.url(), &["hammer", "--sku", "m11", "-n", "10"]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("not even -c 1 fits"), "{err}");
    assert!(!err.contains("at most 0"), "{err}");
}

/// Ten thousand buyers under a lock strategy are tasks, not threads: only the waiting room's
/// few wait in Redis, so a run far wider than the server's maxclients fits, sells exactly the
/// stock, and turns nobody away busy within its wait. Old: refused (3,000 connections needed),
/// and past that one thread and one connection per buyer.
#[test]
fn lock_buyers_by_the_thousand_are_tasks_and_fit_a_small_maxclients() {
    let server = RedisServer::start_with(&["--maxclients", "64"]);
    for strategy in ["lock", "fenced"] {
        let sku = format!("wide_{strategy}");
        let out = lockctl(
            &server.url(),
            &[
                "hammer",
                "--json",
                "--sku",
                &sku,
                "-c",
                "3000",
                "-n",
                "3000",
                "--stock",
                "1000",
                "--strategy",
                strategy,
                "--wait-ms",
                "120000",
            ],
        );
        assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
        let v = json(&out);
        assert_eq!(v["verdict"], "pass", "{v}");
        assert_eq!(
            (v["bought"].as_u64(), v["sold_out"].as_u64()),
            (Some(1000), Some(2000)),
            "{v}"
        );
        assert_eq!(
            (v["busy"].as_u64(), v["errors"].as_u64()),
            (Some(0), Some(0)),
            "{v}"
        );
    }
}

/// Attack 12. Passwords in URLs the parser rejects. Old: the error quoted the URL whole,
/// `invalid Redis URL 'redis//:S3cr3tPW@127.0.0.1:...'`, on stderr and in the JSON. Now
/// anything that looks like credentials is cut out, wherever the URL came from.
#[test]
fn passwords_in_malformed_urls_are_never_printed() {
    let server = RedisServer::start();
    let secret = "S3cr3tPW";
    for url in [
        format!("redis//:{secret}@127.0.0.1:{}", server.port),
        format!("redis:/:{secret}@127.0.0.1:{}", server.port),
        // No scheme at all, and a password typed where the user goes.
        format!("{secret}@127.0.0.1:{}", server.port),
        format!("redis://{secret}@127.0.0.1:99999"),
    ] {
        let url = url.as_str();
        let nodes = format!("{url},{url},{url}");
        let lock_nodes = ["--lock-node", url, "--lock-node", url, "--lock-node", url];
        // Where the URL is given: (how, REDIS_URL, extra environment, arguments).
        let places: [(&str, &str, Option<&str>, Vec<&str>); 4] = [
            (
                "--redis",
                &server.url(),
                None,
                vec!["--redis", url, "check"],
            ),
            ("REDIS_URL", url, None, vec!["check"]),
            (
                "--lock-node x3",
                &server.url(),
                None,
                [&lock_nodes[..], &["buy", "x"]].concat(),
            ),
            (
                "LOCKCTL_LOCK_NODES",
                &server.url(),
                Some(&nodes),
                vec!["buy", "x"],
            ),
        ];
        for (how, redis_url, lock_nodes_env, args) in &places {
            for json in [false, true] {
                let args = [if json { &["--json"][..] } else { &[] }, args].concat();
                let env: Vec<(&str, &str)> = lock_nodes_env
                    .iter()
                    .map(|n| ("LOCKCTL_LOCK_NODES", *n))
                    .collect();
                let out = lockctl_env(redis_url, &args, &env);
                let all = stdout(&out) + &stderr(&out);
                let seen = format!("{url} as {how}, json {json}: {all}");
                // A URL that does not parse is a usage error.
                assert_eq!(code(&out), 2, "{seen}");
                assert!(all.contains("invalid Redis URL"), "{seen}");
                assert!(!all.contains(secret), "the password was printed: {seen}");
            }
        }
    }
}

/// Attack 13. SKUs that look like `sku_886` but are not (a zero-width space, a right-to-left
/// override, a byte-order mark, a soft hyphen after it). Old: each was seeded (exit 0) as a
/// separate SKU an operator could not tell apart. Now they are usage errors that write nothing.
#[test]
fn look_alike_skus_with_invisible_characters_are_refused_and_write_nothing() {
    let server = RedisServer::start();
    for c in ['\u{200B}', '\u{202E}', '\u{FEFF}', '\u{00AD}'] {
        let sku = format!("sku_886{c}");
        let hex = format!("U+{:04X}", c as u32);
        for args in [
            &["seed", &sku, "5"][..],
            &["hammer", "--sku", &sku, "--stock", "5", "-n", "1"],
        ] {
            let out = lockctl(&server.url(), args);
            assert_eq!(code(&out), 2, "{hex} {}: {}", args[0], stderr(&out));
            assert!(stderr(&out).contains(&hex), "{hex}: {}", stderr(&out));
        }
    }
    assert_eq!(
        keys_containing(&mut server.raw(), "sku_886"),
        Vec::<String>::new()
    );
}

/// Attack 15. Old: `--limit` without a user was silently ignored (`buy s --limit 1` bought;
/// the hammer sold everything with no limit and said PASS). Now it is a usage error naming the
/// flag that is missing.
#[test]
fn a_limit_without_a_user_is_a_usage_error_naming_the_missing_flag() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "s", "5"]);
    for (args, flag) in [
        (&["buy", "s", "--limit", "1"][..], "--user"),
        (
            &["hammer", "--sku", "s", "-n", "5", "--limit", "1"],
            "--users",
        ),
    ] {
        let out = lockctl(&server.url(), args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(flag), "{args:?}: {}", stderr(&out));
    }
    let stock: i64 = server.raw().get("item:stock:s").unwrap();
    assert_eq!(stock, 5);
}

/// Attack 15. A server that accepts the TCP connection but never answers (SIGSTOP). Old:
/// `--connect-timeout-ms 2000` took ~4 s (the TCP connect and the handshake each got the
/// whole limit). Now the limit covers the whole connect.
#[test]
fn a_connect_to_a_stopped_server_gives_up_within_its_connect_timeout() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "s", "5"]);
    server.signal("STOP");
    let mut runs = Vec::new();
    for args in [&["check"][..], &["buy", "s"]] {
        let args = [&["--connect-timeout-ms", "2000"][..], args].concat();
        let t = Instant::now();
        let out = lockctl(&server.url(), &args);
        runs.push((args, t.elapsed(), out));
    }
    server.signal("CONT");
    for (args, took, out) in runs {
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("timed out after 2000 ms connecting"),
            "{args:?}: {}",
            stderr(&out)
        );
        // 2 s of limit plus 1.5 s for starting the process and the rest of its work on a slow
        // machine; the old doubled limit (4 s) is still caught.
        assert!(
            took < Duration::from_millis(3500),
            "{args:?} took {took:?} with --connect-timeout-ms 2000"
        );
    }
}

/// Attack 15. A backtick in a SKU. Old: the Markdown export wrote `` `a`b` ``, a code span that
/// ends after `a`. Now the span's fence is longer than any backtick run inside it.
#[test]
fn a_backtick_in_a_sku_survives_the_markdown_export() {
    let server = RedisServer::start();
    for (sku, span) in [("a`b", "``a`b``"), ("`x", "`` `x ``")] {
        let out = lockctl(
            &server.url(),
            &[
                "hammer",
                "--stock",
                "2",
                "-n",
                "3",
                "-c",
                "1",
                "--export-markdown",
                "-",
                "--sku",
                sku,
            ],
        );
        assert_eq!(code(&out), 0, "{sku}: {}", stderr(&out));
        assert!(stdout(&out).contains(span), "{sku}: {}", stdout(&out));
    }
}

/// Issue 11. A `--mode procs` hammer over TLS with a password. Old: the children were started
/// without the TLS flags, so all 20 failed (`invalid peer certificate: UnknownIssuer`), and the
/// run said PASS with stock untouched. Now the children get the parent's connection settings
/// and the run buys the whole stock.
#[test]
fn a_procs_hammer_over_tls_with_a_password_buys_end_to_end() {
    let (certs, server, tls_port) = tls_server(&["--requirepass", "tls-s3cret"]);
    let p = |f: &str| certs.path().join(f).to_str().unwrap().to_string();
    let url = format!("rediss://:tls-s3cret@localhost:{tls_port}");
    let (ca, cert, key) = (p("ca.crt"), p("client.crt"), p("client.key"));
    let out = lockctl(
        &url,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "hammer",
            "--mode",
            "procs",
            "-n",
            "20",
            "-c",
            "4",
            "--stock",
            "10",
            "--json",
        ],
    );
    assert!(!(stdout(&out) + &stderr(&out)).contains("tls-s3cret"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["bought"], 10, "{v}");
    assert_eq!(v["final_stock"], 0, "{v}");
    let mut raw = server.raw();
    let _: () = redis::cmd("AUTH")
        .arg("tls-s3cret")
        .query(&mut raw)
        .unwrap();
    let stock: i64 = raw.get("item:stock:sku_886").unwrap();
    assert_eq!(stock, 0, "the run did not reach this server");
}

/// Ctrl-Z and `fg` past the per-call limit, on tokio tasks: a hammer of 50 buyers stopped for
/// 2.5 s with `--timeout-ms 1000`, mid-run. Old: every reply that came in while it was stopped
/// and the call's deadline were ready together when it continued, and tokio ran the timer
/// first: 16 `lock` purchases (one of which had bought) and 50 `atomic` ones failed as timed
/// out with their answers in the socket, where the blocking threads' reads found theirs. Now
/// a deadline that fires late waits a moment for the reply that came, and none fails.
#[test]
fn a_hammer_on_tasks_stopped_past_its_call_limit_loses_no_reply() {
    let server = RedisServer::start();
    let mut raw = server.raw();
    for (strategy, n) in [("lock", 20_000), ("atomic", 150_000)] {
        let sku = format!("stopped_{strategy}");
        let n_s = n.to_string();
        let child = spawn_lockctl_with(
            &server.url(),
            &[
                "--json",
                "--timeout-ms",
                "1000",
                "hammer",
                "--sku",
                &sku,
                "--strategy",
                strategy,
                "--mode",
                "tasks",
                "-c",
                "50",
                "-n",
                &n_s,
                "--stock",
                &n_s,
                "--wait-ms",
                "60000",
            ],
            Streams::Capture,
        );
        let key = format!("item:stock:{sku}");
        let running = eventually(HANG, || {
            raw.get::<_, Option<i64>>(&key)
                .ok()
                .flatten()
                .is_some_and(|s| s < n - 100)
        });
        assert!(running, "{strategy}: the run never began selling");
        let stock_at_stop: i64 = raw.get(&key).unwrap();
        signal(child.id(), "STOP");
        thread::sleep(Duration::from_millis(2500));
        signal(child.id(), "CONT");
        let out = finish_within(child, HANG, "the hammer");
        let report = json(&out);
        assert!(
            stock_at_stop > 0,
            "{strategy}: the run ended before it was stopped; give it more purchases"
        );
        assert_eq!(
            report["errors"], 0,
            "{strategy}: {} {}",
            report["errors_by_kind"], report["first_error"]
        );
        assert_eq!(report["verdict"], "pass", "{strategy}: {}", stderr(&out));
        assert_eq!(report["bought"], n, "{strategy}");
    }
}
