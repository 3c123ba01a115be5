//! What every hammer run does at its end, whatever drove it (lockctl's buyers or someone's
//! endpoint): where and when it ran, the reports printed and exported, the verdict's exit
//! code; and the `/metrics` endpoint that `hammer` and `worker` serve while they run.

use std::io::{self, IsTerminal};
use std::sync::Arc;

use lockctl::advice::CliAdvice;
use lockctl::endpoint::{self, EndpointOptions};
use lockctl_core::redact::redact_command_line;
use lockctl_hammer::history::History;
use lockctl_hammer::{Report, overall_verdict};
use lockctl_render::{self as render, Context};

use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::report_files::{Exports, Written};
use crate::signals;

/// Prints and exports the reports; the exit code of their verdict, or of the signal that
/// stopped the run (Ctrl-C, SIGTERM, SIGHUP: new requests stopped, those in flight finished
/// and released their locks, and the partial report was printed).
pub(super) fn finish(
    ctx: &Ctx,
    exports: &Exports,
    reports: &[Report],
    history: Option<&History>,
    context: &Context,
    signals: &signals::Stop,
) -> anyhow::Result<Exit> {
    let document = render::hammer_document(reports, context, &CliAdvice);
    let written = Written {
        reports,
        document: &document,
        context,
        metrics: &ctx.metrics,
        history,
    };
    let stdout_taken = exports.write(&written)?;
    if !stdout_taken {
        if ctx.json {
            emit_json(&document)?;
        } else {
            emit(&hammer_text(ctx, reports))?;
        }
    }
    Ok(if let Some(code) = signals.exit_code() {
        Exit::Signal(code)
    } else {
        Exit::of_verdict(overall_verdict(reports))
    })
}

/// `--metrics-addr`: this process's metrics, with `before` (the queue length, say) run just
/// before each scrape; `who` says what runs meanwhile ("the hammer").
pub(super) fn serve_metrics(
    ctx: &Ctx,
    addr: &str,
    who: &str,
    before: impl Fn() + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let metrics = ctx.metrics.clone();
    let scrape = Arc::new(move || {
        before();
        metrics.encode()
    });
    let bound = endpoint::serve(addr, scrape, EndpointOptions::default())
        .map_err(|e| UsageError(format!("cannot listen on --metrics-addr '{addr}': {e}")))?;
    eprintln!("lockctl: serving http://{bound}/metrics while {who} runs");
    Ok(())
}

/// Where and when this run happens, for reports that stand alone.
pub(super) fn run_context(ctx: &Ctx) -> Context {
    let redis_version = ctx
        .target
        .connect()
        .ok()
        .and_then(|mut c| c.info("server").ok()?.get::<String>("redis_version"));
    // Every report carries it, and a report is shared: no password, token or credential
    // header of any flag goes in (`--db 'password=...'`, `--header 'Authorization: ...'`).
    let args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let command_line = redact_command_line(args).join(" ");
    Context {
        redis: ctx.target.addr().to_string(),
        redis_version,
        lockctl_version: crate::cli::VERSION.to_string(),
        started_at: utc_now(),
        command_line,
    }
}

/// Now, as `2026-11-30T11:22:08Z`.
fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `text` (a hammer's report) with the Redis it ran against named under its first line: the
/// address, or the private redis-server started for the run.
fn with_redis_named(ctx: &Ctx, text: &str) -> String {
    let redis = match &ctx._private {
        Some(p) => format!(
            "private redis-server on port {} (started for this run, its data discarded)",
            p.port()
        ),
        None => ctx.target.addr().to_string(),
    };
    match text.split_once('\n') {
        Some((header, rest)) => format!("{header}\n  {:<12}{redis}\n{rest}", "redis"),
        None => text.to_string(),
    }
}

fn hammer_text(ctx: &Ctx, reports: &[Report]) -> String {
    let color = ctx.color.enabled(io::stdout().is_terminal());
    let mut out: Vec<String> = reports
        .iter()
        .map(|r| match ctx.quiet {
            // The verdict line, and the violations under it.
            true => render::hammer_text(r, color, &CliAdvice)
                .lines()
                .skip_while(|l| !l.trim_start().starts_with("verdict"))
                .map(|l| format!("{l}\n"))
                .collect(),
            false => with_redis_named(ctx, &render::hammer_text(r, color, &CliAdvice)),
        })
        .collect();
    if reports.len() > 1 && !ctx.quiet {
        out.push(render::comparison_text(reports));
    }
    out.join(if ctx.quiet { "" } else { "\n" })
}
