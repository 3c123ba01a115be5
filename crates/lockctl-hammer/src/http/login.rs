//! Users who log in: each user's token, for `{token}` in its requests. A login request is sent
//! once for each user before the run that first needs it (before the run's clock starts: not
//! timed, not judged), and its token taken out of the answer; or the tokens are given, one per
//! user (a users file), for services whose tokens come from elsewhere.
//!
//! The one idea: a login is set-up, not load. Done before the run, a slow login never counts
//! against the service's latency, and a login that fails says the facts are wrong (a bad
//! password, the wrong token pattern), so it ends the run as a usage error naming the answer,
//! instead of a round of 401s judged as errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use lockctl_core::conn::TlsFiles;

use super::classify::Taken;
use super::probe::{Got, once};
use super::request::{RequestSpec, Vars};
use super::tls::Tls;

/// Where the token is in a login's answer when no pattern is given: the first of these that
/// holds a non-empty value (a bare `{"token":...}`, OAuth's `access_token`, and both under a
/// `data` envelope, as APIs answering `{"code":0,"data":{...}}` put them).
pub const DEFAULT_TOKEN_AT: [&str; 4] = [
    "json:/token",
    "json:/access_token",
    "json:/data/token",
    "json:/data/access_token",
];

/// How much of a login's answer is read for its token.
const LOGIN_BODY: usize = 64 * 1024;

/// How much of a failed login's answer an error shows.
const SHOWN: usize = 200;

/// How users get their tokens.
#[derive(Debug)]
enum Source {
    /// A login request per user, the token taken from its answer by the first pattern that
    /// finds one.
    Login {
        request: Box<RequestSpec>,
        token_at: Vec<(String, Taken)>,
        /// For an `https://` login: the system's roots unless [`Logins::with_tls`] says.
        tls: Option<Tls>,
    },
    /// Given: a user without one has none.
    Given,
}

/// Every user's token, as far as it is known; shared by the runs of a hunt, so that a user
/// logs in once per hunt.
#[derive(Debug)]
pub struct Logins {
    source: Source,
    tokens: Mutex<HashMap<String, String>>,
}

/// The tokens of one run's users.
pub type Tokens = Arc<HashMap<String, String>>;

impl Logins {
    /// Users log in with `request` (its placeholders filled as a purchase's are, `{token}`
    /// empty), the token taken out of the answer by `token_at` (`json:/POINTER` or a regex
    /// with one group; [`DEFAULT_TOKEN_AT`] when `None`).
    pub fn new(
        request: RequestSpec,
        token_at: Option<&str>,
    ) -> std::result::Result<Logins, super::BadPattern> {
        let patterns: Vec<&str> = match token_at {
            Some(p) => vec![p],
            None => DEFAULT_TOKEN_AT.to_vec(),
        };
        let token_at = patterns
            .into_iter()
            .map(|p| Taken::parse(p, r#""token":"([^"]+)""#).map(|t| (p.to_string(), t)))
            .collect::<std::result::Result<_, _>>()?;
        Ok(Logins {
            source: Source::Login {
                tls: Tls::of(&request, &TlsFiles::default()).ok().flatten(),
                request: Box::new(request),
                token_at,
            },
            tokens: Mutex::new(HashMap::new()),
        })
    }

    /// The same logins, an `https://` one trusting the CA in `files` instead of the system's
    /// roots (and showing its client certificate, if any). An error names the file.
    pub fn with_tls(mut self, files: &TlsFiles) -> Result<Logins> {
        if let Source::Login { request, tls, .. } = &mut self.source {
            *tls = Tls::of(request, files)?;
        }
        Ok(self)
    }

    /// The tokens given, `(user, token)` each.
    pub fn given(pairs: Vec<(String, String)>) -> Logins {
        Logins {
            source: Source::Given,
            tokens: Mutex::new(pairs.into_iter().collect()),
        }
    }

    /// The tokens of `users`, each user without one logged in first, up to `concurrency` at a
    /// time, each login within `limit`. The first login that fails is the error (a usage
    /// error: the facts are wrong), naming the user and the answer.
    pub(super) fn tokens_of(
        &self,
        users: &[String],
        sku: &str,
        limit: Duration,
        concurrency: usize,
    ) -> Result<Tokens> {
        let missing: Vec<String> = {
            let known = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            let mut seen = std::collections::HashSet::new();
            users
                .iter()
                .filter(|u| !known.contains_key(*u) && seen.insert(u.as_str()))
                .cloned()
                .collect()
        };
        if let (
            Source::Login {
                request,
                token_at,
                tls,
            },
            false,
        ) = (&self.source, missing.is_empty())
        {
            let got = log_in(
                request,
                tls.as_ref(),
                token_at,
                &missing,
                sku,
                limit,
                concurrency,
            )?;
            self.tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(got);
        }
        let known = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::new(
            users
                .iter()
                .filter_map(|u| known.get(u).map(|t| (u.clone(), t.clone())))
                .collect(),
        ))
    }
}

impl Logins {
    /// `user`'s token: the one known, or (a user the set-up did not log in: a sale's later
    /// clicks) a login now, on the run's own runtime. `None`: given tokens, none for `user`.
    pub(super) async fn token_now(
        &self,
        user: &str,
        sku: &str,
        n: u64,
        limit: Duration,
    ) -> Result<Option<String>> {
        let known = (self.tokens.lock().unwrap_or_else(|e| e.into_inner()))
            .get(user)
            .cloned();
        if let Some(token) = known {
            return Ok(Some(token));
        }
        let Source::Login {
            request,
            token_at,
            tls,
        } = &self.source
        else {
            return Ok(None);
        };
        let (_, token) = one(request, tls.as_ref(), token_at, user, sku, n, limit).await?;
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(user.to_string(), token.clone());
        Ok(Some(token))
    }
}

/// Logs each of `users` in, `concurrency` at a time, on a runtime of its own.
fn log_in(
    request: &RequestSpec,
    tls: Option<&Tls>,
    token_at: &[(String, Taken)],
    users: &[String],
    sku: &str,
    limit: Duration,
    concurrency: usize,
) -> Result<Vec<(String, String)>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::internal(format!("could not start the logins' runtime: {e}")))?;
    runtime.block_on(async {
        let mut out = Vec::with_capacity(users.len());
        for chunk in users.chunks(concurrency.max(1)) {
            let logins = chunk
                .iter()
                .enumerate()
                .map(|(i, user)| one(request, tls, token_at, user, sku, i as u64, limit));
            for got in futures_util::future::join_all(logins).await {
                out.push(got?);
            }
        }
        Ok(out)
    })
}

/// One user's login: its token, or why there is none.
async fn one(
    request: &RequestSpec,
    tls: Option<&Tls>,
    token_at: &[(String, Taken)],
    user: &str,
    sku: &str,
    n: u64,
    limit: Duration,
) -> Result<(String, String)> {
    let vars = Vars {
        sku,
        user,
        order: "",
        n,
        token: "",
    };
    let what = format!("{} {}", request.method(), request.shown_url());
    let failed = |reason: String, answered: bool| Error::Login {
        user: user.to_string(),
        reason: format!("{what} {reason}"),
        answered,
        untyped_json: request.sends_untyped_json(),
    };
    let got = match tokio::time::timeout(limit, once(request, tls, &vars, LOGIN_BODY, limit)).await
    {
        Ok(got) => got,
        Err(_) => {
            return Err(failed(
                format!("had no answer within {} ms", limit.as_millis()),
                false,
            ));
        }
    };
    let (status, body) = match got {
        Got::Answer { status, body } => (status, body),
        Got::Nothing(why) | Got::Refused { message: why, .. } => {
            return Err(failed(format!("had no answer: {why}"), false));
        }
    };
    if !(200..300).contains(&status) {
        return Err(failed(
            format!("answered HTTP {status}: {}", shown(&body)),
            true,
        ));
    }
    match token_at.iter().find_map(|(_, t)| t.take(body.as_bytes())) {
        Some(token) => Ok((user.to_string(), token)),
        None => {
            let at: Vec<&str> = token_at.iter().map(|(p, _)| p.as_str()).collect();
            Err(failed(
                format!(
                    "answered HTTP {status} with no token at {}: {}",
                    at.join(" or "),
                    shown(&body)
                ),
                true,
            ))
        }
    }
}

/// The start of an answer, its tokens hidden and escaped (nothing in it can drive a terminal
/// or break a line), in quotes. Hidden first, then cut: a login that answers with its token
/// where `--token` does not look still answers with a live token, and a cut through one
/// would show its start.
fn shown(body: &str) -> String {
    if body.is_empty() {
        return "(empty body)".into();
    }
    let body = lockctl_core::redact::redact_answer(body);
    let start: String = body.chars().take(SHOWN).collect();
    let more = if start.len() < body.len() { "..." } else { "" };
    format!("'{}{more}'", start.escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_logins_answer_is_shown_escaped_and_cut() {
        assert_eq!(shown(""), "(empty body)");
        assert_eq!(shown("a\u{1b}[2Jb\n"), r"'a\u{1b}[2Jb\n'");
        let long = "x".repeat(300);
        assert_eq!(shown(&long), format!("'{}...'", "x".repeat(200)));
    }

    /// Issue 50, item 9: the answer of a login whose token is not where `--token` looks
    /// carries the token elsewhere; the error quoting it shows none.
    #[test]
    fn a_failed_logins_answer_is_shown_without_its_tokens() {
        let body = r#"{"code":0,"data":{"accessToken":"t0k","jwt":"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1MSJ9.c2lnbmF0dXJlMTIzNDU2Nzg5MA"}}"#;
        let quoted = shown(body);
        for secret in ["t0k", "eyJhbGciOiJIUzI1NiJ9", "c2lnbmF0dXJlMTIzNDU2Nzg5MA"] {
            assert!(!quoted.contains(secret), "{secret} in {quoted}");
        }
        assert!(quoted.contains(r#"\"code\":0"#), "{quoted}");
    }

    #[test]
    fn given_tokens_are_handed_out_and_a_user_without_one_has_none() {
        let l = Logins::given(vec![("alice".into(), "t-a".into())]);
        let t = l
            .tokens_of(
                &["alice".into(), "bob".into()],
                "s",
                Duration::from_secs(1),
                4,
            )
            .unwrap();
        assert_eq!(t.get("alice").map(String::as_str), Some("t-a"));
        assert!(!t.contains_key("bob"));
    }
}
