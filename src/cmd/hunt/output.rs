//! What the hunt shows: a line per round while it runs, a warning about other clients of the
//! Redis it faults, the report, and the failing round's history and timeline as files.

use std::sync::Arc;

use crate::cli::HuntArgs;
use crate::cmd::{Ctx, emit, emit_json};
use lockctl::advice::CliAdvice;
use lockctl_hammer::Verdict;
use lockctl_hunt::nemesis::{FaultKind, Nemesis};
use lockctl_hunt::{self as hunt, OnRound, RoundSeen};
use lockctl_render::{self as render, Replay};

/// The hunt's report on stdout, as text or JSON.
pub(super) fn print(ctx: &Ctx, report: &hunt::HuntReport, replay: &Replay) -> anyhow::Result<()> {
    if ctx.json {
        emit_json(&render::hunt_json(report, replay, &CliAdvice))?;
    } else {
        let color = ctx
            .color
            .enabled(std::io::IsTerminal::is_terminal(&std::io::stdout()));
        emit(&render::hunt_text(
            report, replay, color, ctx.quiet, &CliAdvice,
        ))?;
    }
    Ok(())
}

/// One line on stderr per round as it ends, when stderr is a terminal (not with `--json` or
/// `-q`): the round, its shape and faults, its verdict, the hunt so far and the time left. A
/// hunt is otherwise silent for its whole budget.
pub(super) fn live_lines(ctx: &Ctx) -> Option<OnRound> {
    use std::io::IsTerminal;
    if ctx.json || ctx.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(Arc::new(|r: &RoundSeen| {
        let faults = match r.faults.as_slice() {
            [] => "no fault".to_string(),
            f => f
                .iter()
                .map(|(name, took)| match took {
                    true => name.clone(),
                    false => format!("{name} (no effect)"),
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        let verdict = match r.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Unknown => "not judged",
        };
        let left = r.budget.saturating_sub(r.elapsed).as_secs();
        eprintln!(
            "hunt: round {} · {} · {} · {faults} · {verdict} · {} judged · {left} s left",
            r.number,
            r.shape,
            lockctl_core::units::count(r.requests, "request", "requests"),
            r.judged,
        );
    }))
}

/// The failing round's history (or the last round's), with the hunt's seed and replay, and
/// its report.
pub(super) fn round_of<'a>(
    report: &'a hunt::HuntReport,
    replay: &Replay,
) -> Option<(lockctl_hammer::history::History, &'a lockctl_hammer::Report)> {
    let (h, r, round) = match (&report.failure, &report.last) {
        (Some(f), _) => (f.history.as_deref()?, &f.report, Some(f.round.number)),
        (None, Some(last)) => (last.1.as_deref()?, &last.0, None),
        (None, None) => return None,
    };
    let mut h = h.clone();
    h.hunt = Some(lockctl_hammer::history::HuntOrigin {
        seed: report.seed,
        round,
        replay: replay.command.clone(),
        set_first: replay.secrets.clone(),
    });
    Some((h, r))
}

/// The failing round's timeline (or the last round's) as an HTML page at `path`.
pub(super) fn write_timeline(
    report: &hunt::HuntReport,
    replay: &Replay,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if let Some((h, r)) = round_of(report, replay) {
        std::fs::write(path, render::timeline_html(&h, r)).map_err(|e| {
            anyhow::anyhow!("could not write the timeline to '{}': {e}", path.display())
        })?;
    }
    Ok(())
}

/// The failing round's history (or the last round's) as JSON Lines at `path`.
pub(super) fn write_history(
    report: &hunt::HuntReport,
    replay: &Replay,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if let Some((h, _)) = round_of(report, replay) {
        let mut out = Vec::new();
        lockctl_hammer::history::write(&h, &mut out)?;
        std::fs::write(path, out).map_err(|e| {
            anyhow::anyhow!("could not write the history to '{}': {e}", path.display())
        })?;
    }
    Ok(())
}

/// Before the first fault: the clients of the Redis that its faults would touch beyond the
/// system under test, named on stderr (the address, and the process when this machine holds
/// the connection), so that a Redis shared with someone else is known before it is paused.
pub(super) fn warn_of_outsiders(
    ctx: &Ctx,
    args: &HuntArgs,
    faults: &[FaultKind],
    nemesis: &Nemesis,
) {
    let redis_faults: Vec<&str> = faults
        .iter()
        .filter(|k| k.faults_redis())
        .map(|k| k.name())
        .collect();
    if redis_faults.is_empty() {
        return;
    }
    let outsiders = nemesis.outsiders();
    if outsiders.is_empty() {
        return;
    }
    let named: Vec<String> = outsiders
        .iter()
        .take(5)
        .map(|o| match &o.owner {
            Some(w) => format!("{} (pid {}, {})", o.addr, w.pid, w.command),
            None => o.addr.clone(),
        })
        .collect();
    let more = match outsiders.len() {
        n if n > 5 => format!(", and {} more", n - 5),
        _ => String::new(),
    };
    let whose = match args.serve {
        Some(_) => "outside the system under test (not started by --serve)",
        None => "that lockctl cannot tell are the system's (no --serve names its processes)",
    };
    // What each fault does to them: client-kill spares those known to be other processes'
    // when --serve names the system's.
    let unspared = outsiders.iter().filter(|o| !o.known_outside()).count();
    let doing: Vec<String> = redis_faults
        .iter()
        .map(|f| match *f {
            f if f == FaultKind::RedisPause.name() => "redis-pause pauses them too".to_string(),
            _ if !nemesis.client_kill_spares_outsiders() => "client-kill kills them too".into(),
            _ if unspared == 0 => "client-kill spares them".into(),
            _ => format!("client-kill kills the {unspared} whose process was not found"),
        })
        .collect();
    let message = format!(
        "Redis at {} has {} {whose}: {}{more}; {}",
        ctx.target.addr(),
        lockctl_core::units::count(outsiders.len() as u64, "client", "clients"),
        named.join(", "),
        doing.join("; "),
    );
    eprintln!("lockctl: warning: {}", lockctl_render::terminal(&message));
}
