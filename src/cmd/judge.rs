//! `lockctl judge FILE`: a recorded history (`--history`) judged again, offline, by the same
//! pure judgement a live run makes; the same report and exit codes as the hammer's.

use std::io::{BufReader, IsTerminal};
use std::path::Path;

use super::{Exit, UsageError, emit, emit_json};
use crate::cli::Cli;
use lockctl::advice::CliAdvice;
use lockctl_hammer::history;
use lockctl_render::{self as render, Context};

pub fn run(cli: &Cli, file: &Path, html: Option<&Path>) -> anyhow::Result<Exit> {
    let shown = file.display();
    let read = if file == Path::new("-") {
        history::read(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file).map_err(|e| {
            UsageError(format!(
                "cannot read the history '{shown}': {e} (give the file a run wrote with --history, or - for stdin)"
            ))
        })?;
        history::read(BufReader::new(f))
    };
    let h = read.map_err(|e| {
        UsageError(format!(
            "'{shown}' is not a history lockctl can judge: {e} (histories are written by hammer --history and hunt --history)"
        ))
    })?;
    let report = h.judge();
    if let Some(out) = html {
        std::fs::write(out, render::timeline_html(&h, &report)).map_err(|e| {
            UsageError(format!(
                "cannot write --export-html '{}': {e}",
                out.display()
            ))
        })?;
    }
    let context = Context {
        redis: h.server.clone(),
        lockctl_version: crate::cli::VERSION.to_string(),
        command_line: format!("lockctl judge {shown}"),
        ..Context::default()
    };
    let color = cli.color.enabled(std::io::stdout().is_terminal());
    if cli.json {
        emit_json(&render::hammer_document(
            std::slice::from_ref(&report),
            &context,
            &CliAdvice,
        ))?;
    } else if cli.quiet {
        let text = render::hammer_text(&report, color, &CliAdvice);
        let verdict = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("verdict"))
            .map(|l| format!("{l}\n"))
            .collect::<String>();
        emit(&verdict)?;
    } else {
        emit(&format!(
            "judged again from {shown} ({} requests, {} faults)\n{}",
            h.samples.len(),
            h.faults.len(),
            render::hammer_text(&report, color, &CliAdvice)
        ))?;
    }
    Ok(Exit::of_verdict(report.verdict))
}
