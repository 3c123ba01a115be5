//! Parsers for the values a user types: numbers with messages that say what is expected, and
//! names checked like SKUs.

use lockctl_core::sku::{BadName, check_name, check_order_id, check_user_id};

/// A whole number from `min` to `max`, with a message that says so (a negative number is
/// taken as a value, not as a flag, so that it gets this message).
pub fn whole(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| {
        let t = s.trim();
        if let Some(rest) = t.strip_prefix('-')
            && !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(format!("must be {min} or more, not {t}"));
        }
        match t.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            Ok(n) => Err(format!("must be from {min} to {max}, not {n}")),
            Err(_) => Err(format!(
                "must be a whole number from {min} to {max}, not '{s}'"
            )),
        }
    }
}

pub fn order_id(s: &str) -> Result<String, BadName> {
    check_order_id(s).map(|()| s.to_string())
}

pub fn token(s: &str) -> Result<String, BadName> {
    check_name("a token", "5f0c...e21a (see lockctl status)", s).map(|()| s.to_string())
}

pub fn user_id(s: &str) -> Result<String, BadName> {
    check_user_id(s).map(|()| s.to_string())
}

/// A Redis URL as typed, or as `REDIS_URL` holds it: anything but nothing (an empty
/// `REDIS_URL=` is a setting left half-done, not a URL to parse). The URL itself is read later,
/// where its errors can hide a password.
pub fn redis_url(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err(
            "the Redis URL is empty (is REDIS_URL set to an empty string? unset it, or \
                    give --redis redis://host:port)"
                .into(),
        );
    }
    Ok(s.to_string())
}
