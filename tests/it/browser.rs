//! The HTML report as a browser draws it: Debian's Chromium, headless, takes a screenshot of a
//! real run's page, and the pixels at the top of the page must be the verdict banner's colour
//! (red for FAIL, green for PASS): a page whose verdict is not what the reader sees first, or
//! that a browser cannot draw, fails here. `scripts/test` installs Chromium.

use std::path::Path;
use std::process::Command;

use crate::support::{RedisServer, lockctl, run_ok};

/// The banner's colours (`.banner.pass`, `.banner.fail` in `src/render/html.rs`).
const GREEN: [u8; 3] = [0x1a, 0x7f, 0x37];
const RED: [u8; 3] = [0xc6, 0x28, 0x28];

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

/// How many pixels of the top `rows` rows of `page`'s screenshot (1200 px wide) are `colour`,
/// and how many rows there are in all.
fn pixels_of(page: &Path, rows: u32, colour: [u8; 3]) -> usize {
    let shot = page.with_extension("png");
    run_ok(Command::new(chromium()).args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1200,900",
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
