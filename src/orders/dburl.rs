//! `--db` values with their passwords hidden, for every message that shows one.
//!
//! PostgreSQL takes two forms, and a password hides in either: a URL
//! (`postgres://user:pw@host/db`, or `?password=pw` in its query) and libpq's key=value string
//! (`host=h password=pw`, or `password='p w'` quoted). Both are handled here, so a message can
//! quote the value the user typed without quoting the secret in it.

/// `url` with every password in it replaced by `***`.
pub fn redact(url: &str) -> String {
    let base = if url.contains("://") {
        crate::conn::redact_url(url)
    } else {
        url.to_string()
    };
    let mut out = String::with_capacity(base.len());
    let mut rest = base.as_str();
    while let Some((start, end)) = password_value(rest, url.contains("://")) {
        out.push_str(&rest[..start]);
        out.push_str("***");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `text` with every password of `url` in it replaced by `***`, in case a driver message
/// ever quotes one.
pub fn scrub(text: &str, url: &str) -> String {
    let mut text = text.replace(url, &redact(url));
    for secret in passwords(url) {
        if !secret.is_empty() {
            text = text.replace(&secret, "***");
        }
    }
    text
}

/// The passwords written in `url`, as written (quotes removed).
fn passwords(url: &str) -> Vec<String> {
    let is_url = url.contains("://");
    let mut out = Vec::new();
    if is_url
        && let Some(rest) = url.split_once("://").map(|(_, r)| r)
        && let Some(at) = rest.rfind('@')
        && let Some((_, pw)) = rest[..at].split_once(':')
    {
        out.push(pw.to_string());
    }
    let mut rest = url;
    while let Some((start, end)) = password_value(rest, is_url) {
        out.push(rest[start..end].trim_matches('\'').replace("\\'", "'"));
        rest = &rest[end..];
    }
    out
}

/// The byte range of the first `password=` value in `s`: up to the next space (or `&` in a
/// URL's query), or the whole of a quoted value.
fn password_value(s: &str, is_url: bool) -> Option<(usize, usize)> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let key = from + i;
        from = key + "password".len();
        let boundary = key == 0 || matches!(s.as_bytes()[key - 1], b' ' | b'\t' | b'?' | b'&');
        let after = s[from..].trim_start();
        if !boundary || !after.starts_with('=') {
            continue;
        }
        let value = after[1..].trim_start();
        let start = s.len() - value.len();
        let len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let end = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                end
            });
            close.map_or(value.len(), |(j, _)| j + 2)
        } else {
            value
                .find(|c: char| c.is_whitespace() || (is_url && matches!(c, '&' | '#')))
                .unwrap_or(value.len())
        };
        return Some((start, start + len));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_passwords_are_hidden_quoted_or_not() {
        assert_eq!(
            redact("host=127.0.0.1 password=s3cret user=u port=1"),
            "host=127.0.0.1 password=*** user=u port=1"
        );
        assert_eq!(
            redact("password = 'a b\\'c' host=h"),
            "password = *** host=h"
        );
        assert_eq!(redact("host=h PASSWORD=x"), "host=h PASSWORD=***");
        assert_eq!(redact("host=h mypassword=x"), "host=h mypassword=x");
    }

    #[test]
    fn url_passwords_are_hidden_in_the_user_info_and_the_query() {
        assert_eq!(
            redact("postgres://u:s3cret@h/db?password=two&sslmode=disable"),
            "postgres://u:***@h/db?password=***&sslmode=disable"
        );
        // As for --redis: a lone word before the '@' may be a password typed there.
        assert_eq!(redact("postgres://u@h/db"), "postgres://***@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn scrub_removes_every_password_from_a_message() {
        let url = "host=h password='p w' user=u";
        assert_eq!(scrub("failed for p w at h", url), "failed for *** at h");
        let url = "postgres://u:s3cret@h/db";
        assert_eq!(scrub("bad s3cret", url), "bad ***");
    }
}
