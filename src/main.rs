//! The `lockctl` binary: parses the command line, hands it to the command's module, and maps
//! the result to the contract's exit codes in one place (`cmd`).

mod cli;
mod cmd;
mod private_redis;
mod progress;
mod report_files;
mod signals;
mod usage;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // `lockctl run`'s guard process: internal, so not a subcommand of the command line that
    // help, completions and the manual describe.
    if let Some(exit) = cmd::run_guard::from_args() {
        return exit.into();
    }
    // rustls's one process-wide choice of cryptography, which lockctl-core leaves to its
    // program (the `redis` crate's rediss:// takes it from there): ring's. Installed before
    // anything connects; an error means one is already installed, which serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = match cli::facts::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            let e = clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"));
            return cmd::parse_failed(e);
        }
    };
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return cmd::parse_failed(e),
    };
    let json = cli.json;
    signals::quit_as_json(json);
    match cmd::run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => cmd::failed(&err, json),
    }
}
