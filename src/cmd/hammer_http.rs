//! `lockctl hammer --url`: the command line turned into the library's HTTP options (every
//! bad value a usage error naming it), one run, then the same reports and exports as the
//! hammer of lockctl's own buyers.

use lockctl_hammer::LoadOptions;
use lockctl_hammer::http::ids::Ids;
use lockctl_hammer::http::{
    self, AnswerClass, BadPattern, Classifier, DEFAULT_TOKEN_AT, HttpOptions, Logins, Patterns,
    RequestSpec, TUTORIAL_PATH,
};

use std::sync::Arc;

use std::io::IsTerminal;

use super::reporting::{finish, run_context};
use super::{Ctx, Exit, UsageError};
use crate::cli::{HammerArgs, HttpArgs, PresetArg};
use crate::progress;
use crate::report_files::Exports;
use crate::signals;

/// The tutorial's endpoint as its README serves it: `php -S 127.0.0.1:8080` beside
/// `run_demo.php`.
const TUTORIAL_URL: &str = "http://127.0.0.1:8080";

pub fn run(ctx: &Ctx, args: HammerArgs) -> anyhow::Result<Exit> {
    let http = http_options(ctx, &args.http, args.purchase.qty)?;
    if !http.classifier.judges() {
        for (given, flag) in [
            (args.stock.is_some(), "--stock"),
            (args.http.stock_key.is_some(), "--stock-key"),
        ] {
            if given {
                return Err(UsageError(format!(
                    "{flag} is for judging the endpoint's answers, and no --bought-if, --sold-out-if, --busy-if or --preset says what they mean; add them (or --preset tutorial), or drop {flag} for a run that only measures load"
                ))
                .into());
            }
        }
    }
    // A bad export path fails here, before any request is sent.
    let exports = Exports::open(&args)?;
    let signals = signals::listen(signals::First::Finish("the requests in flight"));
    let context = run_context(ctx);
    let show_bar = !ctx.quiet && ctx.color.enabled(std::io::stderr().is_terminal());
    let bar = progress::Bar::start(show_bar, args.requests, "http", false);
    let load = LoadOptions {
        sku: args.sku.clone(),
        requests: args.requests,
        concurrency: args.concurrency,
        stock: args.stock,
        buckets: None,
        users: users_in_file(&http, args.users)?,
        users_from: 0,
        progress: bar.as_ref().map(progress::Bar::counter),
        stop: Some(signals.requested.clone()),
        retries: None,
        history: args.history.is_some(),
        before_read_back: None,
    };
    let result = http::run_recorded(&ctx.target, &load, &http);
    drop(bar);
    let recorded = match result {
        Ok(r) => r,
        Err(e) => {
            exports.discard();
            return Err(e.into());
        }
    };
    let history = recorded.history.as_deref();
    finish(
        ctx,
        &exports,
        &[recorded.report],
        history,
        &context,
        &signals,
    )
}

/// The users a run has: `--users`, and with `--users-file` at most the file's (its number
/// when `--users` is not given).
pub(super) fn users_in_file(http: &HttpOptions, users: Option<u64>) -> anyhow::Result<Option<u64>> {
    let Some(listed) = http.users.listed_len() else {
        return Ok(users);
    };
    match users {
        Some(k) if k > listed as u64 => Err(UsageError(format!(
            "--users {k} is more than the {listed} users --users-file names"
        ))
        .into()),
        Some(k) => Ok(Some(k)),
        None => Ok(Some(listed as u64)),
    }
}

/// The request, the classification and the load model, checked.
pub(super) fn http_options(ctx: &Ctx, a: &HttpArgs, qty: u64) -> anyhow::Result<HttpOptions> {
    let tutorial = a.preset == Some(PresetArg::Tutorial);
    let url = match (&a.url, tutorial) {
        (Some(url), true) if names_only_a_server(url) => {
            format!("{}{TUTORIAL_PATH}", url.trim_end_matches('/'))
        }
        (Some(url), _) => url.clone(),
        (None, _) => format!("{TUTORIAL_URL}{TUTORIAL_PATH}"),
    };
    let request = RequestSpec::new(&a.method, &url, &a.headers, a.body.as_deref())
        .map_err(|e| UsageError(lockctl::advice::request(&e)))?;
    let patterns = Patterns {
        bought: a.bought_if.clone(),
        sold_out: a.sold_out_if.clone(),
        busy: a.busy_if.clone(),
        refused: a.refused_if.clone(),
        failed: a.failed_if.clone(),
    };
    let classifier = match tutorial {
        true => Classifier::tutorial(&patterns),
        false => Classifier::new(&patterns),
    }
    .map_err(|e| UsageError(bad_pattern(&e)))?;
    if let Some(key) = &a.stock_key
        && (key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(UsageError(format!(
            "--stock-key '{}' is not a Redis key lockctl will read: give the key your endpoint deducts, without spaces (e.g. item:stock:sku_886)",
            key.escape_debug()
        ))
        .into());
    }
    let (logins, users) = logins(ctx, a, &request)?;
    Ok(HttpOptions {
        request,
        classifier,
        stock_key: a.stock_key.clone(),
        store: None,
        rate: a.rate,
        sale: None,
        timeout: std::time::Duration::from_millis(a.request_timeout_ms),
        connect_timeout: ctx.options.connect_timeout,
        // Only the units each "bought" answer stands for: the endpoint buys its own way.
        qty,
        users: users.unwrap_or_else(http::ids::Ids::text_users),
        logins,
        // --tls-ca, --tls-cert and --tls-key serve an https:// --url as they serve rediss://.
        tls: ctx.endpoint_tls.clone(),
    })
}

/// How users get their `{token}` (`--login`, `--users-file`), and the users a file names.
fn logins(
    ctx: &Ctx,
    a: &HttpArgs,
    request: &RequestSpec,
) -> anyhow::Result<(Option<Arc<Logins>>, Option<Ids>)> {
    let given = a.login.is_some() || a.users_file.is_some();
    if request.uses_token() && !given {
        return Err(UsageError(
            "{token} stands for a user's token: say how users get one, with --login 'METHOD URL [BODY]' or --users-file FILE".into(),
        )
        .into());
    }
    if given && !request.uses_token() {
        let flag = if a.login.is_some() {
            "--login"
        } else {
            "--users-file"
        };
        return Err(UsageError(format!(
            "{flag} gives each user a token, and no --url, --header or --body holds {{token}}: put it where the service reads it, e.g. --header 'Authorization: Bearer {{token}}'"
        ))
        .into());
    }
    if let Some(login) = &a.login {
        let spec = login_request(login, &a.headers)?;
        let logins = Logins::new(spec, a.token.as_deref()).map_err(|e| {
            UsageError(format!(
                "--token {e}; the default tries {}",
                DEFAULT_TOKEN_AT.join(", ")
            ))
        })?;
        // The login is an https:// one with the same CA as --url's.
        let logins = logins.with_tls(&ctx.endpoint_tls)?;
        return Ok((Some(Arc::new(logins)), None));
    }
    let Some(path) = &a.users_file else {
        return Ok((None, None));
    };
    let pairs = users_file(path)?;
    let names = pairs.iter().map(|(u, _)| u.clone()).collect();
    Ok((
        Some(Arc::new(Logins::given(pairs))),
        Some(Ids::listed(names)),
    ))
}

/// `--login 'METHOD URL [BODY]'` as a request, with the `--header` values that do not hold
/// `{token}` (a content type, an API key), on a connection of its own.
fn login_request(login: &str, headers: &[String]) -> anyhow::Result<RequestSpec> {
    let shown = lockctl_core::redact::redact(login);
    let trimmed = login.trim_start();
    let (method, rest) = trimmed
        .split_once(char::is_whitespace)
        .unwrap_or((trimmed, ""));
    let rest = rest.trim_start();
    let (url, body) = match rest.split_once(char::is_whitespace) {
        Some((url, body)) => (url, Some(body.trim_start()).filter(|b| !b.is_empty())),
        None => (rest, None),
    };
    if url.is_empty() {
        return Err(UsageError(format!(
            "--login '{shown}' is not 'METHOD URL [BODY]' (e.g. 'POST http://127.0.0.1:5000/login {{\"user\":\"{{user}}\"}}')"
        ))
        .into());
    }
    if login.contains("{token}") {
        return Err(UsageError(format!(
            "--login '{shown}' holds {{token}}, which the login is to hand out"
        ))
        .into());
    }
    let mut sent: Vec<String> = headers
        .iter()
        .filter(|h| !h.contains("{token}"))
        .cloned()
        .collect();
    sent.push("Connection: close".into());
    // The login's URL and method are parts of --login, named as such: "the URL '...'".
    RequestSpec::new(method, url, &sent, body)
        .map_err(|e| UsageError(format!("--login '{shown}': {e}")).into())
}

/// `--users-file`: one user a line, `USER<TAB>TOKEN` or `{"user": ..., "token": ...}`; blank
/// lines and lines starting with `#` skipped. An error names the file and the line, never a
/// token.
fn users_file(path: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read --users-file '{shown}': {e}")))?;
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            UsageError(format!(
                "--users-file '{shown}' line {}: {why}; write one user a line, 'USER<TAB>TOKEN' or {{\"user\": \"...\", \"token\": \"...\"}}",
                i + 1
            ))
        };
        let pair = if line.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|_| bad("not a JSON object"))?;
            let text = |key: &str| match v.get(key) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(n @ serde_json::Value::Number(_)) => Some(n.to_string()),
                _ => None,
            };
            match (text("user"), text("token")) {
                (Some(u), Some(t)) => (u, t),
                _ => return Err(bad("the object has no \"user\" and \"token\"").into()),
            }
        } else {
            match line.split_once('\t') {
                Some((u, t)) => (u.trim().to_string(), t.trim().to_string()),
                None => return Err(bad("no tab between the user and the token").into()),
            }
        };
        if pair.0.is_empty() || pair.1.is_empty() {
            return Err(bad("an empty user or token").into());
        }
        pairs.push(pair);
    }
    if pairs.is_empty() {
        return Err(UsageError(format!("--users-file '{shown}' names no user")).into());
    }
    Ok(pairs)
}

/// A form that cannot be read, worded with its flag.
pub(super) fn bad_pattern(e: &BadPattern) -> String {
    let flag = match e.class {
        Some(AnswerClass::Bought) => "--bought-if",
        Some(AnswerClass::SoldOut) => "--sold-out-if",
        Some(AnswerClass::Busy) => "--busy-if",
        Some(AnswerClass::Refused) => "--refused-if",
        Some(AnswerClass::Failed) => "--failed-if",
        None => "--order-from",
    };
    format!("{flag} {e}")
}

/// `http://host:port` or `http://host:port/`: a URL with no path or query of its own.
fn names_only_a_server(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(_, rest)| !rest.trim_end_matches('/').contains(['/', '?', '#']))
}

#[cfg(test)]
mod tests {
    use super::names_only_a_server;

    #[test]
    fn a_server_alone_gets_the_tutorials_path() {
        assert!(names_only_a_server("http://127.0.0.1:8080"));
        assert!(names_only_a_server("http://127.0.0.1:8080/"));
        assert!(!names_only_a_server("http://127.0.0.1:8080/buy.php"));
        assert!(!names_only_a_server("http://127.0.0.1:8080?sku=1"));
    }
}
