//! Secrets in URLs and in parameter strings: where a URL's user info ends, which of its query
//! parameters (or a libpq `key=value` string's) hold secrets, and how far each value runs.

use super::*;

/// Index just past `scheme://`, when `url` starts with a well-formed scheme.
pub(super) fn scheme_end(url: &str) -> Option<usize> {
    let i = url.find("://")?;
    let scheme = &url[..i];
    let well_formed = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+');
    well_formed.then_some(i + 3)
}

/// Where the user info of `url` (its scheme ending at `start`) ends: the `@` before the host;
/// `None` when it has none.
///
/// The last `@` of the URL, except in a web URL whose authority is a plain host: there an `@`
/// after the host (an e-mail address in the query, `/@user` in the path) is data, as it is
/// to every HTTP client. Anywhere else the last `@` it is, so that a password holding `/`,
/// `?` or `#` is hidden whole.
pub(super) fn user_info_end(url: &str, start: usize) -> Option<usize> {
    let last = url.rfind('@').filter(|&at| at >= start)?;
    let scheme = url[..start - 3].to_ascii_lowercase();
    if matches!(scheme.as_str(), "http" | "https" | "ws" | "wss") {
        let end = url[start..]
            .find(['/', '?', '#'])
            .map_or(url.len(), |i| start + i);
        if let Some(i) = url[start..end].rfind('@') {
            return Some(start + i);
        }
        if is_plain_host(&url[start..end]) {
            return None;
        }
    }
    Some(last)
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`, and nothing else.
pub(super) fn is_plain_host(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, after)) if !v6.is_empty() => ("v6", after),
            _ => return false,
        },
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'%'));
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

/// `url` with its user info's password replaced by `***`. A lone word where the user goes may
/// well be a password typed there, and goes too, except in a PostgreSQL or MySQL URL, whose
/// grammar makes it the user name (`postgres://postgres@h/db`: hidden, a replay of it named a
/// user nobody could guess, and a reader took it for a password that was not there). A URL too malformed to have a clear password
/// (`redis//:pw@host`, `redis:/:pw@host`, `pw@host`) loses everything before its last `@`:
/// whatever looks like credentials is never shown.
pub(super) fn hide_user_info(url: &str) -> String {
    let Some(last) = url.rfind('@') else {
        return url.to_string();
    };
    let Some(start) = scheme_end(url) else {
        // No telling what before the '@' is a password: none of it is shown.
        return format!("{HIDDEN}{}", &url[last..]);
    };
    let Some(at) = user_info_end(url, start) else {
        return url.to_string();
    };
    match url[start..at].split_once(':') {
        // user:password: the user stays, the password goes.
        Some((user, _)) => format!("{}{user}:{HIDDEN}{}", &url[..start], &url[at..]),
        None if is_sql_scheme(&url[..start - 3]) => url.to_string(),
        None => format!("{}{HIDDEN}{}", &url[..start], &url[at..]),
    }
}

/// Whether `scheme` is a SQL database's, whose URL's lone user info is a user name.
fn is_sql_scheme(scheme: &str) -> bool {
    matches!(
        scheme.to_ascii_lowercase().as_str(),
        "postgres" | "postgresql" | "mysql" | "mariadb"
    )
}

/// `s` with the value of every password-like parameter replaced by `***`.
pub(super) fn hide_parameters(s: &str, in_url: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some((start, end)) = secret_value(rest, in_url) {
        out.push_str(&rest[..start]);
        out.push_str(HIDDEN);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Bytes that may come before a parameter's name: the start of a libpq pair, of a URL's query
/// or fragment parameter, of a path parameter.
pub(super) fn is_separator(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'?' | b'&' | b';' | b'#' | b'/' | b',')
}

pub(super) fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// The byte range of the first password-like parameter's value in `s` (`name=value`,
/// `name = 'quoted value'`).
pub(super) fn secret_value(s: &str, in_url: bool) -> Option<(usize, usize)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_key = (i == 0 || is_separator(bytes[i - 1])) && is_key_char(bytes[i] as char);
        if !starts_key {
            i += 1;
            continue;
        }
        let key_end = s[i..].find(|c| !is_key_char(c)).map_or(s.len(), |j| i + j);
        if let Some(value) = s[key_end..]
            .trim_start_matches([' ', '\t'])
            .strip_prefix('=')
            && is_secret_key(&s[i..key_end])
        {
            // libpq allows spaces after the '=' too, and so the value starts after them.
            let value = value.trim_start_matches([' ', '\t']);
            let start = s.len() - value.len();
            return Some((start, start + value_len(value, in_url)));
        }
        i = key_end;
    }
    None
}

/// The length of the value at the start of `value`: a quoted one whole (libpq escapes a quote
/// with `\`), otherwise up to a space, or in a URL up to the next parameter.
pub(super) fn value_len(value: &str, in_url: bool) -> usize {
    if let Some(quote) = value.chars().next().filter(|c| matches!(c, '\'' | '"')) {
        let mut escaped = false;
        let close = value[1..].char_indices().find(|&(_, c)| {
            let end = c == quote && !escaped;
            escaped = c == '\\' && !escaped;
            end
        });
        return close.map_or(value.len(), |(j, _)| j + 2);
    }
    value
        .find(|c: char| c.is_whitespace() || (in_url && c == '&'))
        .unwrap_or(value.len())
}

/// A libpq key=value string (`host=h user=u password=pw`): pairs whose keys are all libpq's
/// own. An `@` in one (`user=admin@server`, as some hosted PostgreSQL wants) is the user's
/// name, not the end of a URL's user info.
pub(super) fn is_libpq(s: &str) -> bool {
    const KEYS: [&str; 43] = [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "keepalives_retries",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "sslnegotiation",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslcertmode",
        "sslpassword",
        "sslkeylogfile",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ];
    let mut rest = s.trim_start();
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let key_end = rest.find(|c| !is_key_char(c)).unwrap_or(rest.len());
        if !KEYS.contains(&&rest[..key_end]) {
            return false;
        }
        let Some(value) = rest[key_end..].trim_start().strip_prefix('=') else {
            return false;
        };
        let value = value.trim_start();
        rest = value[value_len(value, false)..].trim_start();
    }
    true
}
