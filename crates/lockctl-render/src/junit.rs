//! `hunt --junit FILE`: the verdict as JUnit XML, the format CI systems show as tests. One
//! test suite, `lockctl hunt`, with one test case for the hunt: CI lists test cases, and a
//! hunt's hundreds of passing rounds would bury the one that failed; the case's output names
//! the rounds judged and the replay command. A FAIL is a `<failure>` carrying the violations,
//! an UNKNOWN (no round could be judged) an `<error>`.

use std::fmt::Write as _;

use lockctl_hammer::Verdict;
use lockctl_hunt::HuntReport;

use crate::hunt::Replay;

/// `h` as a JUnit XML document; `name` names the test case (the system's URL, say).
pub fn hunt_junit(h: &HuntReport, replay: &Replay, name: &str) -> String {
    let (failures, errors) = match h.verdict {
        Verdict::Fail => (1, 0),
        Verdict::Unknown => (0, 1),
        Verdict::Pass => (0, 0),
    };
    let time = h.elapsed.as_secs_f64();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"lockctl hunt\" tests=\"1\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\">"
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"lockctl hunt\" tests=\"1\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\">"
    );
    let _ = writeln!(
        s,
        "    <testcase classname=\"lockctl hunt\" name=\"{}\" time=\"{time:.3}\">",
        xml(name)
    );
    match (&h.failure, h.verdict) {
        (Some(f), _) => {
            let first = f.report.violations.first().cloned().unwrap_or_default();
            let _ = writeln!(
                s,
                "      <failure message=\"{}\" type=\"violation\">round {} ({}): {}</failure>",
                xml(&first),
                f.round.number,
                xml(&f.round.shape.to_string()),
                xml(&f.report.violations.join("\n"))
            );
        }
        (None, Verdict::Unknown) => {
            let why = match h.unknown.first() {
                Some(u) => u.clone(),
                None => "no round's books could be judged".into(),
            };
            let _ = writeln!(
                s,
                "      <error message=\"{}\" type=\"unjudged\">{}</error>",
                xml(&why),
                xml(&h.unknown.join("\n"))
            );
        }
        _ => {}
    }
    let _ = writeln!(
        s,
        "      <system-out>seed {}, {} rounds ({} judged, {} unjudged), {} requests\nreplay: {}</system-out>",
        h.seed,
        h.rounds,
        h.judged,
        h.unjudged,
        h.requests,
        xml(&replay.command)
    );
    s.push_str("    </testcase>\n  </testsuite>\n</testsuites>\n");
    s
}

/// `s` as XML text or attribute value: the five characters XML gives meaning to as entities,
/// line breaks and tabs as character references (kept in attributes), and the control
/// characters XML 1.0 cannot carry at all as `\u{..}`.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            c if c.is_control() => out.extend(c.escape_debug()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_system_cannot_break_out_of_the_xml() {
        let escaped = xml("a</failure><x a='1' b=\"2\"> & \u{1b}[2K\u{0}");
        assert!(
            !escaped.contains(['<', '>', '"', '\'', '\u{1b}', '\u{0}']),
            "{escaped}"
        );
        assert!(escaped.contains("&lt;/failure&gt;"));
    }
}
