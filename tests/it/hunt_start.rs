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

/// The facts in a TOML file, the command line winning over it: the hunt runs on them, the
/// replay line names the file (and only the flags typed), `--junit` writes the verdict, and a
/// key that is no flag is a usage error naming the flag it was probably meant to be.
#[test]
fn facts_come_from_a_file_the_command_line_wins_and_junit_carries_the_verdict() {
    require_php_extensions();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let facts = dir.path().join("hunt.toml");
    let junit = dir.path().join("hunt.xml");
    let (_, url, serve) = served(&redis, "examples/tutorial-php/nolock.php", 4);
    let toml_str = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    std::fs::write(
        &facts,
        format!(
            "# the tutorial's code without its lock\nurl = {}\npreset = \"tutorial\"\nserve = {}\nnemesis = \"none\"\nbudget = \"1s\"\nstock = 3\nrequests = 12\nheader = [\"X-Trace: {{n}}\"]\n",
            toml_str(&url),
            toml_str(&serve)
        ),
    )
    .unwrap();
    let f = facts.to_str().unwrap();
    let j = junit.to_str().unwrap();
    // The file's budget is 1 s; the command line's 30 s wins (the first oversell ends it).
    let out = lockctl(
        &redis.url(),
        &[
            "--json", "hunt", "--facts", f, "--budget", "30s", "--junit", j,
        ],
    );
    assert_eq!(code(&out), 3, "{}", said(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let replay = v["replay"].as_str().unwrap();
    assert!(replay.contains(&format!("--facts {f}")), "{replay}");
    assert!(replay.contains("--budget 30s"), "{replay}");
    assert!(
        !replay.contains("--serve") && !replay.contains("nolock"),
        "{replay}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testsuite name=\"lockctl hunt\" tests=\"1\" failures=\"1\""),
        "{xml}"
    );
    assert!(
        xml.contains("<failure message=\"") && xml.contains("oversold"),
        "{xml}"
    );

    // A key that is no hunt flag: exit 2, naming it and the nearest flag.
    std::fs::write(&facts, "stock-qurey = \"SELECT 1\"\n").unwrap();
    let out = lockctl(&redis.url(), &["hunt", "--facts", f]);
    assert_eq!(code(&out), 2, "{}", said(&out));
    assert!(
        stderr(&out).contains("'stock-qurey' is not a hunt flag"),
        "{}",
        said(&out)
    );
    assert!(
        stderr(&out).contains("did you mean 'stock-query'"),
        "{}",
        said(&out)
    );
    // Not TOML: exit 2 naming the file.
    std::fs::write(&facts, "url = \n").unwrap();
    let out = lockctl(&redis.url(), &["hunt", "--facts", f]);
    assert_eq!(code(&out), 2, "{}", said(&out));
    assert!(
        stderr(&out).contains(&format!("--facts '{f}' is not TOML")),
        "{}",
        said(&out)
    );
}

/// `lockctl hunt init` prints every fact commented out, with an example: TOML as it stands,
/// and each example line a valid fact once uncommented.
#[test]
fn hunt_init_prints_a_commented_template_of_every_fact() {
    let out = lockctl("redis://127.0.0.1:1", &["hunt", "init"]);
    assert_eq!(code(&out), 0, "{}", said(&out));
    let text = stdout(&out);
    for key in [
        "url",
        "stock-query",
        "ready",
        "request-timeout-ms",
        "junit",
        "header",
        "login",
        "token",
        "users-file",
    ] {
        assert!(
            text.contains(&format!("\n# {key} = ")),
            "no {key} in:\n{text}"
        );
    }
    // Uncommented, the examples are TOML.
    let uncommented: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| regex::Regex::new(r"^[a-z-]+ = ").unwrap().is_match(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(uncommented.lines().count() > 30, "{uncommented}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("all.toml");
    std::fs::write(&file, &uncommented).unwrap();
    // Every key is a flag: whatever clap then says of the values, it is not a facts error.
    let out = lockctl(
        "redis://127.0.0.1:1",
        &["hunt", "--facts", file.to_str().unwrap()],
    );
    let err = stderr(&out);
    for facts_error in [
        "is not a hunt flag",
        "is not TOML",
        "must be",
        "is a switch",
        "takes one",
    ] {
        assert!(!err.contains(facts_error), "{}", said(&out));
    }
}
