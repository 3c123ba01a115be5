//! The Flask shop's four bugs, each beside its correct twin, hunted as a user would: users who
//! log in for a bearer token, JSON business codes, integer ids, order numbers the server makes.
//! Bugs (3) and (4) need faults: a killed queue worker, a lock holder stalled past its lease.

use super::*;

/// The shop's order number is the order id the orders check matches rows by.
const NUMBERED: [&str; 2] = ["--order-from", "json:/order_no"];

#[test]
fn a_login_with_the_wrong_password_is_a_usage_error_naming_its_answer() {
    let redis = RedisServer::start();
    let db = shop_db();
    let (exit, _, said) = hunt_shop(
        &redis,
        &db,
        "guarded",
        &[
            "--login",
            r#"POST http://127.0.0.1:{port}/api/login {"username":{user},"password":"wrong-pw"}"#,
            "--budget",
            "5s",
        ],
    );
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("the login of user '"), "{said}");
    assert!(
        said.contains(r#"answered HTTP 200 with no token at json:/token or json:/access_token or json:/data/token or json:/data/access_token: '{\"code\":40101,\"msg\":\"wrong password\"}'"#),
        "{said}"
    );
    assert!(!said.contains("wrong-pw"), "the password was shown: {said}");
}

#[test]
fn a_token_pattern_that_finds_nothing_in_the_login_answer_is_a_usage_error() {
    let redis = RedisServer::start();
    let db = shop_db();
    let (exit, _, said) = hunt_shop(
        &redis,
        &db,
        "guarded",
        &["--token", "json:/jwt", "--budget", "5s"],
    );
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("with no token at json:/jwt: '{"), "{said}");
    // The token the answer did hold is a secret: not shown.
    assert!(!said.contains("\"token\""), "{said}");
}

#[test]
fn users_who_log_in_buy_with_their_tokens_and_the_replay_line_hides_the_password() {
    let redis = RedisServer::start();
    let db = shop_db();
    let r = hunt_shop(
        &redis,
        &db,
        "guarded",
        &[&["--budget", "6s", "--nemesis", "none"][..], &NUMBERED].concat(),
    );
    passed(&r);
    let replay = r.1["replay"].to_string();
    assert!(
        replay.contains("{token}") && replay.contains("LOCKCTL_"),
        "{}",
        r.2
    );
}

#[test]
fn two_clicks_of_one_user_that_pass_an_unlocked_check_are_found_and_the_locked_twin_passes() {
    let redis = RedisServer::start();
    let db = shop_db();
    let users = ["--users", "3", "--limit", "1"];
    let bug = hunt_shop(
        &redis,
        &db,
        "double_click",
        &[&["--budget", "40s"][..], &users, &NUMBERED].concat(),
    );
    found(&bug, "the per-user limit of 1 was broken");
    passed(&hunt_shop(
        &redis,
        &db,
        "guarded",
        &[&["--budget", "8s"][..], &users, &NUMBERED].concat(),
    ));
}

#[test]
fn an_order_queue_whose_killed_worker_loses_its_batch_is_found_and_the_reliable_twin_passes() {
    let redis = RedisServer::start();
    let db = shop_db();
    let faults = ["--nemesis", "kill-worker"];
    let bug = hunt_shop(
        &redis,
        &db,
        "queued",
        &[&["--budget", "40s"][..], &faults, &NUMBERED].concat(),
    );
    found(&bug, "lost orders");
    passed(&hunt_shop(
        &redis,
        &db,
        "queued_reliable",
        &[&["--budget", "12s"][..], &faults, &NUMBERED].concat(),
    ));
}

/// A lock with a lease of seconds (the shop's 2 s) around a read-then-write: a holder stalled
/// past it writes over the next holder's sale.
#[test]
fn a_lock_holder_stalled_past_its_lease_is_found_and_the_fenced_twin_passes() {
    // The shop's own lease of 2 s, learned by the hunt, which holds some pauses past it; a
    // pause stops half the web tier's workers, the lock's holder among them half the time.
    let redis = RedisServer::start();
    let db = shop_db();
    let faults = [
        "--nemesis",
        "pause-worker",
        "--failed-if",
        "json:/code=50003",
    ];
    // scripts/hunt-trials measures how soon it is found (the rows of docs/hunt.md); the test only
    // asks that it is, with room for a loaded CI machine (5 runs here: 17 to 58 s in all).
    let bug = hunt_shop(
        &redis,
        &db,
        "leased",
        &[&["--budget", "120s"][..], &faults, &NUMBERED].concat(),
    );
    found(&bug, "oversold");
    passed(&hunt_shop(
        &redis,
        &db,
        "fenced",
        &[&["--budget", "12s"][..], &faults, &NUMBERED].concat(),
    ));
}

/// The book's worked example (docs/hunt.md): its facts file, as checked in, with this test's ports and
/// database in place of the book's; the stock race FAILs and its twin PASSes.
#[test]
fn the_readmes_facts_file_finds_the_stock_race_and_passes_its_twin() {
    let redis = RedisServer::start();
    let db = shop_db();
    let facts =
        std::fs::read_to_string(Path::new(ROOT).join("tests/fixtures/hunt/flask_shop.toml"))
            .unwrap();
    let python = flask_python();
    for (mode, budget, exit) in [("check_then_act", "40s", 3), ("guarded", "8s", 0)] {
        let port = free_port().to_string();
        let text = facts
            .replace("17501", &redis.port.to_string())
            .replace("17580", &port)
            .replace("3306/flask_shop", &format!("3306/{}", db.name))
            .replace("SHOP_DB=flask_shop", &format!("SHOP_DB={}", db.name));
        let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::fs::write(file.path(), text).unwrap();
        let out = crate::support::lockctl_env(
            &redis.url(),
            &[
                "hunt",
                "--facts",
                file.path().to_str().unwrap(),
                "--budget",
                budget,
                "--seed",
                "1",
            ],
            &[("SHOP_MODE", mode), ("PYTHON", python.to_str().unwrap())],
        );
        let said = format!("{mode}: {}\n{}", stdout(&out), stderr(&out));
        assert_eq!(code(&out), exit, "{said}");
        assert!(!said.contains("hunter2"), "{said}");
        let verdict = if exit == 3 {
            "verdict   FAIL"
        } else {
            "verdict   PASS"
        };
        assert!(stdout(&out).contains(verdict), "{said}");
        assert!(stdout(&out).contains("hunt --facts "), "{said}");
    }
}

/// Tokens made elsewhere, one user a line (tab-separated or JSON): the hunt's users are the
/// file's, each request carrying its user's token; `hammer --url` takes the file too.
#[test]
fn users_from_a_file_buy_with_their_own_tokens_on_hunt_and_hammer() {
    let redis = RedisServer::start();
    let db = shop_db();
    let script = Path::new(ROOT).join("tests/fixtures/hunt/flask_shop.py");
    let token = |user: u64| {
        let out = std::process::Command::new(flask_python())
            .arg(&script)
            .args(["token", &user.to_string()])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let file = tempfile::NamedTempFile::new().unwrap();
    let lines = format!(
        "# made by the shop's admin tool\n2000000001\t{}\n{{\"user\": 2000000002, \"token\": \"{}\"}}\n2000000003\t{}\n",
        token(2_000_000_001),
        token(2_000_000_002),
        token(2_000_000_003)
    );
    std::fs::write(file.path(), lines).unwrap();
    let path = file.path().to_str().unwrap();
    let history = tempfile::NamedTempFile::new().unwrap();
    // No --login: the file's users, three of them, with their tokens.
    let r = hunt_shop(
        &redis,
        &db,
        "guarded",
        &[
            "--users-file",
            path,
            "--nemesis",
            "none",
            "--budget",
            "5s",
            "--history",
            history.path().to_str().unwrap(),
            "--login",
            "",
        ],
    );
    passed(&r);
    let lines = std::fs::read_to_string(history.path()).unwrap();
    // Every request carried a token the shop took: no 401.
    assert!(!lines.contains("HTTP 401"), "{lines}");
    // The orders are the file's users', and only theirs.
    let count = |sql: &str| {
        let out = std::process::Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-N", "-e"])
            .arg(format!("USE {}; {sql}", db.name))
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let theirs = "user_id BETWEEN 2000000001 AND 2000000003";
    assert!(
        count(&format!("SELECT COUNT(*) FROM orders WHERE {theirs}")) >= 1,
        "{}",
        r.2
    );
    assert_eq!(
        count(&format!("SELECT COUNT(*) FROM orders WHERE NOT ({theirs})")),
        0,
        "{}",
        r.2
    );
    // hammer --url takes the file too.
    let port = free_port();
    let serve = shop_serve(&redis, &db, "guarded", port, "");
    let _shop = crate::support::Killed(
        std::process::Command::new("sh")
            .args(["-c", &serve])
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/api/seckill");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the shop never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = lockctl(
        &redis.url(),
        &[
            "hammer",
            "--url",
            &url,
            "--method",
            "POST",
            "--header",
            "Authorization: Bearer {token}",
            "--body",
            r#"{"goods_id":7}"#,
            "--users-file",
            path,
            "--json",
            "-n",
            "6",
        ],
    );
    let said = format!("{}\n{}", stdout(&out), stderr(&out));
    // Its stock is in SQL, which hammer does not read: a run that measures (nothing judged),
    // every request answered 200 (one without its user's token is answered 401, an error).
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["errors"], 0, "{said}");
    assert_eq!(v["answered"], 6, "{said}");
}

/// A round of more users than log in before it (64): the rest log in when the round reaches
/// them, and every request carries its own user's token (the shop answers 401 without one).
#[test]
fn users_past_the_first_64_log_in_when_the_round_reaches_them() {
    let redis = RedisServer::start();
    let db = shop_db();
    let history = tempfile::NamedTempFile::new().unwrap();
    let r = hunt_shop(
        &redis,
        &db,
        "guarded",
        &[
            "--nemesis",
            "none",
            "--budget",
            "3s",
            "-n",
            "150",
            "--stock",
            "200",
            "-c",
            "4",
            "--history",
            history.path().to_str().unwrap(),
        ],
    );
    passed(&r);
    let lines = std::fs::read_to_string(history.path()).unwrap();
    assert!(!lines.contains("HTTP 401"), "{lines}");
    assert!(!lines.contains("the login of user"), "{lines}");
    // The round's 150 requests were 150 users: those past the first 64 logged in late.
    let users: std::collections::HashSet<String> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|op| op["type"] == "ok")
        .filter_map(|op| op["value"]["user"].as_str().map(str::to_string))
        .collect();
    assert!(users.len() > 64, "{} users answered: {}", users.len(), r.2);
}

/// Units, not answers, on the Flask shop (issue 50, item 1): a lease of 150 ms that the
/// work outlives half the time (20 to 270 ms), and a holder whose release finds the lock gone
/// answers HTTP 503 `{"code":50005,"msg":"lock lost"}` after its row was written. No pattern
/// classifies that answer, so counted by answers its row "may have" been bought; the rows
/// hold more units than the stock gave up, and that is an oversell. The fenced twin answers
/// the same 503 having written nothing, and passes.
#[test]
fn rows_written_behind_a_503_lock_lost_beyond_the_stock_taken_are_an_oversell() {
    let redis = RedisServer::start();
    let db = shop_db();
    let env = "SHOP_LEASE_MS=150 SHOP_WORK_JITTER_MS=250";
    let quiet = ["--nemesis", "none"];
    let bug = hunt_shop_with(
        &redis,
        &db,
        "leased_503",
        env,
        &[&["--budget", "40s"][..], &quiet, &NUMBERED].concat(),
    );
    found(&bug, "oversold by ");
    assert!(bug.2.contains("whatever the answers said"), "{}", bug.2);
    passed(&hunt_shop_with(
        &redis,
        &db,
        "fenced_503",
        env,
        &[&["--budget", "10s"][..], &quiet, &NUMBERED].concat(),
    ));
}

/// One receipt for many buyers on the Flask shop (issue 50, item 2): every sale answered
/// `"order_no":"SO-SAME"` (or a number from a 250 ms clock) over one row kept by INSERT
/// IGNORE. Each answer found a row by its number and the hunt passed; two "bought" answers
/// naming one number are now a finding, and the number owes each of them its unit.
#[test]
fn one_order_number_handed_to_several_buyers_is_found_on_the_flask_shop() {
    let redis = RedisServer::start();
    let db = shop_db();
    for mode in ["same_order_no", "clock_order_no"] {
        let bug = hunt_shop(
            &redis,
            &db,
            mode,
            &[&["--budget", "40s", "--nemesis", "none"][..], &NUMBERED].concat(),
        );
        found(&bug, "one order id answered to several buyers");
    }
}

/// A success pattern that matches nothing (issue 50, item 5): the shop answers `{"code":0}`,
/// and `json:/code="0"` asks for a string. Every sale went unclassified ("may have bought"),
/// the stock fell within that bound, and the hunt passed hundreds of requests with none
/// classified. Now nothing was judged: exit 1, naming an answer no pattern matched.
#[test]
fn a_bought_pattern_that_matches_no_answer_is_nothing_judged_not_a_pass() {
    let redis = RedisServer::start();
    let db = shop_db();
    let (exit, v, said) = hunt_shop(
        &redis,
        &db,
        "guarded",
        &[
            &["--budget", "6s", "--nemesis", "none"][..],
            &["--bought-if", r#"json:/code="0""#],
        ]
        .concat(),
    );
    assert_eq!(exit, 1, "{said}");
    assert_ne!(v["verdict"], "pass", "{said}");
    assert!(
        said.contains(r#"no answer was classified \"bought\""#),
        "{said}"
    );
    assert!(
        said.contains(r#"matched no pattern: '{\"code\":0"#),
        "{said}"
    );
}
