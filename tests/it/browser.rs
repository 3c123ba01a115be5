//! The HTML report as a browser draws it: Debian's Chromium, headless, takes a screenshot of a
//! real run's page, and the pixels at the top of the page must be the verdict banner's colour
//! (red for FAIL, green for PASS): a page whose verdict is not what the reader sees first, or
//! that a browser cannot draw, fails here. `scripts/test` installs Chromium.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{Killed, RedisServer, code, free_port, json, lockctl, run_ok, stderr, stdout};

/// The banner's colours (`.banner.pass`, `.banner.fail` in `src/render/html.rs`).
const GREEN: [u8; 3] = [0x1a, 0x7f, 0x37];
const RED: [u8; 3] = [0xc6, 0x28, 0x28];
/// The outline of a request a violation rests on (`BLAMED` in `src/render/timeline.rs`).
const MAGENTA: [u8; 3] = [0xee, 0x00, 0xee];

/// The browser: `chromium` (Debian) or `chromium-browser`, or `$LOCKCTL_TEST_CHROMIUM`.
fn chromium() -> String {
    if let Ok(c) = std::env::var("LOCKCTL_TEST_CHROMIUM")
        && !c.is_empty()
    {
        return c;
    }
    for name in ["chromium", "chromium-browser"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return name.to_string();
        }
    }
    panic!(
        "no chromium to draw the HTML report: apt-get install -y chromium (scripts/test does), or name one in LOCKCTL_TEST_CHROMIUM"
    );
}

/// How many pixels of the top `rows` rows of `page`'s screenshot (1200 by 900 px) are
/// `colour`.
fn pixels_of(page: &Path, rows: u32, colour: [u8; 3]) -> usize {
    pixels_in(page, 900, rows, colour)
}

/// [`pixels_of`], in a window `height` px tall; the screenshot is left beside the page.
fn pixels_in(page: &Path, height: u32, rows: u32, colour: [u8; 3]) -> usize {
    let shot = page.with_extension("png");
    run_ok(Command::new(chromium()).args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        &format!("--window-size=1200,{height}"),
        &format!("--screenshot={}", shot.display()),
        &format!("file://{}", page.display()),
    ]));
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("chromium wrote its screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "a colour screenshot: {:?}", info.color_type);
    let near = |p: &[u8]| (0..3).all(|i| p[i].abs_diff(colour[i]) <= 8);
    let rows = rows.min(info.height) as usize;
    buf[..rows * info.line_size]
        .chunks(info.line_size)
        .flat_map(|row| row[..info.width as usize * channels].chunks(channels))
        .filter(|p| near(p))
        .count()
}

#[test]
fn the_html_reports_verdict_is_the_first_thing_a_browser_shows() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fail = dir.path().join("fail.html");
    let pass = dir.path().join("pass.html");
    // The homework: a lease shorter than the work, FAIL (exit 3).
    let out = lockctl(
        &redis.url(),
        &[
            "hammer",
            "-n",
            "8",
            "-c",
            "4",
            "--stock",
            "2",
            "--strategy",
            "lock",
            "--ttl-ms",
            "100",
            "--work-ms",
            "150",
            "--wait-ms",
            "5000",
            "--export-html",
            fail.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(3), "the homework fails");
    let out = lockctl(
        &redis.url(),
        &[
            "hammer",
            "-n",
            "40",
            "-c",
            "4",
            "--stock",
            "10",
            "--strategy",
            "atomic",
            "--export-html",
            pass.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "an atomic sale passes");
    // The banner is about 1,100 px wide and 60 px or more tall: well over 30,000 pixels of its
    // colour in the first 400 rows; the other verdict's colour is nowhere up there.
    let (red, green) = (pixels_of(&fail, 400, RED), pixels_of(&fail, 400, GREEN));
    assert!(
        red > 30_000 && green < 100,
        "FAIL page: red {red}, green {green}"
    );
    let (red, green) = (pixels_of(&pass, 400, RED), pixels_of(&pass, 400, GREEN));
    assert!(
        green > 30_000 && red < 100,
        "PASS page: red {red}, green {green}"
    );
}

/// The tutorial's answers without the stock they report: the timeline's stock must come from
/// lockctl's own reads.
const ANSWERS: [&str; 6] = [
    "--bought-if",
    "扣减成功",
    "--sold-out-if",
    "已售罄",
    "--busy-if",
    "并发过高",
];

/// `lockctl --json hunt` of `script` (served by `php -S` from the repository, talking to
/// `redis`), with `extra` flags; the exit code and the report.
fn hunt(redis: &RedisServer, script: &str, extra: &[&str]) -> (i32, Value, String) {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/{script}?sku={{sku}}&user={{user}}&order={{order}}");
    let serve = format!(
        "REDIS_PORT={} PHP_CLI_SERVER_WORKERS=8 exec php -S 127.0.0.1:{port} -t {}",
        redis.port,
        env!("CARGO_MANIFEST_DIR")
    );
    let mut args = vec!["--json", "hunt", "--url", &url, "--serve", &serve];
    args.extend_from_slice(&ANSWERS);
    args.extend_from_slice(extra);
    let out = lockctl(&redis.url(), &args);
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    (code(&out), json(&out), said)
}

/// `s` as the page writes text (`src/render/escape.rs`).
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The points of the stock's line on the page, as (x, y).
fn stock_points(html: &str) -> Vec<(f64, f64)> {
    let from = html
        .find(r#"<polyline class="stock" points=""#)
        .expect("a stock line")
        + 32;
    html[from..html[from..].find('"').unwrap() + from]
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// A hunt's FAIL timeline of a check-then-act endpoint (examples/tutorial-php/nolock.php),
/// whose answers carry no stock: the stock is drawn from lockctl's reads during the round
/// (steps within the round, not a line at t=0), the sales beyond the stock are outlined in a
/// colour a browser shows and listed under "Violations" with their user, order, answer and
/// times, the tooltips name user and order, the page carries the seed and the replay, and an
/// empty section says "none". A PASS (the same endpoint one request at a time) has "none"
/// under both sections and nothing outlined.
#[test]
fn a_failing_hunts_timeline_shows_the_stock_read_the_sales_beyond_it_and_the_replay() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("fail.html");
    let history = dir.path().join("fail.jsonl");
    let (exit, v, said) = hunt(
        &redis,
        "examples/tutorial-php/nolock.php",
        &[
            "--budget",
            "40s",
            "--stock",
            "20",
            "-n",
            "40",
            "--nemesis",
            "none",
            "--export-html",
            page.to_str().unwrap(),
            "--history",
            history.to_str().unwrap(),
        ],
    );
    assert_eq!(exit, 3, "{said}");
    let html = std::fs::read_to_string(&page).unwrap();
    let f = &v["failure"]["report"];
    // The seed and the replay, as the report printed them.
    let seed = v["seed"].as_u64().unwrap();
    assert!(
        html.contains(&format!("seed <code>{seed}</code>")),
        "{html}"
    );
    let replay = v["replay"].as_str().unwrap();
    assert!(
        html.contains(&escaped(replay)),
        "no replay {replay} in {html}"
    );
    // The sales beyond the stock: outlined, and listed with user, order, answer and times.
    let oversold = f["oversold"].as_u64().unwrap();
    assert!(oversold > 0, "{said}");
    let outlined = html.matches(r#"class="blamed""#).count() as u64;
    assert_eq!(
        outlined, oversold,
        "one outline per unit sold beyond the stock: {html}"
    );
    let run = f["run_id"].as_str().unwrap();
    let listed: Vec<u64> = html
        .split(r#"<table class="named">"#)
        .nth(1)
        .expect("the requests listed under Violations")
        .split("<tr><td>")
        .skip(1)
        .map(|row| row.split('<').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed.len() as u64, oversold, "{html}");
    // Each as the history has it: the user and order it was sent with.
    let lines: Vec<Value> = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for i in &listed {
        let sent = lines
            .iter()
            .find(|l| l["f"] == "buy" && l["type"] == "invoke" && l["value"]["request"] == *i)
            .expect("the request in the history");
        let (user, order) = (
            sent["value"]["user"].as_str().unwrap(),
            sent["value"]["order"].as_str().unwrap(),
        );
        assert_eq!(order, format!("{run}-{i}"));
        assert!(
            html.contains(&format!(
                "<tr><td>{i}</td><td>{user}</td><td>{order}</td><td>bought</td>"
            )),
            "request {i} listed with its user and order: {html}"
        );
        assert!(
            html.contains(&format!(
                "<title>request {i} (user {user}, order {order}): bought at "
            )),
            "request {i}'s tooltip: {html}"
        );
    }
    assert!(
        html.contains(r#"<h2>Faults</h2><p class="none">none</p>"#),
        "{html}"
    );
    // The stock: read during the round (the history keeps the reads), drawn as steps down
    // from 20 within the round, not from t=0 alone.
    let reads = lines
        .iter()
        .filter(|l| l["f"] == "read-stock" && l["process"] == "observer")
        .count();
    assert!(
        reads >= 4,
        "an invoke and an ok per read, two reads at least: {reads}"
    );
    let points = stock_points(&html);
    let (first, last) = (points[0].0, points[points.len() - 1].0);
    let inside = points.iter().filter(|p| p.0 > first && p.0 < last).count();
    assert!(
        points.len() > 2 && inside >= 2,
        "steps within the round: {points:?}"
    );
    // A browser draws the outlines: well over the legend's swatch (some 40 px) of magenta.
    let magenta = pixels_in(&page, 1400, 1400, MAGENTA);
    assert!(magenta > 150, "magenta pixels: {magenta}");
    // Kept for a person to look at, in cargo's own temporary folder of the tests (target/tmp),
    // not the machine's /tmp.
    let keep = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lockctl-fail-timeline.png");
    let _ = std::fs::copy(page.with_extension("png"), &keep);

    // A PASS: the same endpoint one request at a time (php -S without workers), its history
    // drawn by `lockctl judge`: "none" under both sections, nothing outlined.
    let port = free_port();
    let _php = Killed(
        Command::new("php")
            .args([
                "-S",
                &format!("127.0.0.1:{port}"),
                "-t",
                env!("CARGO_MANIFEST_DIR"),
            ])
            .env("REDIS_PORT", redis.port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/examples/tutorial-php/nolock.php?sku={{sku}}");
    let pass = dir.path().join("pass.jsonl");
    let mut args = vec![
        "hammer",
        "--url",
        &url,
        "-c",
        "1",
        "-n",
        "6",
        "--stock",
        "4",
        "--history",
    ];
    args.push(pass.to_str().unwrap());
    args.extend_from_slice(&ANSWERS);
    // php -S takes a moment to listen: refused (exit 1) until it does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let out = loop {
        let out = lockctl(&redis.url(), &args);
        if code(&out) != 1 || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let page = dir.path().join("pass.html");
    let out = lockctl(
        "redis://127.0.0.1:1",
        &[
            "judge",
            pass.to_str().unwrap(),
            "--export-html",
            page.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(r#"<h2>Violations</h2><p class="none">none</p>"#)
            && html.contains(r#"<h2>Faults</h2><p class="none">none</p>"#)
            && !html.contains(r#"class="blamed""#),
        "{html}"
    );
}
