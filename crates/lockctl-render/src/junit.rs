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
/// line breaks and tabs as character references (kept in attributes), and every character
/// XML 1.0 cannot carry at all (outside its `Char` production: control characters, and the
/// noncharacters U+FFFE and U+FFFF) as `\u{..}` text. A parser that meets one of those refuses
/// the whole file, and CI then shows no verdict at all; the system's answers are what puts
/// them there.
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
            c if !is_xml_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// XML 1.0's `Char`: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
/// A Rust `char` is never a surrogate, so only the controls and U+FFFE, U+FFFF fall outside.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{a}' | '\u{d}' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
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

    /// Issue 50, item 11: an answer holding U+FFFE, U+FFFF or a control character was written
    /// raw, and a conforming parser refused the whole file. Checked by Python's expat (through
    /// `xml.dom.minidom`): strict about XML 1.0's `Char`, as CI's JUnit readers are, and on
    /// every machine that runs these tests; no XML crate is in Cargo.lock to do it in-process.
    /// Without `python3` the test says so and checks the characters itself.
    #[test]
    fn characters_xml_cannot_carry_are_escaped_and_a_strict_parser_reads_the_file() {
        let answer = "sold\u{fffe}out\u{ffff} \u{1}\u{8}\u{b}\u{c}\r\u{7f}\u{85}\u{1b}[2J \u{10ffff}\u{10fffe} ok";
        let mut h = HuntReport::new(7);
        h.unknown = vec![format!("round 1: the system answered '{answer}'")];
        let mut replay = Replay::default();
        replay.command = format!("lockctl hunt --body '{answer}' --seed 7");
        let doc = hunt_junit(&h, &replay, &format!("http://h/buy{answer}"));
        let dir = std::env::temp_dir().join(format!("lockctl-junit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("junit.xml");
        std::fs::write(&file, &doc).unwrap();
        let parsed = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); \
                 print(d.getElementsByTagName('error')[0].firstChild.data)",
            ])
            .arg(&file)
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        match parsed {
            Ok(out) => {
                let said = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success(),
                    "python3 refused the file: {said}\n{doc}"
                );
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(text.contains(r"sold\u{fffe}out"), "{text}");
            }
            Err(e) => eprintln!("python3 not run ({e}): the file was checked in Rust only"),
        }
        assert!(
            doc.chars()
                .all(|c| is_xml_char(c) && (c == '\n' || !c.is_control())),
            "{doc:?}"
        );
        assert!(doc.contains(r"sold\u{fffe}out\u{ffff}"), "{doc}");
    }
}
