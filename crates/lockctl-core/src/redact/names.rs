//! Which names mark a secret: a header's, a parameter's or JSON key's, a flag's. By the name's
//! words, whatever its case and separators (`userPassword`, `X-Access-Token`, `PGPASSWORD`),
//! never by letters alone (`spinner`, `opinion` name no secret).

/// A header whose value is a credential, or may be: hiding the value of a harmless one (an
/// idempotency key) costs nothing. Any name with one of these in it, or with a secret's word
/// among its words (`X-Pin`, `X-User-Pwd`).
pub(super) fn is_secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
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
    .any(|word| lower.contains(word))
        || names_a_secret(name)
}

/// A parameter or JSON key whose value is a secret, by its name: one of its words is a
/// secret's ([`names_a_secret`]: `password`, `userPassword`, `new-password`, `loginPwd`,
/// `accessToken`, `pin`...), or its last word is `key` (`key`, `api_key`, `apiKey`).
/// `passfile`, `tokens`, `spinner`, `pinned` are no secrets: a word is matched whole, or by a
/// secret's ending (`mypassword`, `pgpassword`).
pub(super) fn is_secret_key(key: &str) -> bool {
    // libpq's `require_auth` names the methods a server may ask for, no secret; hidden, a
    // replay would take it from the environment for nothing.
    if key.eq_ignore_ascii_case("require_auth") {
        return false;
    }
    names_a_secret(key) || name_words(key).last().is_some_and(|w| w == "key")
}

/// A flag whose value is a secret (`--password`, `--api-token`, `--api-key`). Not every
/// `--...-key`: lockctl's are Redis keys (`--stock-key`) and files (`--tls-key`).
pub(super) fn is_secret_flag(flag: &str) -> bool {
    let words = name_words(flag);
    names_a_secret(flag) || words.ends_with(&["api".to_string(), "key".to_string()])
}

/// A flag's value that is a pattern saying where a secret is, not a secret: `hunt --token`
/// takes `json:/POINTER` or a regex with a group (`"tok":"([^"]+)"`) that finds the token in a
/// login's answer. A replay needs it as it is, and it gives nothing away. Any other value of
/// `--token` (`unlock --token`'s holder token) stays a secret.
pub(super) fn is_pattern_value(flag: &str, value: &str) -> bool {
    flag.trim_start_matches('-').eq_ignore_ascii_case("token")
        && (value.starts_with("json:") || (value.contains('(') && value.contains(')')))
}

/// Whether one of the words of `name` says "secret", whatever the name's case and separators
/// (`userPassword`, `UserPassword`, `user-password`, `user_password`, `user.password`,
/// `X-Access-Token`, `PIN`, `PGPASSWORD`, `requirepass`, a payment API's `sign`). Words, not
/// letters: `spinner`, `opinion`, `pinned`, `author`, `tokens`, `passfile`, `bypass` name no
/// secret.
pub fn names_a_secret(name: &str) -> bool {
    /// Words that mean a secret wherever they stand in a name, and names run together that
    /// mean one (`apikey`, `accesstoken`, `phpsessid`).
    const WORDS: [&str; 36] = [
        "password",
        "passwd",
        "pass",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "pin",
        "apikey",
        "auth",
        "oauth",
        "authorization",
        "credential",
        "credentials",
        "session",
        "sess",
        "cookie",
        "signature",
        "sig",
        "otp",
        "jwt",
        "bearer",
        "cvv",
        "cvc",
        "sslpassword",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "authtoken",
        "apitoken",
        "sessionid",
        "sessid",
        "phpsessid",
        "jsessionid",
        "privatekey",
        "clientsecret",
    ];
    /// Endings that make a word run together a secret's name (`pgpassword`, `dbpasswd`,
    /// `clientsecret`, `csrftoken`, `adminpwd`, and a server's `requirepass`, `rootpass`):
    /// environment variables and server flags are written so.
    const ENDINGS: [&str; 6] = ["password", "passwd", "passphrase", "secret", "token", "pwd"];
    /// Words that end in "pass" and mean no password.
    const NOT_PASS: [&str; 6] = [
        "bypass",
        "compass",
        "surpass",
        "overpass",
        "underpass",
        "trespass",
    ];
    name_words(name).iter().any(|w| {
        WORDS.contains(&w.as_str())
            || w == "sign"
            || ENDINGS.iter().any(|e| w.ends_with(e))
            || (w.len() > 4 && w.ends_with("pass") && !NOT_PASS.contains(&w.as_str()))
    })
}

/// The words of a name, in lower case: split at anything but a letter or a digit, where a
/// lower-case letter meets an upper-case one (`userPassword`), where an acronym meets a word
/// (`APIKey`: `api`, `key`), and where letters meet digits (`pin2`, `oauth2Token`).
pub(super) fn name_words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next = chars.get(i + 1).copied();
            let camel = prev.is_lowercase() && c.is_uppercase();
            let acronym_ends =
                prev.is_uppercase() && c.is_uppercase() && next.is_some_and(|n| n.is_lowercase());
            let digits = prev.is_alphanumeric() && (prev.is_ascii_digit() != c.is_ascii_digit());
            if (camel || acronym_ends || digits) && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}
