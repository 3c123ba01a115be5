//! `lockctl hammer --url`: the command line turned into the library's HTTP options (every
//! bad value a usage error naming it), one run, then the same reports and exports as the
//! hammer of lockctl's own buyers.

use lockctl_hammer::LoadOptions;
use lockctl_hammer::http::{
    self, AnswerClass, BadPattern, Classifier, HttpOptions, Patterns, RequestSpec, TUTORIAL_PATH,
};

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
        users: args.users,
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
    let request =
        RequestSpec::new(&a.method, &url, &a.headers, a.body.as_deref()).map_err(UsageError)?;
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
        users: http::ids::Ids::text_users(),
    })
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
