//! lockctl-testkit: the servers and tools lockctl's server-tier tests start, in one place, so
//! that no test keeps its own copy. A dev-dependency only: neither the libraries nor the
//! binary depend on it.
//!
//! Every server runs on a free port of 127.0.0.1 with its own temporary directory (`--save ""
//! --appendonly no`, its log inside it), started by the binary's own launcher
//! (`lockctl_hammer::redis_server`, as the private server of `hammer --redis auto` is), is waited for
//! with a deadline until the child itself answers PING, and is killed on `Drop`: tests never
//! touch the machine's own Redis on 6379 or each other's keys.
//!
//! Which programs run (environment variables, read at each use; empty counts as unset):
//!
//! - `LOCKCTL_TEST_REDIS_SERVER`: the `redis-server` the tests start. Default: `redis-server`
//!   on the PATH.
//! - `LOCKCTL_TEST_REDIS_CLI`: the `redis-cli` the cluster tests run. Default: when
//!   `LOCKCTL_TEST_REDIS_SERVER` names a path, the `redis-cli` in that same directory (a Redis
//!   built from source has both in `src/`, and a client should match its server); otherwise
//!   `redis-cli` on the PATH.
//! - `LOCKCTL_TEST_VALKEY_SERVER`: the `valkey-server` (else the one `scripts/test` installs
//!   under `target/valkey-venv`, else `valkey-server` on the PATH).
//! - `openssl` (the TLS tests' certificates) and `kill` (signals) always come from the PATH.
//!
//! A missing program fails the test with what to install (Debian and Ubuntu:
//! `apt-get install -y redis-server`, `redis-tools` for `redis-cli`, `openssl`, `procps` for
//! `kill`): no test is ever skipped for want of one.
//!
//! Layout:
//! - [`server`]: [`RedisServer`], a private Redis or Valkey per test, and which programs those are.
//! - [`tools`]: starting and running external programs, failing with what to install.

pub mod programs;
pub mod server;
pub mod tools;

pub use crate::programs::{
    REDIS_CLI_VAR, REDIS_SERVER_VAR, VALKEY_SERVER_VAR, redis_cli_program, redis_server_program,
    valkey_server_program,
};
pub use crate::server::{RedisServer, free_port};
pub use crate::tools::{run_ok, signal, spawn_tool};
