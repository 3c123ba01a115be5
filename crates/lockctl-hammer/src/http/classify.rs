//! What an endpoint's answer meant: bought, sold out, busy, refused (a rule said no: nothing
//! sold, nothing owed) or failed (the service says it failed: it must not have deducted), by
//! rules held against the answer (first class that holds wins, in that order); anything else
//! is an error counted by status (`http_500`), or `unclassified` for a 2xx answer that matched
//! nothing.
//!
//! Each class is a list of forms that must all hold: a regex over the body, `status:CODE[,CODE]`
//! (one of the codes), or `json:/POINTER=VALUE` (RFC 6901 into a JSON body; VALUE compared as
//! JSON when it parses as JSON, as plain text otherwise).
//!
//! An answer that matched nothing may have deducted or not: the endpoint said something this
//! run cannot read. Such errors are indeterminate, so they widen the bound the judge allows
//! between stock consumed and units announced, as a timed-out purchase does. An answer in the
//! failed class is determinate: the service said nothing happened, so a deduction behind it is
//! a finding.

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

/// The classes an answer may fall in, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerClass {
    /// Sold the request's units.
    Bought,
    /// The stock ran out.
    SoldOut,
    /// Turned away for now (try again).
    Busy,
    /// A rule said no (one per user, say): nothing sold, nothing owed.
    Refused,
    /// The service says the purchase failed: nothing may have been deducted.
    Failed,
}

impl AnswerClass {
    /// Every class, in the order tried.
    pub const ALL: [AnswerClass; 5] = [
        AnswerClass::Bought,
        AnswerClass::SoldOut,
        AnswerClass::Busy,
        AnswerClass::Refused,
        AnswerClass::Failed,
    ];

    /// Its name in words: `bought`, `sold out`, `busy`, `refused`, `failed`.
    pub fn name(self) -> &'static str {
        match self {
            AnswerClass::Bought => "bought",
            AnswerClass::SoldOut => "sold out",
            AnswerClass::Busy => "busy",
            AnswerClass::Refused => "refused",
            AnswerClass::Failed => "failed",
        }
    }
}

/// The forms given for each class (each list: every form must hold); empty: the class is
/// never recognised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patterns {
    /// Bought.
    pub bought: Vec<String>,
    /// Sold out.
    pub sold_out: Vec<String>,
    /// Busy.
    pub busy: Vec<String>,
    /// Refused.
    pub refused: Vec<String>,
    /// Failed.
    pub failed: Vec<String>,
}

impl Patterns {
    fn of(&self, class: AnswerClass) -> &[String] {
        match class {
            AnswerClass::Bought => &self.bought,
            AnswerClass::SoldOut => &self.sold_out,
            AnswerClass::Busy => &self.busy,
            AnswerClass::Refused => &self.refused,
            AnswerClass::Failed => &self.failed,
        }
    }
}

/// A form that cannot be read: which class it was given for (`None`: the order id's), the
/// value, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' {why}")]
pub struct BadPattern {
    /// The class the form was given for; `None` for the order id's pattern.
    pub class: Option<AnswerClass>,
    /// The form as given.
    pub value: String,
    /// What is wrong with it and what is expected.
    pub why: String,
}

/// The forms every class accepts, in words, for error messages.
const FORMS: &str = "expected a regex over the body, status:CODE[,CODE...] or json:/POINTER=VALUE";

/// One form of a class.
#[derive(Clone, Debug)]
enum Form {
    Body(Regex),
    Status(Vec<u16>),
    Json(String, Wanted),
}

/// The value a `json:` form wants at its pointer.
#[derive(Clone, Debug)]
enum Wanted {
    Json(serde_json::Value),
    Text(String),
}

impl Wanted {
    fn holds(&self, v: &serde_json::Value) -> bool {
        match self {
            Wanted::Json(want) => v == want,
            Wanted::Text(text) => match v {
                serde_json::Value::String(s) => s == text,
                other => other.to_string().as_str() == text.as_str(),
            },
        }
    }
}

/// The pointer of `json:/POINTER...`, checked: empty (the whole body) or starting with `/`.
fn pointer(class: Option<AnswerClass>, value: &str, p: &str) -> Result<String, BadPattern> {
    match p.is_empty() || p.starts_with('/') {
        true => Ok(p.to_string()),
        false => Err(BadPattern {
            class,
            value: value.into(),
            why: format!(
                "has the JSON pointer '{p}', which does not start with '/' (RFC 6901: /code, /data/order_no, /items/0/id)"
            ),
        }),
    }
}

fn regex(class: Option<AnswerClass>, value: &str) -> Result<Regex, BadPattern> {
    Regex::new(value).map_err(|e| {
        let why = e.to_string();
        let why = why.lines().last().unwrap_or("").trim().to_string();
        BadPattern {
            class,
            value: value.into(),
            why: format!(
                "is not a valid pattern ({why}); the syntax is Rust's regex crate (escape | ( ) [ ] . * + ? with a backslash to match them literally); {FORMS}"
            ),
        }
    })
}

impl Form {
    fn parse(class: AnswerClass, value: &str) -> Result<Form, BadPattern> {
        let bad = |why: String| BadPattern {
            class: Some(class),
            value: value.into(),
            why,
        };
        if let Some(codes) = value.strip_prefix("status:") {
            let parsed: Option<Vec<u16>> = codes
                .split(',')
                .map(|c| c.trim().parse().ok().filter(|c| (100..=599).contains(c)))
                .collect();
            return match parsed {
                Some(codes) if !codes.is_empty() => Ok(Form::Status(codes)),
                _ => Err(bad(format!(
                    "is not a list of HTTP status codes (100 to 599, comma-separated: status:409 or status:400,409); {FORMS}"
                ))),
            };
        }
        if let Some(rest) = value.strip_prefix("json:") {
            let Some((p, want)) = rest.split_once('=') else {
                return Err(bad(format!(
                    "names no value: write json:/POINTER=VALUE (json:/code=0, json:/msg=\"sold out\"); {FORMS}"
                )));
            };
            let p = pointer(Some(class), value, p)?;
            let want = match serde_json::from_str(want) {
                Ok(v) => Wanted::Json(v),
                Err(_) => Wanted::Text(want.to_string()),
            };
            return Ok(Form::Json(p, want));
        }
        regex(Some(class), value).map(Form::Body)
    }

    fn holds(&self, status: u16, body: &[u8], json: &mut Lazy) -> bool {
        match self {
            Form::Body(re) => re.is_match(body),
            Form::Status(codes) => codes.contains(&status),
            Form::Json(p, want) => json
                .get(body)
                .and_then(|v| v.pointer(p))
                .is_some_and(|v| want.holds(v)),
        }
    }
}

/// The body as JSON, parsed at most once per answer, and only when a form asks.
#[derive(Default)]
enum Lazy {
    #[default]
    Unparsed,
    Parsed(Option<serde_json::Value>),
}

impl Lazy {
    fn get(&mut self, body: &[u8]) -> Option<&serde_json::Value> {
        if matches!(self, Lazy::Unparsed) {
            *self = Lazy::Parsed(serde_json::from_slice(body).ok());
        }
        match self {
            Lazy::Parsed(v) => v.as_ref(),
            Lazy::Unparsed => None,
        }
    }
}

/// Where an answer carries a value the service made (a bought answer's order id, a login's
/// token): `json:/POINTER` (the value there, a string's text or a number's digits) or a regex
/// whose one group is the value.
#[derive(Clone, Debug)]
pub enum Taken {
    /// The value at this RFC 6901 pointer into a JSON body.
    Json(String),
    /// The one group of this regex over the body.
    Group(Regex),
}

impl Taken {
    /// `pattern` read: `json:/POINTER` or a regex with exactly one group; `example` shows such
    /// a regex in the error.
    pub fn parse(pattern: &str, example: &str) -> Result<Taken, BadPattern> {
        match pattern.strip_prefix("json:") {
            Some(p) => Ok(Taken::Json(pointer(None, pattern, p)?)),
            None => {
                let re = regex(None, pattern)?;
                if re.captures_len() != 2 {
                    return Err(BadPattern {
                        class: None,
                        value: pattern.into(),
                        why: format!(
                            "must be json:/POINTER or a regex with exactly one group (e.g. {example})"
                        ),
                    });
                }
                Ok(Taken::Group(re))
            }
        }
    }

    /// The value in `body`, if it is there and not empty.
    pub fn take(&self, body: &[u8]) -> Option<String> {
        self.take_lazily(body, &mut Lazy::Unparsed)
    }

    fn take_lazily(&self, body: &[u8], json: &mut Lazy) -> Option<String> {
        match self {
            Taken::Json(p) => match json.get(body)?.pointer(p)? {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            },
            Taken::Group(re) => re
                .captures(body)?
                .get(1)
                .map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned()),
        }
        .filter(|s| !s.is_empty())
    }
}

/// The classes' forms, compiled.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    /// Each class's forms, in [`AnswerClass::ALL`]'s order; a class with none is never
    /// recognised.
    classes: Vec<(AnswerClass, Vec<Form>)>,
    /// The body regex of `bought` that has the group `remaining` (the stock the answer
    /// reports), if any.
    bought_remaining: Option<Regex>,
    /// Where a bought answer's order id is, when the service makes its own.
    order_from: Option<Taken>,
}

impl Classifier {
    /// Compiles the forms; one that cannot be read is refused, naming it and the problem.
    pub fn new(patterns: &Patterns) -> Result<Classifier, BadPattern> {
        let mut c = Classifier::default();
        for class in AnswerClass::ALL {
            let given = patterns.of(class);
            if given.is_empty() {
                continue;
            }
            let forms = given
                .iter()
                .map(|p| Form::parse(class, p))
                .collect::<Result<Vec<_>, _>>()?;
            if class == AnswerClass::Bought {
                c.bought_remaining = forms.iter().find_map(|f| match f {
                    Form::Body(re) if re.capture_names().any(|n| n == Some("remaining")) => {
                        Some(re.clone())
                    }
                    _ => None,
                });
            }
            c.classes.push((class, forms));
        }
        Ok(c)
    }

    /// The tutorial's answers, with the forms given for a class in place of its own.
    pub fn tutorial(patterns: &Patterns) -> Result<Classifier, BadPattern> {
        let or = |given: &[String], own: &str| match given.is_empty() {
            true => vec![own.to_string()],
            false => given.to_vec(),
        };
        Classifier::new(&Patterns {
            bought: or(&patterns.bought, TUTORIAL_BOUGHT),
            sold_out: or(&patterns.sold_out, TUTORIAL_SOLD_OUT),
            busy: or(&patterns.busy, TUTORIAL_BUSY),
            refused: patterns.refused.clone(),
            failed: patterns.failed.clone(),
        })
    }

    /// Takes the order id out of each bought answer with `pattern`: `json:/POINTER` (the
    /// value there, a string's text or a number's digits) or a regex with one group.
    pub fn with_order_from(mut self, pattern: &str) -> Result<Classifier, BadPattern> {
        self.order_from = Some(Taken::parse(pattern, r#""order_no":"([^"]+)""#)?);
        Ok(self)
    }

    /// Whether bought answers carry the order id the service made.
    pub fn takes_order_ids(&self) -> bool {
        self.order_from.is_some()
    }

    /// Whether any class was given: without one no answer says what was sold, and the run
    /// has nothing to judge.
    pub fn judges(&self) -> bool {
        !self.classes.is_empty()
    }

    /// What an answer with `status` and `body` (its first `KEPT_BODY` bytes) meant.
    pub fn classify(&self, status: u16, body: &[u8]) -> Ended {
        let mut json = Lazy::default();
        let class = self
            .classes
            .iter()
            .find(|(_, forms)| forms.iter().all(|f| f.holds(status, body, &mut json)))
            .map(|(class, _)| *class);
        let outcome = match class {
            Some(AnswerClass::Bought) => {
                return Ended::Answered {
                    outcome: Some(Outcome::Bought),
                    remaining: self.remaining(body),
                    order: self.order_id(body, &mut json),
                };
            }
            Some(AnswerClass::SoldOut) => Outcome::SoldOut,
            Some(AnswerClass::Busy) => Outcome::Busy,
            Some(AnswerClass::Refused) => Outcome::LimitReached,
            Some(AnswerClass::Failed) => {
                return Ended::Failed {
                    kind: ErrorKind::AnsweredFailed,
                    indeterminate: false,
                    message: format!("HTTP {status} said it failed: {}", snippet(body)),
                    hint: None,
                };
            }
            None => return self.unread(status, body),
        };
        Ended::Answered {
            outcome: Some(outcome),
            remaining: None,
            order: None,
        }
    }

    /// The stock a bought answer reports, when the bought regex has the group `remaining`.
    fn remaining(&self, body: &[u8]) -> Option<i64> {
        // Captures cost a second pass and an allocation, spent only on a purchase whose
        // pattern has the group.
        let re = self.bought_remaining.as_ref()?;
        re.captures(body).and_then(|caps| {
            caps.name("remaining")
                .and_then(|m| std::str::from_utf8(m.as_bytes()).ok())
                .and_then(|s| s.parse().ok())
        })
    }

    /// The order id a bought answer carries, when the service makes its own.
    fn order_id(&self, body: &[u8], json: &mut Lazy) -> Option<String> {
        self.order_from.as_ref()?.take_lazily(body, json)
    }

    /// An answer no class holds for.
    fn unread(&self, status: u16, body: &[u8]) -> Ended {
        if !self.judges() && (200..300).contains(&status) {
            return Ended::Answered {
                outcome: None,
                remaining: None,
                order: None,
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
mod tests;
