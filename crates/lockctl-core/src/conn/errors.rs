//! Driver errors turned into words a user can act on; passwords are kept out of them by
//! [`crate::redact`].

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

#[cfg(test)]
mod tests {
    use crate::conn::{ConnectOptions, Target};

    #[test]
    fn a_malformed_url_is_an_error_that_hides_the_password() {
        let e =
            Target::open("redis://u:hunter2@host:notaport", ConnectOptions::default()).unwrap_err();
        let err = e.to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("host:notaport"), "{err}");
        // The library names the fix as data; it says nothing of any program's flags.
        assert_eq!(e.hint(), Some(crate::Hint::RedisUrl { flag: None }));
        assert!(!err.contains("--"), "{err}");
    }
}
