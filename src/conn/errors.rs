//! Driver errors turned into words a user can act on, and passwords kept out of every message.

use redis::{ErrorKind, RedisError};

/// What is wrong with a URL the driver would not parse, and what form is expected.
pub(super) fn url_problem(url: &str) -> String {
    const FORMS: &str = "expected redis://host:port[/db], rediss://host:port (TLS) or \
                         redis+unix:///path/to/socket";
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        None => format!("it has no scheme; {FORMS}"),
        Some("redis" | "rediss" | "redis+unix" | "unix") => {
            let port = url
                .rsplit_once(':')
                .map(|(_, p)| p.split('/').next().unwrap_or(""))
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty());
            match port.map(|p| p.parse::<u16>()) {
                Some(Err(_)) => format!("the port is not a number from 1 to 65535; {FORMS}"),
                _ => format!("it does not parse as a Redis URL; {FORMS}"),
            }
        }
        Some(other) => format!("{other}:// is not a Redis URL scheme; {FORMS}"),
    }
}

/// An I/O error of kind `Interrupted` (EINTR) somewhere in `e`'s chain; the driver does not
/// expose its I/O error, so its text is the fallback.
pub(super) fn is_interrupted(e: &RedisError) -> bool {
    if e.kind() != ErrorKind::Io {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = s.source();
    }
    e.to_string().contains("(os error 4)")
}

pub(super) fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

pub(super) fn is_tls_error(e: &RedisError) -> bool {
    let text = e.to_string().to_lowercase();
    ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|w| text.contains(w))
}

pub(super) fn auth_reason(e: &RedisError) -> String {
    match e.code() {
        Some("NOAUTH") => "this server requires a password".into(),
        _ => "wrong user name or password".into(),
    }
}

/// Keeps an error message to one readable line: a driver message can quote a whole reply.
pub(super) fn shorten(text: String) -> String {
    const MAX: usize = 300;
    let text = text.replace(['\r', '\n'], " ");
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Removes `url`'s password from `text`, in case a driver message ever quotes the URL.
pub(super) fn scrub(text: &str, url: &str) -> String {
    let text = text.replace(url, &redact_url(url));
    match password_of(url) {
        Some(p) if !p.is_empty() => text.replace(p, "***"),
        _ => text,
    }
}

pub(super) fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.find('@')?];
    userinfo.split_once(':').map(|(_, p)| p)
}

/// `url` with any password replaced by `***`, for messages. A URL too malformed to have a
/// clear password (`redis//:pw@host`, `redis:/:pw@host`) loses everything before its last
/// `@` but the scheme: whatever looks like credentials is never shown.
pub fn redact_url(url: &str) -> String {
    let well_formed = url.find("://").is_some_and(|i| {
        let scheme = &url[..i];
        !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+')
    });
    let Some(at) = url.rfind('@') else {
        return url.to_string();
    };
    if !well_formed {
        // No telling what before the '@' is a password: none of it is shown.
        return format!("***{}", &url[at..]);
    }
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..at].split_once(':') {
        // user:password: the user stays, the password goes.
        Some((user, _)) => format!("{}{user}:***{}", &url[..start], &url[at..]),
        // A single word where the user goes may well be a password typed there.
        None => format!("{}***{}", &url[..start], &url[at..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::{ConnectOptions, Target};

    #[test]
    fn redact_url_hides_the_password_only() {
        assert_eq!(
            redact_url("redis://alice:s3cret@host:6380/2"),
            "redis://alice:***@host:6380/2"
        );
        assert_eq!(redact_url("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn malformed_urls_lose_whatever_looks_like_credentials() {
        for (bad, shown) in [
            ("redis//:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("redis:/:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("redis:S3cr3tPW@h", "***@h"),
            ("://u:S3cr3tPW@h", "***@h"),
            ("x y:S3cr3tPW@a@h", "***@h"),
            ("S3cr3tPW@127.0.0.1:6390", "***@127.0.0.1:6390"),
            (
                "redis://S3cr3tPW@127.0.0.1:99999",
                "redis://***@127.0.0.1:99999",
            ),
            ("redis://alice:S3cr3tPW@h/2", "redis://alice:***@h/2"),
        ] {
            assert_eq!(redact_url(bad), shown, "{bad}");
        }
        assert_eq!(redact_url("localhost:6379"), "localhost:6379");
    }

    #[test]
    fn scrub_removes_the_password_from_any_text() {
        let url = "redis://u:hunter2@h:1";
        assert_eq!(scrub("bad hunter2 here", url), "bad *** here");
    }

    #[test]
    fn a_malformed_url_is_an_error_that_hides_the_password() {
        let err = Target::open("redis://u:hunter2@host:notaport", ConnectOptions::default())
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("--redis"), "{err}");
    }
}
