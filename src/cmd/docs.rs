//! `lockctl completions SHELL` and `lockctl man`: generated from the same clap definitions as
//! `--help`, so they cannot drift from it.

use std::io::{self, Write};

use clap::CommandFactory;

use super::Exit;
use crate::cli::Cli;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lockctl", &mut out);
    io::stdout().lock().write_all(&out)?;
    Ok(Exit::Ok)
}

pub fn man() -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    io::stdout().lock().write_all(&out)?;
    Ok(Exit::Ok)
}
