//! `hammer --url` against real endpoints: the tutorial's own PHP (`examples/tutorial-php/`),
//! served by `php -S` on a free port and talking to a private redis-server, and versions of
//! it broken in each way the verdict must catch.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use serde_json::Value;

use crate::support::{
    HAMMER_FIELDS, RedisServer, Streams, accounted, code, free_port, json, lockctl, run_ok, signal,
    spawn_lockctl_with, spawn_tool, stderr, stdout,
};

pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tutorial-php");

/// `php -S` serving the fixtures with 8 workers, its scripts pointed at `redis` (REDIS_PORT),
/// in a process group of its own so that Drop kills the workers with it.
pub(crate) struct Php {
    child: Child,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Php {
    pub(crate) fn start(redis: &RedisServer) -> Php {
        require_php_with_redis();
        let mut last_log = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let log = dir.path().join("php.log");
            let port = free_port();
            let out = std::fs::File::create(&log).unwrap();
            let child = spawn_tool(
                Command::new("php")
                    .args(["-S", &format!("127.0.0.1:{port}"), "-t", FIXTURES])
                    .env("PHP_CLI_SERVER_WORKERS", "8")
                    .env("REDIS_PORT", redis.port.to_string())
                    .process_group(0)
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out),
            );
            let php = Php {
                child,
                port,
                _dir: dir,
            };
            if php.wait_ready(Duration::from_secs(10)) {
                return php;
            }
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
            if !last_log.contains("Address already in use") {
                break;
            }
        }
        panic!("php -S never accepted a connection; its log:\n{last_log}");
    }

    fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Php {
    fn drop(&mut self) {
        // The whole group: php -S forks its workers.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// The tests need `php` with the redis extension; without it they fail saying what to install.
fn require_php_with_redis() {
    let modules = stdout(&run_ok(Command::new("php").arg("-m")));
    assert!(
        modules
            .lines()
            .any(|l| l.trim().eq_ignore_ascii_case("redis")),
        "php has no redis extension: install it (apt-get install -y php-redis)"
    );
}

/// `lockctl --json hammer --url URL args...` against `redis`.
fn hammer(redis: &RedisServer, url: &str, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["--json", "hammer", "--url", url];
    all.extend_from_slice(args);
    let out = lockctl(&redis.url(), &all);
    let text = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    (code(&out), json(&out), text)
}

fn stock(redis: &RedisServer, sku: &str) -> i64 {
    redis.raw().get(format!("item:stock:{sku}")).unwrap()
}

fn violations(v: &Value) -> String {
    v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_tutorials_own_code_passes_and_busy_answers_are_not_errors() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("run_demo.php?sku={sku}");
    let args = [
        "--preset", "tutorial", "-n", "100", "-c", "10", "--stock", "10",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 0, "{text}");
    assert_eq!(v["verdict"], "pass", "{text}");
    for f in HAMMER_FIELDS {
        assert!(v.get(f).is_some(), "no {f} in {v}");
    }
    assert_eq!(
        (v["strategy"].as_str(), v["mode"].as_str()),
        (Some("endpoint"), Some("http"))
    );
    assert!(v["ledger_qty"].is_null());
    assert_eq!(v["errors"], 0, "{text}");
    assert_eq!(accounted(&v), 100);
    assert!(
        v["busy"].as_u64().unwrap() > 0,
        "10 at a time, the tutorial turns most away: {text}"
    );
    // What the endpoint announced is what left the stock, and Redis agrees with the report.
    let left = stock(&redis, "sku_886");
    assert_eq!(v["final_stock"], left);
    assert_eq!(v["bought"].as_i64().unwrap(), 10 - left);
    assert_eq!(v["http"]["stock_key"], "item:stock:sku_886");
    assert_eq!(v["http"]["load"], "closed");
}

#[test]
fn the_homework_oversells_and_fails_with_exit_3() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    // Requests on a schedule keep arriving while each 150 ms holder outlives its 100 ms lease.
    let url = php.url("homework.php?sku={sku}");
    let args = [
        "--preset", "tutorial", "-n", "300", "--rate", "200", "--stock", "3",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 3, "{text}");
    assert_eq!(v["verdict"], "fail");
    assert!(v["oversold"].as_u64().unwrap() > 0, "{text}");
    assert!(stock(&redis, "sku_886") < 0, "Redis itself went negative");
    assert!(violations(&v).contains("the stock went negative"), "{text}");
}

#[test]
fn an_endpoint_without_a_lock_is_caught() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("nolock.php?sku={sku}");
    let args = [
        "--preset", "tutorial", "-n", "100", "-c", "10", "--stock", "10",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 3, "{text}");
    assert!(v["oversold"].as_u64().unwrap() > 0, "{text}");
    assert!(violations(&v).contains("oversold by"), "{text}");
}

#[test]
fn bought_without_deducting_is_a_phantom_sale() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("phantom.php?sku={sku}&n={n}");
    let args = [
        "--preset", "tutorial", "-n", "60", "-c", "4", "--stock", "1000",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 3, "{text}");
    let announced = v["sold_qty"].as_i64().unwrap();
    let consumed = 1000 - stock(&redis, "sku_886");
    assert!(announced > consumed, "{text}");
    assert!(
        violations(&v).contains(&format!(
            "phantom sales: the endpoint answered \"bought\" for {announced} units but the stock fell by only {consumed}"
        )),
        "{text}"
    );
}

#[test]
fn deducting_but_answering_sold_out_is_a_lost_order() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("ghost.php");
    let args = [
        "--preset",
        "tutorial",
        "-n",
        "60",
        "-c",
        "4",
        "--stock",
        "1000",
        "--sku",
        "{g-1}",
        "--method",
        "POST",
        "--header",
        "Content-Type: application/x-www-form-urlencoded",
        "--header",
        "X-Request-N: {n}",
        "--body",
        "sku={sku}",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 3, "{text}");
    let consumed = 1000 - stock(&redis, "{g-1}");
    assert!(consumed > v["sold_qty"].as_i64().unwrap(), "{text}");
    let found = violations(&v);
    assert!(found.contains("lost orders (ghost deductions)"), "{text}");
    // Stock was left, so every "sold out" it said was wrong too.
    assert!(found.contains("under-sold"), "{text}");
}

/// The liar answers requests 0 to 39 "sold out" without looking, then sells all 50 units: the
/// stock at the end (0) cannot show it, the order of the answers does. One connection, so
/// every stock unit is sold and the run is the same each time.
#[test]
fn a_sold_out_answered_before_a_later_sale_was_sent_is_under_selling() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("liar.php?sku={sku}&n={n}");
    let args = [
        "--preset", "tutorial", "-n", "100", "-c", "1", "--stock", "50",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(stock(&redis, "sku_886"), 0, "all of it sold: {text}");
    assert_eq!(
        (v["bought"].as_u64(), v["sold_out"].as_u64()),
        (Some(50), Some(50))
    );
    assert_eq!(exit, 3, "{text}");
    assert_eq!(v["verdict"], "fail");
    // The first false answer and the last sale, each named with its time from the start.
    let found = violations(&v);
    assert!(
        found.contains("under-sold: request 0 was answered \"sold out\" at ")
            && found.contains("before request 89 was sent (at "),
        "{text}"
    );

    // Four connections: whichever of the first lies was answered first, it came before the
    // last sale was sent.
    let (exit, v, text) = hammer(
        &redis,
        &url,
        &[
            "--preset", "tutorial", "-n", "400", "-c", "4", "--stock", "50",
        ],
    );
    assert_eq!(exit, 3, "{text}");
    let found = violations(&v);
    let first = found
        .split("under-sold: request ")
        .nth(1)
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(n, _)| n.parse::<u64>().ok());
    assert!(first.is_some_and(|n| n < 40), "{text}");
}

/// The negative control: the tutorial's own code answers "sold out" and "bought" side by side
/// at the end of the stock, on eight connections at once, and is not called a liar for it:
/// only answers strictly ordered in time count.
#[test]
fn sold_outs_beside_the_last_sales_of_a_correct_endpoint_still_pass() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("run_demo.php?sku={sku}");
    for round in 0..3 {
        let args = [
            "--preset", "tutorial", "-n", "300", "-c", "8", "--stock", "40",
        ];
        let (exit, v, text) = hammer(&redis, &url, &args);
        assert_eq!(exit, 0, "round {round}: {text}");
        assert_eq!(v["verdict"], "pass", "round {round}: {text}");
        if v["sold_out"].as_u64() > Some(0) && v["bought"].as_u64() > Some(0) {
            return;
        }
    }
    panic!("three rounds and never both sold out and bought answers: the control proved nothing");
}

#[test]
fn the_open_model_counts_latency_from_each_requests_moment() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("slow.php?sku={sku}");
    // 30 requests due within 0.3 s, two connections, at least 100 ms each: the last answer
    // cannot come before 15 x 100 ms, so the last request, due at 0.29 s, waited over 1.2 s.
    let args = [
        "--preset", "tutorial", "-n", "30", "-c", "2", "--rate", "100", "--stock", "100",
    ];
    let (exit, v, text) = hammer(&redis, &url, &args);
    assert_eq!(exit, 0, "{text}");
    let http = &v["http"];
    assert_eq!(http["load"], "open");
    assert_eq!(http["rate_rps"], 100.0);
    let latency_max = v["latency_ms"]["max"].as_f64().unwrap();
    let service = &http["service_ms"];
    assert!(latency_max >= 1200.0, "{text}");
    assert!(service["p50"].as_f64().unwrap() >= 100.0, "{text}");
    assert!(service["max"].as_f64().unwrap() < latency_max, "{text}");
    assert!(http["late"].as_u64().unwrap() >= 20, "{text}");
    assert!(http["max_lag_ms"].as_f64().unwrap() >= 1000.0, "{text}");
}

#[test]
fn an_endpoint_that_sells_nothing_has_nothing_to_judge() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let (exit, v, text) = hammer(&redis, &php.url("static.txt"), &["-n", "50", "-c", "5"]);
    assert_eq!(exit, 1, "{text}");
    assert_eq!(v["verdict"], "unknown");
    assert!(
        v["unknown_because"]
            .as_str()
            .unwrap()
            .starts_with("nothing to judge")
    );
    assert_eq!(
        (v["answered"].as_u64(), v["errors"].as_u64()),
        (Some(50), Some(0))
    );
    let keys: Vec<String> = redis.raw().keys("*").unwrap();
    assert!(
        keys.is_empty(),
        "a run with nothing to judge wrote {keys:?}"
    );
}

#[test]
fn an_endpoint_that_is_down_or_slower_than_the_request_timeout_ends_the_run_unknown() {
    let redis = RedisServer::start();
    let nobody = format!("http://127.0.0.1:{}/run_demo.php", free_port());
    let args = ["--preset", "tutorial", "-n", "20", "--stock", "5"];
    let (exit, v, text) = hammer(&redis, &nobody, &args);
    assert_eq!(exit, 1, "{text}");
    assert_eq!(v["verdict"], "unknown");
    assert_eq!(v["errors_by_kind"]["refused"], 20, "{text}");
    assert_eq!(v["final_stock"], 5);

    let php = Php::start(&redis);
    let slow = php.url("slow.php?sku={sku}");
    let run = |limits: &[&str]| {
        let mut args = vec![
            "--json", "hammer", "--url", &slow, "--preset", "tutorial", "-n", "4", "--stock", "5",
        ];
        args.extend_from_slice(limits);
        json(&lockctl(&redis.url(), &args))
    };
    // --timeout-ms is Redis's: it does not cut an HTTP request of 100 ms.
    let v = run(&["--timeout-ms", "30"]);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    let v = run(&["--request-timeout-ms", "30"]);
    assert_eq!(v["verdict"], "unknown", "{v}");
    assert_eq!(v["errors_by_kind"]["timed_out"], 4, "{v}");
    assert_eq!(
        v["indeterminate"], 4,
        "sent, then no answer: they may have bought"
    );
    assert!(
        v["first_error"]
            .as_str()
            .unwrap()
            .contains("--request-timeout-ms"),
        "{v}"
    );
}

/// A run wider than the open files this process may hold is refused before anything is
/// written, naming -c and the limit: past it, connects fail one by one (EMFILE), and a
/// healthy endpoint would look down. A soft limit below what the run needs is raised as far
/// as the hard limit allows, and then the run goes.
#[test]
fn a_run_wider_than_the_open_file_limit_is_refused_or_the_limit_raised() {
    use std::os::unix::process::CommandExt;
    let redis = RedisServer::start();
    let limited = |soft: u64, hard: u64, args: &[&str]| {
        let mut cmd = crate::support::lockctl_command(&redis.url(), args);
        // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &lim) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
        cmd.output().unwrap()
    };
    let nobody = format!("http://127.0.0.1:{}/run_demo.php?sku={{sku}}", free_port());
    for args in [
        vec![
            "hammer", "--url", &nobody, "--preset", "tutorial", "-c", "2000", "-n", "4000",
            "--stock", "5",
        ],
        vec![
            "hammer",
            "--sku",
            "fd",
            "-c",
            "2000",
            "-n",
            "4000",
            "--stock",
            "5",
            "--strategy",
            "atomic",
            // A connection a buyer; on tasks (atomic's default) they share a few.
            "--mode",
            "threads",
        ],
    ] {
        let out = limited(100, 100, &args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(
            err.contains("2000 concurrent requests need about")
                && err.contains("may open 100")
                && err.contains("lower -c to at most"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        redis.raw().keys::<_, Vec<String>>("*").unwrap(),
        Vec::<String>::new()
    );
    // Of several strategies, one too wide is refused before the first one writes anything.
    // (atomic on threads: a connection a buyer; lock buyers past 16 are tasks, and need 16.)
    let args = [
        "hammer",
        "--mode",
        "threads",
        "--strategy",
        "batch,atomic",
        "-c",
        "40",
        "-n",
        "400",
        "--stock",
        "300",
    ];
    let out = limited(64, 64, &args);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(
        redis.raw().keys::<_, Vec<String>>("*").unwrap(),
        Vec::<String>::new()
    );
    // The -c it names does fit: 64 files, 32 of the hammer's own, 4 shared connections.
    assert!(
        stderr(&out).contains("lower -c to at most 28"),
        "{}",
        stderr(&out)
    );
    let fits = [
        "--json",
        "hammer",
        "--mode",
        "threads",
        "--strategy",
        "batch,atomic",
        "-c",
        "28",
        "-n",
        "400",
        "--stock",
        "300",
    ];
    let out = limited(64, 64, &fits);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["verdict"], "pass", "{}", stdout(&out));
    // Child processes: 8 files a child while it starts, 32 of the hammer's own. -c 4 fits in
    // 64 and makes no error; in 60 it does not fit, and is refused.
    let procs = [
        "--json", "hammer", "--sku", "fdp", "--mode", "procs", "-c", "4", "-n", "40", "--stock",
        "30",
    ];
    let out = limited(64, 64, &procs);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["errors"], 0, "{}", stdout(&out));
    let out = limited(60, 60, &procs);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    // Soft 100, hard 4096: raised, and the run goes.
    let out = limited(
        100,
        4096,
        &[
            "--json", "hammer", "--sku", "fd", "-c", "300", "-n", "600", "--stock", "5",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["verdict"], "pass");
}

/// lockctl offers each request as soon as it has called connect (on loopback the connection
/// is up by then); where it is not up, nothing may count as sent. A listener whose accept
/// queue is full drops every SYN, so each connect hangs until --connect-timeout-ms.
#[test]
fn a_connection_that_never_comes_up_times_out_connecting_and_sent_nothing() {
    use socket2::{Domain, Socket, Type};
    let redis = RedisServer::start();
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener.set_reuse_address(true).unwrap();
    listener.bind(&addr.into()).unwrap();
    listener.listen(0).unwrap();
    // Never accepted: the first fills the queue, the others are left knocking.
    let fillers: Vec<Socket> = (0..3)
        .map(|_| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let _ = s.connect(&addr.into());
            s
        })
        .collect();
    thread::sleep(Duration::from_millis(100));
    let url = format!("http://127.0.0.1:{port}/run_demo.php?sku={{sku}}");
    let out = lockctl(
        &redis.url(),
        &[
            "--json",
            "--connect-timeout-ms",
            "200",
            "hammer",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "-n",
            "3",
            "-c",
            "1",
            "--stock",
            "5",
        ],
    );
    let v = json(&out);
    assert_eq!(code(&out), 1, "{v}");
    assert_eq!(v["verdict"], "unknown", "{v}");
    assert_eq!(v["errors_by_kind"]["timed_out"], 3, "{v}");
    assert_eq!(v["indeterminate"], 0, "never connected, so never sent: {v}");
    let first = v["first_error"].as_str().unwrap_or_default();
    assert!(
        first.contains("connecting to") && first.contains("--connect-timeout-ms"),
        "{v}"
    );
    assert_eq!(v["final_stock"], 5);
    drop(fillers);
}

#[test]
fn bad_input_is_refused_with_exit_2_naming_the_value() {
    let redis = RedisServer::start();
    let cases: [(&[&str], &str); 12] = [
        (
            &["--url", "http://127.0.0.1:1/", "--bought-if", "(x"],
            "--bought-if '(x' is not a valid pattern",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--header", "NoColon"],
            "--header 'NoColon' has no ':'",
        ),
        (&["--url", "not a url"], "--url 'not a url' is not a URL"),
        (
            &["--url", "ftp://127.0.0.1:1/"],
            "'ftp' is neither http nor https",
        ),
        (
            &["--url", "http://127.0.0.1:1/{skus}"],
            "brace that is not a placeholder",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--stock", "5"],
            "--stock is for judging",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--strategy", "atomic"],
            "cannot be used with",
        ),
        // Buckets and replicas are how lockctl's own buyers keep a cluster's stock: an
        // endpoint keeps its own.
        (
            &["--url", "http://127.0.0.1:1/", "--buckets", "3"],
            "cannot be used with",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--require-replicas", "1"],
            "cannot be used with",
        ),
        (
            &["--url", "http://127.0.0.1:1/", "--rate", "0"],
            "is not a rate",
        ),
        // A rate too small for any schedule to keep, not a crash and a false FAIL.
        (
            &["--url", "http://127.0.0.1:1/", "--rate", "1e-300"],
            "at least 0.001",
        ),
        // Never port 80 in place of a port that does not exist.
        (
            &["--url", "http://127.0.0.1:99999/x"],
            "'99999' is not a port",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["hammer"];
        all.extend_from_slice(args);
        let out = lockctl(&redis.url(), &all);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let auto = lockctl("auto", &["hammer", "--preset", "tutorial"]);
    assert_eq!(code(&auto), 2, "{}", stderr(&auto));
    assert!(stderr(&auto).contains("name the endpoint's Redis"));
}

#[test]
fn ctrl_c_stops_an_open_run_at_once_and_reports_what_was_made() {
    let redis = RedisServer::start();
    let php = Php::start(&redis);
    let url = php.url("run_demo.php?sku={sku}");
    // 1,000 requests at 5 a second would take 200 s.
    let args = [
        "--json", "hammer", "--url", &url, "--preset", "tutorial", "-n", "1000", "--rate", "5",
        "--stock", "1000",
    ];
    let child = spawn_lockctl_with(&redis.url(), &args, Streams::Capture);
    thread::sleep(Duration::from_millis(1500));
    let asked = Instant::now();
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["interrupted"], true);
    let made = v["requests"].as_u64().unwrap();
    assert!((1..1000).contains(&made), "{v}");
    assert_eq!(accounted(&v), made);
    assert_eq!(v["verdict"], "pass", "{v}");
}
