//! Test support: a private `redis-server` per test, the real `lockctl` binary, and the external
//! tools the tests run. Every module uses these; none keeps its own copy.
//!
//! The servers and the external tools come from `lockctl-testkit` (its docs say which programs
//! run and how to point the tests at others), re-exported here so that every module imports
//! from one place; what stays here is about the `lockctl` binary and the databases.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockctl_core::conn::Conn;
use lockctl_core::lock::{Acquire, Guard, Lock, LockOptions};

use lockctl_testkit::tools::kill_command;
pub use lockctl_testkit::{
    RedisServer, free_port, redis_cli_program, redis_server_program, run_ok, signal, spawn_tool,
    valkey_server_program,
};

/// The fields the contract requires in `hammer --json`: kept with the plain tier's tests, which
/// check them on hand-built reports, and shared from there.
#[path = "../plain/contract.rs"]
mod contract;
pub use contract::HAMMER_FIELDS;

/// Every request of a `hammer --json` run (or of one of its `runs`), by the outcome it ended in.
pub fn accounted(v: &serde_json::Value) -> u64 {
    [
        "bought",
        "sold_out",
        "busy",
        "lease_lost",
        "limit_reached",
        "answered",
        "errors",
    ]
    .iter()
    .map(|f| v[f].as_u64().unwrap())
    .sum()
}

/// The real binary with `args`, pointed at `url` through REDIS_URL (as a user's shell would),
/// with stdin closed and `NO_COLOR` unset.
pub fn lockctl_command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.args(args)
        .env("REDIS_URL", url)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    cmd
}

/// Runs the real binary against `url` to the end and returns what it printed.
pub fn lockctl(url: &str, args: &[&str]) -> Output {
    lockctl_command(url, args).output().expect("run lockctl")
}

/// [`lockctl`] with extra environment variables (`LOCKCTL_LOCK_NODES`, ...).
pub fn lockctl_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = lockctl_command(url, args);
    cmd.envs(env.iter().copied());
    cmd.output().expect("run lockctl")
}

/// A child that is continued and killed when the test ends, however it ends: no process,
/// stopped or running, is left behind.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .output();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a started `lockctl` does with its stdout and stderr.
#[derive(Clone, Copy, Debug)]
pub enum Streams {
    /// Thrown away: for a child the test only waits for or kills.
    Discard,
    /// Piped, for `Child::wait_with_output`.
    Capture,
}

/// Starts the real binary against `url` (as `lockctl` would run it) and returns the child.
pub fn spawn_lockctl_with(url: &str, args: &[&str], streams: Streams) -> Child {
    spawn_lockctl_env(url, args, &[], streams)
}

/// [`spawn_lockctl_with`] with extra environment variables.
pub fn spawn_lockctl_env(
    url: &str,
    args: &[&str],
    env: &[(&str, &str)],
    streams: Streams,
) -> Child {
    let pipe = || match streams {
        Streams::Discard => Stdio::null(),
        Streams::Capture => Stdio::piped(),
    };
    lockctl_command(url, args)
        .envs(env.iter().copied())
        .stdout(pipe())
        .stderr(pipe())
        .spawn()
        .expect("spawn lockctl")
}

/// A started `lockctl` child whose output nobody reads, for tests that kill it.
pub fn spawn_lockctl(url: &str, args: &[&str]) -> Child {
    spawn_lockctl_with(url, args, Streams::Discard)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one JSON object on stdout; fails the test if there is anything else.
pub fn json(o: &Output) -> serde_json::Value {
    let text = stdout(o);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{text}\nstderr:\n{}",
            stderr(o)
        )
    })
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

/// Waits up to `limit` for a started child to end on its own and returns what it printed. A
/// child still running then is a hang: it is continued (it may have been stopped) and killed,
/// and the test fails saying so.
pub fn finish_within(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for lockctl"),
        Err(_) => {
            // Not reaped yet (the waiting thread still holds it), so the pid is still ours.
            let _ = kill_command(pid, "CONT").output();
            let _ = kill_command(pid, "KILL").output();
            let _ = rx.recv_timeout(Duration::from_secs(10));
            panic!("{what} was still running after {limit:?}: it hangs");
        }
    }
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether some client of the server `raw` talks to shows every one of `fields` in its `CLIENT
/// LIST` line: `cmd=monitor` (a MONITOR attached), `flags=b` (blocked in a command).
pub fn has_client(raw: &mut redis::Connection, fields: &[&str]) -> bool {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(raw).unwrap();
    list.lines()
        .any(|line| fields.iter().all(|f| line.split(' ').any(|kv| kv == *f)))
}

/// Lock options without a watchdog: a `ttl_ms` lease, waiting up to `wait_ms` to get it.
pub fn lock_options(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        watchdog: false,
    }
}

/// Acquires `lock`, which the test knows to be free (or to be freed within its wait).
pub fn take(lock: &Lock, conn: &mut Conn) -> Guard {
    match lock.acquire(conn).unwrap() {
        Acquire::Acquired(g) => g,
        Acquire::Busy => panic!("the lock was busy where the test expected it free"),
    }
}

/// The Python with Flask and PyMySQL that runs the hunt's Flask fixture:
/// `$LOCKCTL_TEST_PYTHON` (scripts/test sets it, installing both into `target/py-venv`); else
/// that virtual environment's, when scripts/test made it; else a clear failure saying how.
pub fn flask_python() -> PathBuf {
    let python = env_path("LOCKCTL_TEST_PYTHON")
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-venv/bin/python"));
    let ok = Command::new(&python)
        .args(["-c", "import flask, pymysql"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "no Python with Flask and PyMySQL at '{}': run scripts/test (it installs them into target/py-venv), or name one in LOCKCTL_TEST_PYTHON",
        python.display()
    );
    python
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The real binary with no `--redis` and no `REDIS_URL`, as a newcomer runs it, its default
/// address moved to `default_url` (`LOCKCTL_DEFAULT_REDIS_URL`, which exists for these tests) and
/// its temporary files under `tmp`.
pub fn lockctl_unconfigured(default_url: &str, tmp: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.args(args)
        .env_remove("REDIS_URL")
        .env_remove("NO_COLOR")
        .env("LOCKCTL_DEFAULT_REDIS_URL", default_url)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null());
    cmd
}

/// Where the tests' PostgreSQL server is: `LOCKCTL_TEST_DATABASE_URL`, by default the local
/// server with trust authentication. Each test makes its own database there.
pub fn admin_database_url() -> String {
    std::env::var("LOCKCTL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test (a unique name), dropped on `Drop`.
pub struct TestDb {
    admin: String,
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub fn create() -> TestDb {
        TestDb::create_on(&admin_database_url())
    }

    /// On the server `admin` (a URL of a database there to connect to first).
    pub fn create_on(admin: &str) -> TestDb {
        let name = format!("lockctl_test_{}", hex::encode(rand::random::<[u8; 6]>()));
        let mut client = postgres::Client::connect(admin, postgres::NoTls).unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is not reachable at {admin} ({e}): install and start it (apt-get install -y postgresql; pg_ctlcluster 15 main start), or set LOCKCTL_TEST_DATABASE_URL"
            )
        });
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the test database");
        let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
        TestDb {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        }
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A PostgreSQL server of its own (initdb in a temporary directory, a free port), for the test
/// that restarts it mid-run; stopped on `Drop`. Needs the server binaries
/// (`apt-get install -y postgresql`; or `LOCKCTL_TEST_PG_BINDIR`) and, as root, the `postgres`
/// user to run them as.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let bin = std::env::var_os("LOCKCTL_TEST_PG_BINDIR")
            .map(PathBuf::from)
            .or_else(|| {
                let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
                    .ok()?
                    .flatten()
                    .map(|e| e.path().join("bin"))
                    .filter(|p| p.join("initdb").exists())
                    .collect();
                dirs.sort();
                dirs.pop()
            })
            .expect("PostgreSQL's server binaries are missing: apt-get install -y postgresql (or set LOCKCTL_TEST_PG_BINDIR)");
        let dir = tempfile::tempdir().unwrap();
        run_ok(Command::new("chown").args(["postgres"]).arg(dir.path()));
        let data = dir.path().join("data");
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "-D"])
                .arg(&data),
        );
        let pg = PrivatePostgres {
            bin,
            dir,
            port: free_port(),
        };
        pg.ctl("start");
        pg
    }

    fn ctl(&self, action: &str) {
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["-D"])
                .arg(&data)
                .args(["-o", &opts, "-l"])
                .arg(self.dir.path().join("log"))
                .args(["-m", "fast", "-w", action]),
        );
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn stop(&self) {
        self.ctl("stop");
    }

    pub fn start_again(&self) {
        self.ctl("start");
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// A MariaDB (or MySQL) database of its own for one test, on the local server
/// (`LOCKCTL_TEST_MYSQL`, default 127.0.0.1:3306 as root with no password), dropped on `Drop`.
pub struct TestMyDb {
    pub name: String,
    pub url: String,
}

impl TestMyDb {
    pub fn create() -> TestMyDb {
        let name = format!("lockctl_test_{}", hex::encode(rand::random::<[u8; 6]>()));
        mysql_cli(&format!("CREATE DATABASE {name}"));
        TestMyDb {
            url: format!("mysql://root@127.0.0.1:3306/{name}"),
            name,
        }
    }

    /// Runs `sql` in this database.
    pub fn exec(&self, sql: &str) {
        mysql_cli(&format!("USE {}; {sql}", self.name));
    }
}

impl Drop for TestMyDb {
    fn drop(&mut self) {
        let _ = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-e"])
            .arg(format!("DROP DATABASE IF EXISTS {}", self.name))
            .output();
    }
}

fn mysql_cli(sql: &str) {
    let out = run_ok(
        Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-e"])
            .arg(sql),
    );
    assert!(
        out.status.success(),
        "MariaDB at 127.0.0.1:3306 refused '{sql}': {} (install and start it: apt-get install -y mariadb-server mariadb-client; service mariadb start)",
        String::from_utf8_lossy(&out.stderr)
    );
}
