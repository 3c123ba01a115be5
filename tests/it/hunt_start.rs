//! `lockctl hunt`'s start and its ends: readiness (`--ready`), facts from a file (`--facts`,
//! `hunt init`), the verdict for CI (`--junit`).

use serde_json::Value;

use crate::hunt::{require_php_extensions, served};
use crate::support::{RedisServer, code, lockctl, stderr, stdout};

fn said(out: &std::process::Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", stdout(out), stderr(out))
}

/// A system whose port accepts connections seconds before it can sell (a proxy answering 502
/// in front of a service still starting): with `--ready` the hunt waits for its readiness
/// URL to answer 2xx, and no round is spent on the proxy's 502s.
#[test]
fn ready_waits_for_a_2xx_and_no_round_is_judged_on_a_starting_systems_502s() {
    require_php_extensions();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let hunt = |ready: bool| {
        let flag = dir.path().join(format!("up-{ready}"));
        let (port, url, serve) = served(&redis, "tests/fixtures/hunt/warming_up.php", 4);
        let serve = format!(
            "(sleep 3; touch {f}) & READY_FILE={f} {serve}",
            f = flag.display()
        );
        let ready_url = format!("http://127.0.0.1:{port}/tests/fixtures/hunt/ready.php");
        let mut args = vec![
            "--json",
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "6s",
            "--stock",
            "3",
            "-n",
            "6",
            "--heal-ms",
            "500",
        ];
        if ready {
            args.extend(["--ready", &ready_url]);
        }
        let out = lockctl(&redis.url(), &args);
        let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null);
        (code(&out), v, said(&out))
    };
    // The port alone: the first rounds meet the 502s.
    let (_, v, text) = hunt(false);
    assert!(v["unjudged_rounds"].as_u64().unwrap() >= 1, "{text}");
    let (exit, v, text) = hunt(true);
    assert_eq!(exit, 0, "{text}");
    assert_eq!(v["unjudged_rounds"], 0, "{text}");
    assert!(v["judged"].as_u64().unwrap() >= 1, "{text}");
}
