//! `lockctl completions SHELL` and `lockctl man`: generated from the same clap definitions as
//! `--help`, so they cannot drift from it.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;

use clap::CommandFactory;

use super::{Exit, UsageError};
use crate::cli::{Cli, help};

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lockctl", &mut out);
    io::stdout().lock().write_all(&out)?;
    Ok(Exit::Ok)
}

/// `lockctl man [PAGE] [--out-dir DIR]`: lockctl(1), one subcommand's page, or every page
/// written into DIR.
pub fn man(page: Option<&str>, out_dir: Option<&Path>) -> anyhow::Result<Exit> {
    let pages = pages();
    if let Some(dir) = out_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create '{}'", dir.display()))?;
        let mut written = String::new();
        for (name, cmd) in &pages {
            let path = dir.join(format!("{name}.1"));
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
            std::fs::write(&path, out)
                .with_context(|| format!("could not write '{}'", path.display()))?;
            written.push_str(&format!("{}\n", path.display()));
        }
        io::stdout().lock().write_all(written.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let wanted = match page {
        None | Some("lockctl") => "lockctl".to_string(),
        Some(p) => format!(
            "lockctl-{}",
            p.trim_start_matches("lockctl-").replace(' ', "-")
        ),
    };
    let Some((_, cmd)) = pages.iter().find(|(name, _)| *name == wanted) else {
        let names: Vec<&str> = pages
            .iter()
            .filter_map(|(n, _)| n.strip_prefix("lockctl-"))
            .collect();
        return Err(UsageError(format!(
            "no manual page for '{}': the pages are lockctl and {}",
            page.unwrap_or_default(),
            names.join(", ")
        ))
        .into());
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    io::stdout().lock().write_all(&out)?;
    Ok(Exit::Ok)
}

/// Every manual page, by name (`lockctl`, `lockctl-hammer`, `lockctl-db-init`, ...): the
/// command line as built (so each subcommand is named as in its usage line), the global
/// options on lockctl(1) only, each other page pointing there instead of repeating them.
fn pages() -> Vec<(String, clap::Command)> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, true, &mut pages);
    pages
}

fn collect(cmd: &clap::Command, top: bool, pages: &mut Vec<(String, clap::Command)>) {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let page = if top {
        cmd.clone()
    } else {
        // Rendering only: a built command's global options, hidden on this page.
        let globals: Vec<clap::Id> = cmd
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.get_id().clone())
            .collect();
        let note = format!(
            "{}\n\n{}",
            cmd.get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default(),
            help::GLOBAL_OPTIONS_ELSEWHERE
        );
        globals
            .into_iter()
            .fold(cmd.clone(), |c, id| c.mut_arg(id, |a| a.hide(true)))
            .after_help(note.trim_start().to_string())
    };
    pages.push((name, page));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, false, pages);
    }
}
