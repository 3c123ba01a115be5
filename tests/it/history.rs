//! `--history` and `lockctl judge`: a run's every request as Jepsen's operations, and the
//! same verdict from them offline. A history edited to lie is judged on what it says.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::http::Php;
use crate::support::{RedisServer, code, json, lockctl, stderr, stdout};

/// Runs `lockctl --json hammer args... --history FILE`; returns its exit, report and FILE.
fn hammer_with_history(
    redis: &RedisServer,
    dir: &Path,
    args: &[&str],
) -> (i32, Value, std::path::PathBuf) {
    let file = dir.join("run.jsonl");
    let mut all = vec!["--json", "hammer"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--history", file.to_str().unwrap()]);
    let out = lockctl(&redis.url(), &all);
    assert!(
        file.exists(),
        "no history written: {} {}",
        stdout(&out),
        stderr(&out)
    );
    (code(&out), json(&out), file)
}

/// `lockctl --json judge FILE` (no Redis is asked: the URL names a closed port).
fn judge(file: &Path) -> (i32, Value, String) {
    let out = lockctl(
        "redis://127.0.0.1:1",
        &["--json", "judge", file.to_str().unwrap()],
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let v = if stdout(&out).trim().is_empty() {
        Value::Null
    } else {
        json(&out)
    };
    (code(&out), v, said)
}

fn lines(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write_lines(file: &Path, ops: &[Value]) {
    let text: String = ops.iter().map(|o| format!("{o}\n")).collect();
    std::fs::write(file, text).unwrap();
}

/// The fields the judge decides and counts: equal in the live report and the offline one.
const JUDGED: [&str; 14] = [
    "verdict",
    "violations",
    "bought",
    "sold_qty",
    "sold_out",
    "busy",
    "errors",
    "indeterminate",
    "oversold",
    "final_stock",
    "consumed",
    "ledger_orders",
    "notes",
    "latency_ms",
];

fn assert_same_judgement(live: &Value, again: &Value) {
    for f in JUDGED {
        assert_eq!(
            live[f], again[f],
            "{f} differs:\nlive {live}\nagain {again}"
        );
    }
}

/// Every line is an operation in Jepsen's shape; indices count up; a request's invoke comes
/// before its completion; no process (lane) has two requests in flight at once.
fn assert_jepsen_shape(ops: &[Value], requests: u64) {
    assert_eq!(ops[0]["f"], "facts");
    assert_eq!(ops.last().unwrap()["f"], "read");
    let mut open: HashMap<u64, u64> = HashMap::new();
    let mut lane_busy: HashMap<u64, u64> = HashMap::new();
    let (mut invokes, mut completions) = (0, 0);
    let mut last_time = 0;
    for (i, op) in ops.iter().enumerate() {
        for field in ["type", "f", "process", "time", "index", "value"] {
            assert!(op.get(field).is_some(), "line {}: no {field}: {op}", i + 1);
        }
        assert_eq!(op["index"], i as u64, "{op}");
        let time = op["time"].as_u64().unwrap();
        if op["f"] == "buy" {
            assert!(time >= last_time, "time went back at line {}: {op}", i + 1);
            last_time = time;
            let request = op["value"]["request"].as_u64().unwrap();
            let lane = op["process"].as_u64().expect("a numbered process");
            match op["type"].as_str().unwrap() {
                "invoke" => {
                    invokes += 1;
                    assert!(open.insert(request, lane).is_none(), "invoked twice: {op}");
                    assert!(
                        lane_busy.insert(lane, request).is_none(),
                        "process {lane} has two requests in flight: {op}"
                    );
                }
                "ok" | "fail" | "info" => {
                    completions += 1;
                    assert_eq!(open.remove(&request), Some(lane), "{op}");
                    assert_eq!(lane_busy.remove(&lane), Some(request), "{op}");
                    assert!(op["value"]["answer"].is_string(), "{op}");
                }
                other => panic!("type {other}: {op}"),
            }
        }
    }
    assert_eq!((invokes, completions), (requests, requests));
    assert!(open.is_empty());
}

#[test]
fn a_passing_and_a_failing_run_are_judged_again_the_same_from_their_histories() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (exit, live, file) = hammer_with_history(
        &redis,
        dir.path(),
        &["-n", "300", "-c", "10", "--stock", "50", "--sku", "h1"],
    );
    assert_eq!(
        (exit, live["verdict"].as_str()),
        (0, Some("pass")),
        "{live}"
    );
    let ops = lines(&file);
    assert_jepsen_shape(&ops, 300);
    let oks = ops
        .iter()
        .filter(|o| o["type"] == "ok" && o["f"] == "buy")
        .count();
    assert_eq!(oks, 50, "one ok per unit sold");
    let (again_exit, again, said) = judge(&file);
    assert_eq!(again_exit, 0, "{said}");
    assert_same_judgement(&live, &again);

    // The homework oversells: the history judged offline fails the same way, exit 3.
    let (exit, live, file) = hammer_with_history(
        &redis,
        dir.path(),
        &[
            "-n",
            "40",
            "-c",
            "8",
            "--stock",
            "10",
            "--ttl-ms",
            "100",
            "--work-ms",
            "150",
            "--sku",
            "h2",
        ],
    );
    assert_eq!(
        (exit, live["verdict"].as_str()),
        (3, Some("fail")),
        "{live}"
    );
    let (again_exit, again, said) = judge(&file);
    assert_eq!(again_exit, 3, "{said}");
    assert_same_judgement(&live, &again);
}

#[test]
fn a_history_edited_to_hide_a_sale_or_cut_short_is_not_passed() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (_, _, file) = hammer_with_history(
        &redis,
        dir.path(),
        &["-n", "50", "-c", "5", "--stock", "20", "--sku", "h3"],
    );
    let ops = lines(&file);

    // One sale rewritten as "sold out": its ledger entry now has no buyer told "bought".
    let mut edited = ops.clone();
    let sale = edited.iter_mut().find(|o| o["type"] == "ok").unwrap();
    sale["type"] = "fail".into();
    sale["value"]["answer"] = "sold_out".into();
    let order = sale["value"]["order"].as_str().unwrap().to_string();
    let lied = dir.path().join("lied.jsonl");
    write_lines(&lied, &edited);
    let (exit, v, said) = judge(&lied);
    assert_eq!(exit, 3, "{said}");
    assert!(
        v["violations"].to_string().contains(&order),
        "the violation names {order}: {v}"
    );

    // Without its last line nothing was read back: a usage error naming the line, exit 2.
    let cut = dir.path().join("cut.jsonl");
    write_lines(&cut, &ops[..ops.len() - 1]);
    let (exit, _, said) = judge(&cut);
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("no last line"), "{said}");

    // Garbage on a line: exit 2 naming the line.
    let mut garbage = ops.clone();
    garbage[3] = Value::String("not an operation".into());
    let bad = dir.path().join("bad.jsonl");
    write_lines(&bad, &garbage);
    let (exit, _, said) = judge(&bad);
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("line 4"), "{said}");

    // Numbers no run writes are refused, not judged (nor allowed to overflow the judgement).
    let hostile = |edit: &dyn Fn(&mut Vec<Value>), needle: &str| {
        let mut forged = ops.clone();
        edit(&mut forged);
        let f = dir.path().join("forged.jsonl");
        write_lines(&f, &forged);
        let (exit, _, said) = judge(&f);
        assert_eq!(exit, 2, "{needle}: {said}");
        assert!(said.contains(needle), "{needle}: {said}");
    };
    hostile(
        &|o| o[0]["value"]["facts"]["requests"] = (1u64 << 40).into(),
        "a run makes at most",
    );
    hostile(
        &|o| o[0]["value"]["stock_before"] = i64::MIN.into(),
        "a stock beyond",
    );
    hostile(
        &|o| {
            let last = o.len() - 1;
            o[last]["value"]["stock_after"] = i64::MAX.into();
        },
        "a stock beyond",
    );
    hostile(
        &|o| {
            let done = o.iter().position(|x| x["type"] == "ok").unwrap();
            let copy = o[done].clone();
            o.insert(done + 1, copy);
        },
        "twice",
    );
    hostile(
        &|o| {
            let done = o.iter().position(|x| x["type"] == "ok").unwrap();
            o[done]["value"]["request"] = u64::MAX.into();
        },
        "beyond the run",
    );

    // A file that is not there.
    let (exit, _, said) = judge(&dir.path().join("none.jsonl"));
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("none.jsonl"), "{said}");
}

#[test]
fn an_endpoints_history_is_judged_again_the_same() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let dir = tempfile::tempdir().unwrap();
    for (script, verdict) in [("run_demo.php", "pass"), ("nolock.php", "fail")] {
        let url = php.url(&format!("{script}?sku={{sku}}"));
        let sku = format!("e_{}", script.len());
        let (_, live, file) = hammer_with_history(
            &redis,
            dir.path(),
            &[
                "--url", &url, "--preset", "tutorial", "-n", "200", "-c", "10", "--stock", "20",
                "--sku", &sku,
            ],
        );
        assert_eq!(live["verdict"], verdict, "{script}: {live}");
        assert_jepsen_shape(&lines(&file), 200);
        let (_, again, said) = judge(&file);
        assert_same_judgement(&live, &again);
        assert_eq!(again["http"], live["http"], "{said}");
    }
}

/// An endpoint's history keeps the stock lockctl read while the run went, as Jepsen records
/// a register's reads: `f: "read-stock"` of `process: "observer"`, an `invoke` (value null)
/// and then its `ok` (the stock), each a change from the read before, within the stock's
/// bounds. The judge ignores them: a history without them (as older lockctl wrote) is judged
/// the same, and its timeline is drawn from the answers instead.
#[test]
fn an_endpoints_history_keeps_the_stock_it_read_and_the_judge_ignores_it() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let dir = tempfile::tempdir().unwrap();
    let url = php.url("nolock.php?sku={sku}");
    let (_, live, file) = hammer_with_history(
        &redis,
        dir.path(),
        &[
            "--url", &url, "--preset", "tutorial", "-n", "200", "-c", "10", "--stock", "20",
            "--sku", "observed",
        ],
    );
    assert_eq!(live["verdict"], "fail", "{live}");
    let ops = lines(&file);
    assert_jepsen_shape(&ops, 200);
    let reads: Vec<&Value> = ops.iter().filter(|o| o["process"] == "observer").collect();
    assert!(
        reads.len() >= 4,
        "reads during a run of 200 requests: {reads:?}"
    );
    let mut last = 20;
    for pair in reads.chunks(2) {
        let [invoke, ok] = pair else {
            panic!("an invoke without its ok: {pair:?}")
        };
        assert_eq!(
            (&invoke["f"], &invoke["type"], &invoke["value"]),
            (
                &Value::from("read-stock"),
                &Value::from("invoke"),
                &Value::Null
            ),
            "{invoke}"
        );
        assert_eq!(
            (&ok["f"], &ok["type"]),
            (&Value::from("read-stock"), &Value::from("ok"))
        );
        assert!(
            ok["time"].as_u64() >= invoke["time"].as_u64(),
            "{invoke} {ok}"
        );
        let stock = ok["value"].as_i64().unwrap();
        assert!(
            stock != last && stock < 20,
            "a change, down: {last} then {ok}"
        );
        last = stock;
    }
    let (_, again, said) = judge(&file);
    assert_same_judgement(&live, &again);
    // As an older lockctl wrote it: no observer.
    let older: Vec<Value> = ops
        .iter()
        .filter(|o| o["process"] != "observer")
        .enumerate()
        .map(|(i, o)| {
            let mut o = o.clone();
            o["index"] = i.into();
            o
        })
        .collect();
    let old = dir.path().join("older.jsonl");
    write_lines(&old, &older);
    let (_, before, _) = judge(&old);
    assert_same_judgement(&again, &before);
    for (history, from) in [
        (&file, "read by lockctl"),
        (&old, "as the answers reported"),
    ] {
        let page = dir.path().join("page.html");
        let out = lockctl(
            "redis://127.0.0.1:1",
            &[
                "judge",
                history.to_str().unwrap(),
                "--export-html",
                page.to_str().unwrap(),
            ],
        );
        assert_eq!(code(&out), 3, "{said}");
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.contains(&format!("the stock, {from}")), "{html}");
    }
}

#[test]
fn a_history_records_one_run() {
    let redis = RedisServer::start();
    let out = lockctl(
        &redis.url(),
        &[
            "hammer",
            "--strategy",
            "lock,atomic",
            "--stock",
            "5",
            "--history",
            "/tmp/x.jsonl",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("one strategy"), "{}", stderr(&out));
}

/// A history line is read no further than a cap (1 MiB, and room for the last line's ledger
/// as the operations before it need): one of the cap and a byte is refused with exit 2, naming
/// the line and the cap (a 200 MB line used to cost a gigabyte); a ledger of 120,000 sales,
/// more than 1 MiB on one line after the operations that account for it, is judged.
#[test]
fn a_line_beyond_the_cap_is_refused_and_a_ledger_its_operations_account_for_is_judged() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 1 << 20;
    let long = dir.path().join("long.jsonl");
    let mut text = String::from("{\"type\":\"info\",\"f\":\"facts\",\"value\":\"");
    text.push_str(&"x".repeat(cap + 1 - text.len() - 2));
    text.push_str("\"}\n");
    assert_eq!(
        text.len(),
        cap + 2,
        "a line of the cap and one byte, then its end"
    );
    std::fs::write(&long, &text).unwrap();
    let (exit, _, said) = judge(&long);
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("line 1: longer than 1048576 bytes"), "{said}");
    // One byte less is a line of the cap: read, and refused only for what it says.
    std::fs::write(&long, text.replacen("xx", "x", 1)).unwrap();
    let (exit, _, said) = judge(&long);
    assert_eq!(exit, 2, "{said}");
    assert!(!said.contains("longer than"), "{said}");

    let n = 120_000u64;
    let mut text = serde_json::json!({"type": "info", "f": "facts", "process": "lockctl",
        "time": 0, "index": 0, "value": {"version": 1, "stock_before": n,
        "elapsed_ns": 1_000_000_000u64, "client_cpu_ns": null, "users": null,
        "server": "127.0.0.1:1", "client_max_rss_mb": null,
        "facts": {"concurrency": 1, "initial_stock": n, "mode": "threads", "qty": 1,
            "redlock_nodes": null, "requests": n, "run_id": "hbig", "seeded": true,
            "sku": "big", "strategy": "atomic", "ttl_ms": 5000, "wait_ms": 5000,
            "watchdog": false, "work_ms": 0}}})
    .to_string();
    text.push('\n');
    let mut ledger = String::new();
    for i in 0..n {
        let t = 1000 + 2 * i;
        text.push_str(&format!(
            "{{\"type\":\"invoke\",\"f\":\"buy\",\"process\":0,\"time\":{t},\"index\":0,\"value\":{{\"request\":{i}}}}}\n{{\"type\":\"ok\",\"f\":\"buy\",\"process\":0,\"time\":{},\"index\":0,\"value\":{{\"request\":{i},\"answer\":\"bought\",\"latency_ns\":1,\"remaining\":{}}}}}\n",
            t + 1,
            n - i - 1
        ));
        ledger.push_str(&format!("{}[{i},1]", if i == 0 { "" } else { "," }));
    }
    let read = format!(
        "{{\"type\":\"info\",\"f\":\"read\",\"process\":\"lockctl\",\"time\":{},\"index\":0,\"value\":{{\"error\":null,\"findings\":[],\"http\":null,\"interrupted\":null,\"ledger\":[{ledger}],\"notes\":[],\"pipeline\":null,\"restart\":\"no\",\"stock_after\":0,\"unjudged\":null,\"went_up\":null}}}}\n",
        1000 + 2 * n
    );
    assert!(read.len() > cap, "the ledger's line is beyond 1 MiB");
    text.push_str(&read);
    let big = dir.path().join("big.jsonl");
    std::fs::write(&big, text).unwrap();
    let (exit, v, said) = judge(&big);
    assert_eq!(exit, 0, "{}", &said[..said.len().min(2000)]);
    assert_eq!(
        v["runs"][0]["ledger_orders"],
        n,
        "{}",
        &said[..said.len().min(2000)]
    );
}
