//! The secrets a source holds, as a driver or a server could quote them back in a message:
//! for [`super::scrub`] to find wherever they appear.

use super::*;

/// The secrets written in `source`, as a driver could quote them: a credential header's value
/// (and its last word, the token after `Bearer`), the password of a URL's user info, and the
/// values of password-like parameters (unquoted); each also percent-decoded. A lone word
/// before `@` is not among them: it is as likely the user's name, which a message may name.
pub(super) fn secrets_of(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((name, value)) = header(source, false)
        && is_secret_header(name)
    {
        let value = value.trim();
        out.push(value.to_string());
        if let Some((_, last)) = value.rsplit_once(char::is_whitespace) {
            out.push(last.to_string());
        }
    }
    if let Some(start) = scheme_end(source)
        && let Some(at) = user_info_end(source, start)
        && let Some((_, password)) = source[start..at].split_once(':')
    {
        out.push(password.to_string());
    }
    let in_url = source.contains("://");
    let mut rest = source;
    while let Some((start, end)) = secret_value(rest, in_url) {
        out.push(unquote(&rest[start..end]));
        rest = &rest[end..];
    }
    for (a, b) in json_secret_values(source) {
        out.push(source[a..b].to_string());
    }
    let decoded: Vec<String> = out
        .iter()
        .filter_map(|s| percent_decoded(s).filter(|d| d != s))
        .collect();
    out.extend(decoded);
    out
}

/// A libpq value as the server gets it: quotes removed, `\'` and `\\` unescaped.
pub(super) fn unquote(value: &str) -> String {
    let Some(quote) = value.chars().next().filter(|c| matches!(c, '\'' | '"')) else {
        return value.to_string();
    };
    let inner = value[1..].strip_suffix(quote).unwrap_or(&value[1..]);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// `%XX` escapes decoded; `None` when `s` has none or they do not decode to UTF-8.
pub(super) fn percent_decoded(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| {
            let h = std::str::from_utf8(h).ok()?;
            u8::from_str_radix(h, 16).ok()
        });
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
