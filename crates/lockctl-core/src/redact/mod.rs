//! Secrets kept out of everything lockctl shows: one rule for every value a user types that
//! may carry one.
//!
//! A secret reaches lockctl in five shapes, and the rule knows each wherever it appears:
//! - a URL's user info, of any scheme (`redis://user:pw@host`, `postgres://...`,
//!   `http://...`); a lone word before the `@` may be a password typed where the user goes;
//! - a password-like parameter in a URL's query or in a libpq key=value string, quoted or
//!   not: one whose name has a secret's word among its words, whatever its case and
//!   separators (`password`, `userPassword`, `new-password`, `loginPwd`, `X-Access-Token`,
//!   `pin`, `api_key`, `sessionId`, `auth`, `cookie`, `secret`...; see [`names_a_secret`]),
//!   or whose last word is `key`. Words, not letters: `spinner`, `pinned`, `author` and
//!   `tokens` are no secrets;
//! - an HTTP header that carries a credential (`Authorization`, `Proxy-Authorization`,
//!   `Cookie`, `X-Api-Key`, any name with `auth`, `token`, `secret`, `key`, `session`...);
//! - on a command line, the value of a flag named like a secret (`--password`, `--api-key`);
//!   not a pattern that says where a secret is (`hunt --token json:/data/accessToken`);
//! - in a JSON text (a login's body, `{"user":"u1","password":"x"}`), the value of a key named
//!   like a secret, string or number; a value that is only a placeholder (`"{token}"`) is no
//!   secret and stays.
//!
//! A server's answer quoted in a message goes through [`redact_answer`]: its secret-named JSON
//! values, and any string random enough to be a token, hidden.
//!
//! Where it cannot tell whether something is a credential (a lone word before `@`, a URL too
//! malformed to say where its user info ends) it hides it: a message that shows too little
//! costs its reader a moment, a password once printed cannot be taken back.
//!
//! This module imports nothing else of the crate, so every layer can use it.

mod names;
mod quoted;
mod urls;

pub use names::names_a_secret;
use names::*;
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
    hide_spaced(&hide_json_values(&hide_parameters(&base, in_url)))
}

/// `text` with the secrets [`spaced_secrets`] finds replaced by `***`.
fn hide_spaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (a, b) in spaced_secrets(text) {
        if a < from {
            continue;
        }
        out.push_str(&text[from..a]);
        out.push_str(HIDDEN);
        from = b;
    }
    out.push_str(&text[from..]);
    out
}

/// A server's answer as it may be quoted (a failed login's, in an error): the values of its
/// secret-named JSON keys (`"accessToken":"..."`, `"sessionId":"..."`) and every string that
/// looks random enough to be a credential (a JWT's parts, 20 or more characters of hex or
/// base64 with letters and digits) replaced by `***`. An answer that fails to carry a token
/// where `--token` looks often carries it elsewhere; quoted whole, it would print a live
/// token of the user it logged in.
pub fn redact_answer(text: &str) -> String {
    let text = hide_json_values(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find(is_token_char) {
        let len = rest[start..]
            .find(|c: char| !is_token_char(c))
            .unwrap_or(rest.len() - start);
        let run = &rest[start..start + len];
        out.push_str(&rest[..start]);
        if is_jwt(run) {
            out.push_str(HIDDEN);
        } else {
            // Each dotted part on its own: `api.example.com`, `v1.2.3` stay.
            let parts: Vec<&str> = run
                .split('.')
                .map(|p| if looks_random(p) { HIDDEN } else { p })
                .collect();
            out.push_str(&parts.join("."));
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// A Redis key's name as it may be shown: its pattern, with each part that may be a secret (a
/// session's or a token's random id, a UUID, a JWT) and all that follows it in that part
/// written `*`: `sess:9f86d081884c7d659a2feaa0c55ad015` is shown as `sess:*`, and
/// `user_42_session_<token>` as `user_42_session_*`. `keep` (the round's SKU) is kept
/// verbatim wherever it appears: it is lockctl's own, and the most useful part to a reader.
/// A key a system keeps for a logged-in user is named by that user's live token often
/// enough that no key a report names is shown whole.
pub fn key_pattern(key: &str, keep: &str) -> String {
    if !keep.is_empty() && key.contains(keep) {
        return key
            .split(keep)
            .map(|part| key_pattern(part, ""))
            .collect::<Vec<_>>()
            .join(keep);
    }
    let mut out = String::with_capacity(key.len());
    let mut rest = key;
    while let Some(start) = rest.find(is_token_char) {
        let len = rest[start..]
            .find(|c: char| !is_token_char(c))
            .unwrap_or(rest.len() - start);
        let run = &rest[start..start + len];
        out.push_str(&rest[..start]);
        // A JWT whole; otherwise from the first piece (between `_`, `-`, `.`) that looks
        // random to the end of the run.
        let mut at = 0;
        let cut = match is_jwt(run) {
            true => Some(0),
            false => run.split(['_', '-', '.']).find_map(|piece| {
                let here = at;
                at += piece.len() + 1;
                key_piece_is_secret(piece).then_some(here)
            }),
        };
        match cut {
            Some(cut) => {
                out.push_str(&run[..cut]);
                out.push('*');
            }
            None => out.push_str(run),
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// A piece of a key's name that may be a secret id: random-looking (as in an answer), 8 or
/// more hex digits with letters and digits both (a hex token, a UUID's first piece), 12 or
/// more letters and digits mixed, or 16 or more digits.
fn key_piece_is_secret(piece: &str) -> bool {
    let b = piece.as_bytes();
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    let letters = b.iter().filter(|c| c.is_ascii_alphabetic()).count();
    looks_random(piece)
        || (b.len() >= 8 && b.iter().all(u8::is_ascii_hexdigit) && digits > 0 && letters > 0)
        || (b.len() >= 12 && digits > 0 && letters > 0)
        || (b.len() >= 16 && digits == b.len())
}

/// The characters of a token: base64's and base64url's, which also make hex and UUIDs, and
/// the dots that join a JWT's parts.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.')
}

/// A JSON Web Token: three base64url parts, the first a JSON object's (`eyJ`, `{"`); its
/// payload may be short enough to pass for a word, and is hidden with the rest.
fn is_jwt(run: &str) -> bool {
    run.starts_with("eyJ") && run.split('.').count() == 3
}

/// A run of token characters too long and mixed to be a word or a number: 20 or more, letters
/// and digits both. A path (`/api/v1/orders/12345`) has both too, and is no secret: a run
/// with a `/` must also mix upper and lower case, as base64 does.
fn looks_random(run: &str) -> bool {
    let has = |f: fn(&u8) -> bool| run.as_bytes().iter().any(f);
    run.len() >= 20
        && has(u8::is_ascii_digit)
        && has(u8::is_ascii_alphabetic)
        && (!run.contains('/') || (has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase)))
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
        if let Some((a, b)) = span {
            if a < b && !only_placeholders(&s[a..b]) {
                spans.push((a, b));
            }
            // Past a string value's closing quote: taken for an opening one, it would pair
            // every quote after it wrongly, and the next key would go unread.
            i = if bytes.get(b) == Some(&b'"') {
                b + 1
            } else {
                b
            };
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
        Some(n) if is_pattern_value(n, arg) => Vec::new(),
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
    for (a, b) in json_secret_values(text)
        .into_iter()
        .chain(spaced_secrets(text))
    {
        if !spans.iter().any(|&(x, y)| a < y && x < b) {
            spans.push((a, b));
        }
    }
    spans.sort_unstable();
    spans
}

/// The secrets a command or a header value carries after a word rather than an `=`: the value
/// of a secret flag inside a command (`--serve 'redis-server --requirepass pw'`, `mysqld
/// --password pw`), and the credential after `Basic` or `Bearer` in any header's value.
fn spaced_secrets(text: &str) -> Vec<(usize, usize)> {
    let words: Vec<(usize, &str)> = text
        .split_whitespace()
        .map(|w| (w.as_ptr() as usize - text.as_ptr() as usize, w))
        .collect();
    let mut spans = Vec::new();
    for pair in words.windows(2) {
        let ((_, word), (at, next)) = (pair[0], pair[1]);
        let flag = word
            .strip_prefix("--")
            .or_else(|| word.strip_prefix('-'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let secret_flag = flag.is_some_and(names_a_secret) && !next.starts_with('-');
        let scheme = matches!(
            word.trim_start_matches(['"', '\'']),
            "Basic" | "Bearer" | "basic" | "bearer"
        );
        if secret_flag || scheme {
            let value = next.trim_end_matches(['"', '\'', ',', ';']);
            if !value.is_empty() && !only_placeholders(value) {
                spans.push((at, at + value.len()));
            }
        }
    }
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
    } else if is_pattern_value(name, value) {
        value.to_string()
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

#[cfg(test)]
mod tests;
