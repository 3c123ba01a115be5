//! What an endpoint's answer meant: bought, sold out or busy, by patterns matched against the
//! response body (first match wins, in that order); anything else is an error counted by
//! status (`http_500`), or `unclassified` for a 2xx answer that matched nothing.
//!
//! An answer that matched nothing may have deducted or not: the endpoint said something this
//! run cannot read. Such errors are indeterminate, so they widen the bound the judge allows
//! between stock consumed and units announced, as a timed-out purchase does.

use regex::bytes::Regex;

use crate::report::Ended;
use lockctl_core::error::ErrorKind;
use lockctl_core::stock::Outcome;

/// The tutorial's own answers (`run_demo.php`): `扣减成功 | 剩余库存: 9`, `已售罄，拦截请求`,
/// `并发过高，请稍后重试`. The stock it reports after a purchase is kept for the timeline.
pub const TUTORIAL_BOUGHT: &str = r"扣减成功(?:\s*\|\s*剩余库存:\s*(?P<remaining>-?\d+))?";
pub const TUTORIAL_SOLD_OUT: &str = "已售罄";
pub const TUTORIAL_BUSY: &str = "并发过高";

/// The tutorial's URL shape, appended to a `--url` that names only a server.
pub const TUTORIAL_PATH: &str = "/run_demo.php?sku={sku}";

/// The body bytes kept for matching; the rest of a long answer is read and dropped.
pub const KEPT_BODY: usize = 64 * 1024;

/// How much of a body an error message shows (the start of it, on one line).
pub const SHOWN_BODY: usize = 200;

/// The three patterns, compiled.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    bought: Option<Regex>,
    /// Whether `bought` has the group `remaining` (the stock the answer reports).
    bought_remaining: bool,
    sold_out: Option<Regex>,
    busy: Option<Regex>,
}

impl Classifier {
    /// Compiles the patterns; a bad one is refused naming its flag and the problem.
    pub fn new(
        bought: Option<&str>,
        sold_out: Option<&str>,
        busy: Option<&str>,
    ) -> Result<Classifier, String> {
        let compile = |flag: &str, p: Option<&str>| -> Result<Option<Regex>, String> {
            p.map(|p| {
                Regex::new(p).map_err(|e| {
                    let why = e.to_string();
                    let why = why.lines().last().unwrap_or("").trim().to_string();
                    format!(
                        "{flag} '{p}' is not a valid pattern ({why}); the syntax is Rust's regex crate (escape | ( ) [ ] . * + ? with a backslash to match them literally)"
                    )
                })
            })
            .transpose()
        };
        let bought = compile("--bought-if", bought)?;
        Ok(Classifier {
            bought_remaining: bought
                .as_ref()
                .is_some_and(|re| re.capture_names().any(|n| n == Some("remaining"))),
            bought,
            sold_out: compile("--sold-out-if", sold_out)?,
            busy: compile("--busy-if", busy)?,
        })
    }

    /// The tutorial's answers, with any pattern given on the command line in place of its own.
    pub fn tutorial(
        bought: Option<&str>,
        sold_out: Option<&str>,
        busy: Option<&str>,
    ) -> Result<Classifier, String> {
        Classifier::new(
            Some(bought.unwrap_or(TUTORIAL_BOUGHT)),
            Some(sold_out.unwrap_or(TUTORIAL_SOLD_OUT)),
            Some(busy.unwrap_or(TUTORIAL_BUSY)),
        )
    }

    /// Whether any pattern was given: without one no answer says what was sold, and the run
    /// has nothing to judge.
    pub fn judges(&self) -> bool {
        self.bought.is_some() || self.sold_out.is_some() || self.busy.is_some()
    }

    /// What an answer with `status` and `body` (its first `KEPT_BODY` bytes) meant.
    pub fn classify(&self, status: u16, body: &[u8]) -> Ended {
        if let Some(re) = &self.bought {
            // The (prefiltered) match first: most answers under load are not purchases, and
            // captures cost a second pass and an allocation, spent only on a purchase whose
            // pattern has the group.
            let found = match (re.is_match(body), self.bought_remaining) {
                (false, _) => None,
                (true, false) => Some(None),
                (true, true) => Some(re.captures(body).and_then(|caps| {
                    caps.name("remaining")
                        .and_then(|m| std::str::from_utf8(m.as_bytes()).ok())
                        .and_then(|s| s.parse().ok())
                })),
            };
            if let Some(remaining) = found {
                return Ended::Answered {
                    outcome: Some(Outcome::Bought),
                    remaining,
                };
            }
        }
        for (re, outcome) in [
            (&self.sold_out, Outcome::SoldOut),
            (&self.busy, Outcome::Busy),
        ] {
            if re.as_ref().is_some_and(|re| re.is_match(body)) {
                return Ended::Answered {
                    outcome: Some(outcome),
                    remaining: None,
                };
            }
        }
        if !self.judges() && (200..300).contains(&status) {
            return Ended::Answered {
                outcome: None,
                remaining: None,
            };
        }
        let shown = snippet(body);
        let (kind, message) = if (200..300).contains(&status) {
            let message = format!("HTTP {status} matched no pattern: {shown}");
            (ErrorKind::Unclassified, message)
        } else {
            (ErrorKind::Http(status), format!("HTTP {status}: {shown}"))
        };
        Ended::Failed {
            kind,
            indeterminate: true,
            message,
            hint: None,
        }
    }
}

/// The start of a body, on one line, for an error message.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(SHOWN_BODY)]);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let short: String = one_line.chars().take(80).collect();
    if short.is_empty() {
        "(empty body)".into()
    } else if short.len() < one_line.len() {
        format!("'{short}...'")
    } else {
        format!("'{short}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(e: Ended) -> (Outcome, Option<i64>) {
        match e {
            Ended::Answered {
                outcome: Some(outcome),
                remaining,
            } => (outcome, remaining),
            other => panic!("not an answer: {other:?}"),
        }
    }

    #[test]
    fn the_tutorials_answers_are_read_as_it_means_them() {
        let c = Classifier::tutorial(None, None, None).unwrap();
        let bought = "扣减成功 | 剩余库存: 9\n".as_bytes();
        assert_eq!(
            answered(c.classify(200, bought)),
            (Outcome::Bought, Some(9))
        );
        let oversold = "扣减成功 | 剩余库存: -1\n".as_bytes();
        assert_eq!(
            answered(c.classify(200, oversold)),
            (Outcome::Bought, Some(-1))
        );
        let sold_out = "已售罄，拦截请求\n".as_bytes();
        assert_eq!(answered(c.classify(200, sold_out)).0, Outcome::SoldOut);
        let busy = "并发过高，请稍后重试\n".as_bytes();
        assert_eq!(answered(c.classify(200, busy)).0, Outcome::Busy);
    }

    #[test]
    fn the_first_match_wins_and_the_rest_are_errors_by_status() {
        let c = Classifier::new(Some("ok"), Some("ok|gone"), Some("wait")).unwrap();
        assert_eq!(answered(c.classify(200, b"ok")).0, Outcome::Bought);
        assert_eq!(answered(c.classify(503, b"please wait")).0, Outcome::Busy);
        let Ended::Failed {
            kind,
            indeterminate,
            message,
            ..
        } = c.classify(500, b"Fatal error\n in x.php")
        else {
            panic!()
        };
        assert_eq!((kind, indeterminate), (ErrorKind::Http(500), true));
        assert_eq!(message, "HTTP 500: 'Fatal error in x.php'");
        let Ended::Failed { kind, message, .. } = c.classify(200, b"") else {
            panic!()
        };
        assert_eq!(kind, ErrorKind::Unclassified);
        assert_eq!(message, "HTTP 200 matched no pattern: (empty body)");
    }

    #[test]
    fn a_bad_pattern_names_its_flag() {
        let e = Classifier::new(None, Some("(unclosed"), None).unwrap_err();
        assert!(
            e.starts_with("--sold-out-if '(unclosed' is not a valid pattern"),
            "{e}"
        );
        let none = Classifier::new(None, None, None).unwrap();
        assert!(!none.judges());
        assert!(matches!(
            none.classify(204, b""),
            Ended::Answered { outcome: None, .. }
        ));
        assert!(matches!(
            none.classify(404, b"no"),
            Ended::Failed {
                kind: ErrorKind::Http(404),
                ..
            }
        ));
    }
}
