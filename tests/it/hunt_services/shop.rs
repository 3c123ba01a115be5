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
    assert!(replay.contains("{token}") && replay.contains("LOCKCTL_"), "{}", r.2);
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

/// A lease of 250 ms, so that today's pauses (0.3 to 1.5 s) outlive it; a lease of seconds
/// needs faults as long as the leases (`--fault-ms`).
#[test]
fn a_lock_holder_stalled_past_its_lease_is_found_and_the_fenced_twin_passes() {
    let redis = RedisServer::start();
    let db = shop_db();
    let faults = [
        "--nemesis",
        "pause-worker",
        "--failed-if",
        "json:/code=50003",
    ];
    let bug = hunt_shop_with(
        &redis,
        &db,
        "leased",
        "SHOP_LEASE_MS=250",
        &[&["--budget", "40s"][..], &faults, &NUMBERED].concat(),
    );
    found(&bug, "oversold");
    passed(&hunt_shop_with(
        &redis,
        &db,
        "fenced",
        "SHOP_LEASE_MS=250",
        &[&["--budget", "12s"][..], &faults, &NUMBERED].concat(),
    ));
}
