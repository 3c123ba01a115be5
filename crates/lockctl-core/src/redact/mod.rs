//! Secrets kept out of everything lockctl shows: one rule for every value a user types that
//! may carry one.
//!
//! A secret reaches lockctl in four shapes, and the rule knows each wherever it appears:
//! - a URL's user info, of any scheme (`redis://user:pw@host`, `postgres://...`,
//!   `http://...`); a lone word before the `@` may be a password typed where the user goes;
//! - a password-like parameter (`password`, `pass`, `pwd`, `secret`, `token`, `key`, `api_key`,
//!   `access_token`, `auth`, `sslpassword`, and any name ending in `_password`, `_secret`,
//!   `_token`, `_key`...; case-insensitive), in a URL's query or in a libpq key=value string,
//!   quoted or not;
//! - an HTTP header that carries a credential (`Authorization`, `Proxy-Authorization`,
//!   `Cookie`, `X-Api-Key`, any name with `auth`, `token`, `secret`, `key`, `session`...);
//! - on a command line, the value of a flag named like a secret (`--password`, `--api-key`);
//! - in a JSON text (a login's body, `{"user":"u1","password":"x"}`), the value of a key named
//!   like a secret, string or number; a value that is only a placeholder (`"{token}"`) is no
//!   secret and stays.
//!
//! Where it cannot tell whether something is a credential (a lone word before `@`, a URL too
//! malformed to say where its user info ends) it hides it: a message that shows too little
//! costs its reader a moment, a password once printed cannot be taken back.
//!
//! This module imports nothing else of the crate, so every layer can use it.

mod quoted;
mod urls;

use quoted::*;
use urls::*;

/// What a hidden secret is shown as.
pub const HIDDEN: &str = "***";

/// `text` (a URL, a connection string, a header, any one argument) with every secret it may
/// hold replaced by `***`.
pub fn redact(text: &str) -> String {
    if let Some((name, _)) = header(text, true)
        && is_secret_header(name)
    {
        return format!("{name}: {HIDDEN}");
    }
    let in_url = text.contains("://");
    let base = match text.contains('@') && (in_url || !is_libpq(text)) {
        true => hide_user_info(text),
        false => text.to_string(),
    };
    hide_json_values(&hide_parameters(&base, in_url))
}

/// `s` with the value of every password-like key of a JSON text replaced by `***`.
fn hide_json_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (a, b) in json_secret_values(s) {
        out.push_str(&s[at..a]);
        out.push_str(HIDDEN);
        at = b;
    }
    out.push_str(&s[at..]);
    out
}

/// The byte ranges of the values of password-like keys in a JSON text (`"password": "x"`: the
/// text between the quotes; `"pin": 1234`: the digits), wherever such a pair appears. A value
/// that is only placeholders (`"{token}"`) is filled in by lockctl and is no secret.
fn json_secret_values(s: &str) -> Vec<(usize, usize)> {
    let bytes = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while let Some(open) = s[i..].find('"').map(|j| i + j) {
        let Some(close) = string_end(s, open) else {
            break;
        };
        let key = &s[open + 1..close];
        let after = s[close + 1..].trim_start_matches([' ', '\t']);
        i = close + 1;
        let Some(value) = after.strip_prefix(':') else {
            continue;
        };
        let value = value.trim_start_matches([' ', '\t', '\n', '\r']);
        let start = s.len() - value.len();
        if !is_secret_key(key) {
            continue;
        }
        let span = match bytes.get(start) {
            Some(b'"') => string_end(s, start).map(|end| (start + 1, end)),
            Some(b) if b.is_ascii_digit() || *b == b'-' => Some((
                start,
                value
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
                    .map_or(s.len(), |j| start + j),
            )),
            _ => None,
        };
        if let Some((a, b)) = span
            && a < b
            && !only_placeholders(&s[a..b])
        {
            spans.push((a, b));
            i = b;
        }
    }
    spans
}

/// The index of the quote that closes the JSON string opening at `open`.
fn string_end(s: &str, open: usize) -> Option<usize> {
    let mut escaped = false;
    s[open + 1..]
        .char_indices()
        .find(|&(_, c)| {
            let end = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            end
        })
        .map(|(j, _)| open + 1 + j)
}

/// Whether `value` is nothing but lockctl's placeholders (`{token}`, `{user}`...): no secret,
/// and a replay needs it as it is. Empty counts as placeholders only.
pub fn only_placeholders(value: &str) -> bool {
    let mut rest = value;
    while !rest.is_empty() {
        match ["{sku}", "{user}", "{order}", "{n}", "{token}"]
            .iter()
            .find(|p| rest.starts_with(*p))
        {
            Some(p) => rest = &rest[p.len()..],
            None => return false,
        }
    }
    true
}

/// The value of `--header` (`Name: value`) with a credential's value hidden, and the rest
/// shown through [`redact`]. A header typed without its `:` (`Authorization Bearer t`, the
/// very mistake an error message quotes) is still recognised by its name.
pub fn redact_header(text: &str) -> String {
    let name_end = text
        .find(|c: char| c == ':' || c.is_whitespace())
        .unwrap_or(text.len());
    let name = text[..name_end].trim();
    if name_end < text.len() && is_secret_header(name) {
        let colon = text[name_end..].trim_start().starts_with(':');
        return format!("{name}{} {HIDDEN}", if colon { ":" } else { "" });
    }
    match text.split_once(':') {
        Some((name, value)) => {
            let shown = value.trim_start();
            let space = &value[..value.len() - shown.len()];
            format!("{name}:{space}{}", redact(shown))
        }
        None => redact(text),
    }
}

/// A command line as it may be shown (a report's `command_line`): each argument through
/// [`redact`], a `--header` value through [`redact_header`], and the value of a flag named like
/// a secret hidden whole, whether it follows the flag or is joined to it (`--flag=value`).
pub fn redact_command_line<S: AsRef<str>>(args: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out = Vec::new();
    let mut previous_flag: Option<String> = None;
    for arg in args {
        let arg = arg.as_ref();
        let shown = if let Some((flag, value)) = flag_and_value(arg) {
            previous_flag = None;
            format!("{flag}={}", redact_flag_value(flag, value))
        } else if is_flag(arg) {
            previous_flag = Some(arg.to_string());
            redact(arg)
        } else {
            match previous_flag.take() {
                Some(flag) => redact_flag_value(&flag, arg),
                None => redact(arg),
            }
        };
        out.push(shown);
    }
    out
}

/// Where the secrets of one command-line argument are, as byte ranges of `arg`, for a command
/// line that must still run once each range is filled in again (a replay that takes them from
/// the environment): `flag` is the flag `arg` is the value of, if any. The same rule as
/// [`redact_command_line`], with two differences a runnable line needs: a lone word before a
/// URL's `@` is a user's name (the URL's reader takes it so) and stays; and only a secret's
/// value is a range, never the text around it (a header's name, a URL's host).
pub fn secret_spans(flag: Option<&str>, arg: &str) -> Vec<(usize, usize)> {
    if flag.is_none()
        && let Some((flag, value)) = flag_and_value(arg)
    {
        let offset = flag.len() + 1;
        return shifted(secret_spans(Some(flag), value), offset);
    }
    let name = flag.map(|f| f.trim_start_matches('-'));
    match name {
        Some(n) if n.eq_ignore_ascii_case("header") => header_spans(arg),
        Some(n) if is_secret_flag(n) && !arg.is_empty() => vec![(0, arg.len())],
        _ => text_spans(arg),
    }
}

/// The secret ranges of a `--header` value (`Name: value`, or `Name value` typed without
/// its colon): a credential header's whole value, or the secrets inside another's.
fn header_spans(text: &str) -> Vec<(usize, usize)> {
    let name_end = text
        .find(|c: char| c == ':' || c.is_whitespace())
        .unwrap_or(text.len());
    let after_name = text[name_end..]
        .strip_prefix(':')
        .unwrap_or(&text[name_end..]);
    let value = after_name.trim_start();
    let start = text.len() - value.len();
    if name_end < text.len() && is_secret_header(text[..name_end].trim()) {
        return match value.is_empty() {
            true => Vec::new(),
            false => vec![(start, text.len())],
        };
    }
    shifted(text_spans(value), start)
}

/// The secret ranges of any one value: a credential header's value, a URL's password, the
/// values of password-like parameters.
fn text_spans(text: &str) -> Vec<(usize, usize)> {
    if let Some((name, value)) = header(text, true)
        && is_secret_header(name)
    {
        let shown = value.trim_start();
        return match shown.is_empty() {
            true => Vec::new(),
            false => vec![(text.len() - shown.len(), text.len())],
        };
    }
    let mut spans = Vec::new();
    // Every URL in the text, not only one that starts it (`--serve 'DB=postgres://u:pw@h ...'`):
    // from its scheme to the next space or quote.
    let mut from = 0;
    while let Some(i) = text[from..].find("://").map(|i| from + i) {
        let begin = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '+'))
            .map_or(0, |j| j + 1);
        let end = text[i..]
            .find(|c: char| c.is_whitespace() || c == '\'' || c == '"')
            .map_or(text.len(), |j| i + j);
        let url = &text[begin..end];
        if let Some(start) = scheme_end(url)
            && let Some(at) = user_info_end(url, start)
            && let Some(colon) = url[start..at].find(':')
            && start + colon + 1 < at
        {
            spans.push((begin + start + colon + 1, begin + at));
        }
        from = end.max(i + 3);
    }
    let in_url = text.contains("://");
    let mut done = 0;
    while let Some((a, b)) = secret_value(&text[done..], in_url) {
        let (a, b) = (done + a, done + b);
        // A parameter inside the user info is the password's, already a range.
        if a < b && !spans.iter().any(|&(x, y)| a < y && x < b) {
            spans.push((a, b));
        }
        done = match b > a {
            true => b,
            false => text[a..]
                .chars()
                .next()
                .map_or(text.len(), |c| a + c.len_utf8()),
        };
        if done >= text.len() {
            break;
        }
    }
    for (a, b) in json_secret_values(text) {
        if !spans.iter().any(|&(x, y)| a < y && x < b) {
            spans.push((a, b));
        }
    }
    spans.sort_unstable();
    spans
}

fn shifted(spans: Vec<(usize, usize)>, by: usize) -> Vec<(usize, usize)> {
    spans.into_iter().map(|(a, b)| (a + by, b + by)).collect()
}

/// `text` with the secrets of `source` (a URL, a connection string, a header) removed, in case
/// a driver's message ever quotes the one or the other: `source` itself where it appears whole,
/// and each of its secrets, also percent-decoded, wherever it appears.
pub fn scrub(text: &str, source: &str) -> String {
    if source.is_empty() {
        return text.to_string();
    }
    let mut text = text.replace(source, &redact(source));
    let mut secrets = secrets_of(source);
    // The longest first, so that a secret that contains another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret.as_str(), HIDDEN);
    }
    text
}

/// `--name` or `--name=...`: the flag, with the value joined to it.
fn flag_and_value(arg: &str) -> Option<(&str, &str)> {
    let (flag, value) = arg.split_once('=')?;
    is_flag(flag).then_some((flag, value))
}

/// A long flag: `--` and a name of letters, digits and dashes.
fn is_flag(arg: &str) -> bool {
    arg.strip_prefix("--").is_some_and(|name| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

fn redact_flag_value(flag: &str, value: &str) -> String {
    let name = flag.trim_start_matches('-');
    if name.eq_ignore_ascii_case("header") {
        redact_header(value)
    } else if is_secret_flag(name) {
        HIDDEN.to_string()
    } else {
        redact(value)
    }
}

/// `Name: value` split into the name and the value; with `spaced`, only when a space follows
/// the colon, as in a header a person writes (so that `host:port`, `sku:1` stay what they are).
fn header(text: &str, spaced: bool) -> Option<(&str, &str)> {
    let (name, value) = text.split_once(':')?;
    let is_token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let starts_right = !spaced || value.starts_with([' ', '\t']);
    (is_token && starts_right).then_some((name, value))
}

/// A header whose value is a credential, or may be: hiding the value of a harmless one (an
/// idempotency key) costs nothing.
fn is_secret_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "auth",
        "cookie",
        "token",
        "secret",
        "passw",
        "key",
        "session",
        "credential",
        "signature",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// A parameter whose value is a secret, by its name: `password`, `token`, `client_secret`,
/// `api_key`, `key`... Case and `-`/`_`/`.` do not matter; `passfile` and `mypassword` are not
/// secrets.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['-', '.'], "_");
    is_secret_name(&key) || key == "key" || key.ends_with("_key")
}

/// A flag whose value is a secret (`--password`, `--api-token`, `--api-key`). Not every
/// `--...-key`: lockctl's are Redis keys (`--stock-key`) and files (`--tls-key`).
fn is_secret_flag(flag: &str) -> bool {
    let name = flag
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_");
    is_secret_name(&name) || name.ends_with("api_key")
}

/// Names that say "secret" whatever carries them (`key` as it is, with '_' for '-' and '.').
fn is_secret_name(key: &str) -> bool {
    const NAMES: [&str; 12] = [
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "token",
        "apikey",
        "access_token",
        "auth",
        "sslpassword",
        "signature",
        "sig",
    ];
    const ENDINGS: [&str; 7] = [
        "_password",
        "_passwd",
        "_pwd",
        "_secret",
        "_token",
        "_apikey",
        "_signature",
    ];
    NAMES.contains(&key) || ENDINGS.iter().any(|e| key.ends_with(e))
}

#[cfg(test)]
mod tests;
