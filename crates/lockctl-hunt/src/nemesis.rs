//! The faults the hunt does to a system while a round runs, and their undoing.
//!
//! Every fault done is recorded with how to undo it; [`Nemesis::heal`] undoes them all, and is
//! called before a round is judged, at the end of the hunt, on errors (through `Drop`) and by
//! the caller's quit handler (a second Ctrl-C): no Redis is left paused and no process
//! stopped. Process faults touch only the `--serve` tree; `client-kill` spares lockctl's own
//! connections (named `lockctl-hunt` on the server).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use rustix::process::Signal;

use super::serve::Served;
use lockctl_core::conn::Target;
use lockctl_hammer::history::Fault;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Kill the system's connections to its Redis.
    ClientKill,
    /// Pause the system's Redis writes (`CLIENT PAUSE ... WRITE`) for longer than common client
    /// timeouts.
    RedisPause,
    /// SIGSTOP a random process of the `--serve` tree, SIGCONT when healed.
    PauseWorker,
    /// SIGKILL a random process of the `--serve` tree; healed by restarting the system.
    KillWorker,
    /// lockctl's own strategies: SIGSTOP one of lockctl's own buyer processes (`lockctl buy`
    /// children), as a holder stalled past its lease; SIGCONT when healed.
    PauseHolder,
    /// With `--proxy`: one of the system's connections to Redis stalled (nothing moves either
    /// way) or, one time in three, reset.
    Stall,
    /// With the stock in SQL: a second session holds the round's stock row (the stock query
    /// `FOR UPDATE` in a transaction) for the fault's length.
    DbLock,
    /// With the stock or orders in SQL: the system's sessions on that database ended
    /// (`pg_terminate_backend`, MySQL `KILL`), never lockctl's own.
    DbKill,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::ClientKill,
        FaultKind::RedisPause,
        FaultKind::PauseWorker,
        FaultKind::KillWorker,
        FaultKind::PauseHolder,
        FaultKind::Stall,
        FaultKind::DbLock,
        FaultKind::DbKill,
    ];

    /// Its name, as `--nemesis` takes it and the history records it (`client-kill`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ClientKill => "client-kill",
            FaultKind::RedisPause => "redis-pause",
            FaultKind::PauseWorker => "pause-worker",
            FaultKind::KillWorker => "kill-worker",
            FaultKind::PauseHolder => "pause-holder",
            FaultKind::Stall => "stall",
            FaultKind::DbLock => "db-lock",
            FaultKind::DbKill => "db-kill",
        }
    }

    /// The kind called `name` ([`FaultKind::name`]), if any.
    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it is held for a while and then lifted (a pause, a stall), so that how long it
    /// is held matters; a kill is done at once.
    pub fn is_held(self) -> bool {
        matches!(
            self,
            FaultKind::RedisPause
                | FaultKind::PauseWorker
                | FaultKind::PauseHolder
                | FaultKind::Stall
                | FaultKind::DbLock
        )
    }

    /// Whether it acts on the system's SQL database (stock or orders).
    pub fn needs_sql(self) -> bool {
        matches!(self, FaultKind::DbLock | FaultKind::DbKill)
    }

    /// Whether it needs the system's processes (`--serve`).
    pub fn needs_serve(self) -> bool {
        matches!(self, FaultKind::PauseWorker | FaultKind::KillWorker)
    }

    /// Whether it needs the fault-injecting proxy (`--proxy`).
    pub fn needs_proxy(self) -> bool {
        self == FaultKind::Stall
    }

    /// Whether it acts on the Redis server itself (every client of it is touched), so that it
    /// needs that Redis named by the user, never a default.
    pub fn faults_redis(self) -> bool {
        matches!(self, FaultKind::ClientKill | FaultKind::RedisPause)
    }

    /// Whether it is done to lockctl's own buyers (`hunt --strategy`) only.
    pub fn own_only(self) -> bool {
        self == FaultKind::PauseHolder
    }
}

/// What is still to undo.
#[derive(Default)]
struct Undo {
    /// Redis writes are paused.
    paused_redis: bool,
    /// Processes of the tree stopped.
    stopped: Vec<i32>,
    /// lockctl's own buyer processes stopped.
    own_stopped: Vec<i32>,
    /// The stock row held by lockctl's session (`db-lock`); dropped, it is let go.
    row: Option<super::sql::RowLock>,
    /// A process was killed: the system is restarted.
    killed: bool,
    /// The faults done this round, for the history.
    done: Vec<Fault>,
}

/// The name lockctl's own connections give themselves on a hunt's Redis
/// ([`Target::with_client_name`]), so that `client-kill` tells them from the system's.
pub const OWN_NAME: &str = "lockctl-hunt";

/// The faults of a hunt, shared between the round that does them, the heal and the quit
/// handler.
#[derive(Clone)]
pub struct Nemesis {
    redis: Target,
    serve: Option<Arc<Mutex<Served>>>,
    undo: Arc<Mutex<Undo>>,
    /// Whether `client-kill` spares this process's connections (someone's system under test);
    /// not when lockctl's own buyers are the system.
    spare_own: bool,
    /// The proxy the system reaches its Redis through, for `stall`.
    proxy: Option<Arc<super::proxy::Proxy>>,
    /// Set by a heal, cleared at a round's start: no fault is done while it is set.
    closed: Arc<Mutex<bool>>,
    /// The system's SQL database, for `db-lock` and `db-kill`.
    sql: Option<Arc<SqlFaults>>,
    /// The round's SKU, whose stock row `db-lock` holds.
    sku: Arc<Mutex<Option<String>>>,
}

/// What the database faults act on.
pub struct SqlFaults {
    /// The database of the stock (or, without it, of the orders).
    pub db: Arc<super::sql::SqlDb>,
    /// The stock query (`--stock-query`), which `db-lock` runs `FOR UPDATE`; `None`: no
    /// stock in SQL, so no `db-lock`.
    pub stock_query: Option<String>,
    /// What the SKUs are, for binding them.
    pub format: lockctl_hammer::http::ids::IdFormat,
}

/// A client of the hunt's Redis that is neither lockctl's nor, as far as this machine can
/// tell, the system under test's: a Redis fault touches it too.
#[derive(Clone, Debug)]
pub struct Outsider {
    /// Its address as the server lists it (`ip:port`).
    pub addr: String,
    /// The process on this machine that holds the connection, when one was found.
    pub owner: Option<super::owners::Owner>,
}

/// What a heal undid, and what it could not.
pub struct Healed {
    /// The round's faults, each with when it was undone.
    pub faults: Vec<Fault>,
    /// A system that could not be brought back (its restart failed): the hunt cannot go on.
    pub failed: Option<String>,
}

impl Nemesis {
    /// A nemesis for someone's system: Redis faults on `redis`, sparing lockctl's own
    /// connections, and process faults on the `--serve` tree in `serve`, if any.
    pub fn new(redis: Target, serve: Option<Arc<Mutex<Served>>>) -> Nemesis {
        Nemesis {
            redis: redis.with_client_name(OWN_NAME),
            serve,
            undo: Arc::new(Mutex::new(Undo::default())),
            spare_own: true,
            proxy: None,
            closed: Arc::default(),
            sql: None,
            sku: Arc::default(),
        }
    }

    /// The same nemesis, with the system's SQL database (for `db-lock` and `db-kill`).
    pub fn with_sql(mut self, sql: SqlFaults) -> Nemesis {
        self.sql = Some(Arc::new(sql));
        self
    }

    /// The round's SKU, whose stock row `db-lock` holds.
    pub fn round_sku(&self, sku: &str) {
        if let Ok(mut s) = self.sku.lock() {
            *s = Some(sku.to_string());
        }
    }

    /// The same nemesis, with the proxy the system reaches its Redis through (for `stall`).
    pub fn with_proxy(mut self, proxy: Arc<super::proxy::Proxy>) -> Nemesis {
        self.proxy = Some(proxy);
        self
    }

    /// A nemesis for lockctl's own buyers: their connections are the system's.
    pub fn of_own_buyers(redis: Target) -> Nemesis {
        Nemesis {
            spare_own: false,
            ..Nemesis::new(redis, None)
        }
    }

    /// Does `kind` for about `hold`, `at` from the round's start (for the history). A fault that
    /// cannot be done (nothing to kill) is recorded as such, not an error.
    pub fn strike(&self, kind: FaultKind, hold: Duration, at: Duration, rng: &mut impl rand::Rng) {
        // Held while the fault is done, so that a heal never runs half-way through one; once
        // the round is healing, no fault is done any more.
        let closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        if *closed {
            return;
        }
        let (took, detail) = match kind {
            FaultKind::ClientKill => self.client_kill(),
            FaultKind::RedisPause => self.redis_pause(hold),
            FaultKind::PauseWorker => self.pause_worker(rng),
            FaultKind::KillWorker => self.kill_worker(rng),
            FaultKind::PauseHolder => self.pause_holder(rng),
            FaultKind::Stall => self.stall(rng),
            FaultKind::DbLock => self.db_lock(),
            FaultKind::DbKill => self.db_kill(),
        };
        if let Ok(mut u) = self.undo.lock() {
            u.done.push(Fault {
                fault: kind.name().into(),
                start: at,
                stop: None,
                detail,
                took,
            });
        }
    }

    /// Undoes what `kind` did, early (at `at` from the round's start), as its hold ends.
    pub fn lift(&self, kind: FaultKind, at: Duration) {
        match kind {
            FaultKind::RedisPause => self.unpause_redis(),
            FaultKind::PauseWorker | FaultKind::PauseHolder => self.continue_stopped(),
            FaultKind::Stall => self.unstall(),
            FaultKind::DbLock => self.let_row_go(),
            FaultKind::ClientKill | FaultKind::KillWorker | FaultKind::DbKill => {}
        }
        if let Ok(mut u) = self.undo.lock()
            && let Some(f) = u
                .done
                .iter_mut()
                .rev()
                .find(|f| f.fault == kind.name() && f.stop.is_none())
        {
            f.stop = Some(at);
        }
    }

    /// Undoes every fault still in force (at `at` from the round's start), and returns the
    /// round's faults. The system is restarted if a process of it was killed.
    pub fn heal(&self, at: Duration) -> Healed {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.unpause_redis();
        self.continue_stopped();
        self.unstall();
        self.let_row_go();
        let killed = self
            .undo
            .lock()
            .map(|mut u| std::mem::take(&mut u.killed))
            .unwrap_or(false);
        let mut failed = None;
        if killed && let Some(serve) = &self.serve {
            let mut s = serve.lock().unwrap_or_else(|p| p.into_inner());
            failed = s
                .restart()
                .err()
                .map(|e| format!("could not restart --serve after a kill: {e}"));
        }
        let mut done = self
            .undo
            .lock()
            .map(|mut u| std::mem::take(&mut u.done))
            .unwrap_or_default();
        for f in &mut done {
            f.stop.get_or_insert(at);
        }
        Healed {
            faults: done,
            failed,
        }
    }

    /// A new round: faults may be done again (until its heal).
    pub fn begin_round(&self) {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Whether the server lets lockctl do `kinds`' Redis faults (managed services often refuse
    /// CLIENT PAUSE or CLIENT KILL): asked once before the hunt, with a pause of 1 ms.
    pub fn check(&self, kinds: &[FaultKind]) -> Result<(), String> {
        let mut c = self
            .redis
            .connect()
            .map_err(|e| format!("Redis at {}: {e}", self.redis.addr()))?;
        for kind in kinds {
            if *kind == FaultKind::RedisPause {
                lockctl_core::check::require(&mut c, lockctl_core::check::REDIS_PAUSE_NEEDS)
                    .map_err(|e| format!("{e}; or drop it from --nemesis"))?;
            }
            let tried = match kind {
                FaultKind::RedisPause => {
                    c.query::<()>(redis::cmd("CLIENT").arg("PAUSE").arg(1).arg("WRITE"))
                }
                FaultKind::ClientKill => c
                    .query::<String>(redis::cmd("CLIENT").arg("LIST"))
                    .map(|_| ()),
                _ => Ok(()),
            };
            if let Err(e) = tried {
                return Err(format!(
                    "{} needs CLIENT {} on Redis at {}, which refused it ({e}): drop it from --nemesis",
                    kind.name(),
                    if *kind == FaultKind::RedisPause {
                        "PAUSE"
                    } else {
                        "LIST and CLIENT KILL"
                    },
                    self.redis.addr()
                ));
            }
        }
        Ok(())
    }

    /// The clients of the Redis that a Redis fault would touch beyond the system under test:
    /// every client but lockctl's own connections and replicas, less those held by the
    /// `--serve` processes (found through `/proc`; without `--serve`, none is known to be the
    /// system's). Best effort: a Redis that cannot be asked has none listed.
    pub fn outsiders(&self) -> Vec<Outsider> {
        let Ok(mut c) = self.redis.connect() else {
            return Vec::new();
        };
        let Ok(list) = c.query::<String>(redis::cmd("CLIENT").arg("LIST")) else {
            return Vec::new();
        };
        let me = std::process::id() as i32;
        let mut clients = Vec::new();
        for line in list.lines() {
            let field = |k: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            };
            let ours = field("name").is_some_and(|n| n.starts_with(OWN_NAME));
            let replica = field("flags").is_some_and(|f| f.contains('S') || f.contains('M'));
            if let (Some(addr), false, false) = (field("addr"), ours, replica) {
                clients.push(addr.to_string());
            }
        }
        let parsed: Vec<std::net::SocketAddr> =
            clients.iter().filter_map(|a| a.parse().ok()).collect();
        let owners = super::owners::owners(&parsed);
        let system: Vec<i32> = self
            .serve
            .as_ref()
            .and_then(|s| s.lock().ok().map(|s| s.processes()))
            .unwrap_or_default();
        clients
            .into_iter()
            .map(|addr| {
                let owner = addr.parse().ok().and_then(|a| owners.get(&a).cloned());
                Outsider { addr, owner }
            })
            .filter(|o| {
                !o.owner
                    .as_ref()
                    .is_some_and(|w| w.pid == me || system.contains(&w.pid))
            })
            .collect()
    }

    /// Undoes what can be undone at once, for a process that is quitting now.
    pub fn heal_now(&self) {
        self.unpause_redis();
        self.continue_stopped();
        self.unstall();
        self.let_row_go();
    }

    fn let_row_go(&self) {
        // Dropped outside the lock: its session's rollback is awaited.
        let row = self.undo.lock().ok().and_then(|mut u| u.row.take());
        drop(row);
    }

    fn db_lock(&self) -> (bool, String) {
        let Some(sql) = &self.sql else {
            return (false, "no SQL database to lock a row in".into());
        };
        let Some(query) = &sql.stock_query else {
            return (false, "no stock query to lock its row with".into());
        };
        let Some(sku) = self.sku.lock().ok().and_then(|s| s.clone()) else {
            return (false, "no round under way".into());
        };
        let param = super::sql::SkuParam {
            text: &sku,
            format: sql.format,
        };
        let shown = format!("the stock row of '{sku}' ({query} FOR UPDATE, in a transaction)");
        match sql.db.hold_row(query, param, Duration::from_millis(300)) {
            Ok(held) => {
                let (row, detail) = match held {
                    super::sql::RowHeld::Held(row) => (row, format!("held {shown}")),
                    super::sql::RowHeld::Queued(row) => (
                        row,
                        format!("queued for {shown} behind the system's own lock"),
                    ),
                };
                if let Ok(mut u) = self.undo.lock() {
                    u.row = Some(row);
                }
                (true, detail)
            }
            Err(e) => (false, format!("could not lock {shown}: {e}")),
        }
    }

    fn db_kill(&self) -> (bool, String) {
        let Some(sql) = &self.sql else {
            return (false, "no SQL database to end sessions on".into());
        };
        match sql.db.kill_sessions() {
            Ok(0) => (
                false,
                format!("no session of the system on {}", sql.db.shown()),
            ),
            Ok(n) => (
                true,
                format!(
                    "ended {} on {} (lockctl's own spared)",
                    lockctl_core::units::count(n, "session", "sessions"),
                    sql.db.shown()
                ),
            ),
            Err(e) => (
                false,
                format!("could not end sessions on {}: {e}", sql.db.shown()),
            ),
        }
    }

    fn unstall(&self) {
        if let Some(p) = &self.proxy {
            p.unstall_all();
        }
    }

    fn stall(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let Some(proxy) = &self.proxy else {
            return (false, "no proxy to stall a connection in".into());
        };
        let (pick, reset) = (
            rng.random_range(0..1024usize),
            rng.random_range(0..3u32) == 0,
        );
        match proxy.strike(pick, reset) {
            Some(done) => (true, done),
            None => (
                false,
                "no connection of the system through the proxy".into(),
            ),
        }
    }

    fn unpause_redis(&self) {
        let paused = self
            .undo
            .lock()
            .map(|mut u| std::mem::take(&mut u.paused_redis));
        if paused.unwrap_or(true) {
            // Asked even when not known to be paused: a quit handler cannot know.
            let _ = self
                .redis
                .connect()
                .and_then(|mut c| c.query::<()>(redis::cmd("CLIENT").arg("UNPAUSE")));
        }
    }

    fn continue_stopped(&self) {
        let own = self
            .undo
            .lock()
            .map(|mut u| std::mem::take(&mut u.own_stopped))
            .unwrap_or_default();
        for pid in own {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::CONT);
            }
        }
        let stopped = self
            .undo
            .lock()
            .map(|mut u| std::mem::take(&mut u.stopped))
            .unwrap_or_default();
        // Continued directly, without the system's lock (a restart may hold it): these pids
        // were of its tree when they were stopped, and a SIGCONT harms nothing that runs.
        for pid in stopped {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::CONT);
            }
        }
        if let Some(serve) = &self.serve
            && let Ok(s) = serve.try_lock()
        {
            s.continue_all();
        }
    }

    fn redis_pause(&self, hold: Duration) -> (bool, String) {
        // Redis lifts the pause by itself after `hold` too, should lockctl die first.
        let ms = hold.as_millis().max(1) as u64;
        let paused = self.redis.connect().and_then(|mut c| {
            c.query::<()>(redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE"))
        });
        match paused {
            Ok(()) => {
                if let Ok(mut u) = self.undo.lock() {
                    u.paused_redis = true;
                }
                (
                    true,
                    format!(
                        "writes to Redis at {} paused for {ms} ms",
                        self.redis.addr()
                    ),
                )
            }
            Err(e) => (false, format!("could not pause Redis: {e}")),
        }
    }

    fn client_kill(&self) -> (bool, String) {
        let killed = self.redis.connect().and_then(|mut c| {
            let me: i64 = c.query(redis::cmd("CLIENT").arg("ID"))?;
            let list: String = c.query(redis::cmd("CLIENT").arg("LIST"))?;
            let mut n = 0;
            for line in list.lines() {
                let field = |k: &str| {
                    line.split(' ')
                        .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                };
                let Some(id) = field("id").and_then(|i| i.parse::<i64>().ok()) else {
                    continue;
                };
                // Never this call's own connection, nor a replica's; lockctl's others (named
                // lockctl-hunt) only when lockctl's own buyers are the system.
                let ours = field("name").is_some_and(|n| n.starts_with(OWN_NAME));
                if id == me
                    || (ours && self.spare_own)
                    || field("flags").is_some_and(|f| f.contains('S'))
                {
                    continue;
                }
                // A client gone meanwhile is no error: it is killed all the same.
                n += c
                    .query::<i64>(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id))
                    .unwrap_or(0);
            }
            Ok(n)
        });
        match killed {
            Ok(n) => (
                n > 0,
                format!("killed {n} connection(s) of the system to Redis"),
            ),
            Err(e) => (false, format!("could not kill connections: {e}")),
        }
    }

    fn pick(&self, rng: &mut impl rand::Rng) -> Option<i32> {
        let serve = self.serve.as_ref()?.lock().ok()?;
        let tree = serve.processes();
        // Never the shell the command runs in.
        let shell = |pid: &i32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| matches!(c.trim(), "sh" | "bash" | "dash"))
        };
        let procs: Vec<i32> = tree.iter().copied().filter(|p| !shell(p)).collect();
        // The web tier (processes with a listening socket) and the rest (a queue's consumer,
        // which serves no port) are picked as often as each other, however many workers the
        // web tier forks. Of the web tier, a worker rather than the server's first process,
        // when there is one.
        let web = super::owners::listening(&procs);
        let (mut serving, other): (Vec<i32>, Vec<i32>) =
            procs.iter().partition(|p| web.contains(p));
        if serving.len() > 1 {
            serving.remove(0);
        }
        let (side, pick) = (rng.random_range(0..2u32), rng.random_range(0..1024usize));
        let group = match (side, serving.is_empty(), other.is_empty()) {
            (_, true, true) => &tree,
            (0, false, _) | (_, false, true) => &serving,
            _ => &other,
        };
        group.get(pick % group.len().max(1)).copied()
    }

    fn pause_worker(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let Some(pid) = self.pick(rng) else {
            return (false, "no process to pause".into());
        };
        let stopped = self
            .serve
            .as_ref()
            .and_then(|s| s.lock().ok())
            .is_some_and(|s| s.signal(pid, Signal::STOP));
        if stopped && let Ok(mut u) = self.undo.lock() {
            u.stopped.push(pid);
        }
        (
            stopped,
            format!("process {pid} of --serve stopped (SIGSTOP)"),
        )
    }

    fn pause_holder(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let children = super::serve::children_of(std::process::id() as i32);
        let Some(&pid) = children.get(rng.random_range(0..children.len().max(1))) else {
            return (false, "no buyer process to pause".into());
        };
        let stopped = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::kill_process(p, Signal::STOP).is_ok());
        if stopped && let Ok(mut u) = self.undo.lock() {
            u.own_stopped.push(pid);
        }
        (
            stopped,
            format!(
                "buyer process {pid} of {} stopped (SIGSTOP)",
                children.len()
            ),
        )
    }

    fn kill_worker(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let Some(pid) = self.pick(rng) else {
            return (false, "no process to kill".into());
        };
        let killed = self
            .serve
            .as_ref()
            .and_then(|s| s.lock().ok())
            .is_some_and(|s| s.signal(pid, Signal::KILL));
        if killed && let Ok(mut u) = self.undo.lock() {
            u.killed = true;
        }
        (killed, format!("process {pid} of --serve killed (SIGKILL)"))
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        // The last holder going away: nothing may stay stopped (the Redis pause ends by
        // itself).
        if !self.stopped.is_empty() || !self.own_stopped.is_empty() {
            for pid in self.stopped.iter().chain(&self.own_stopped) {
                if let Some(p) = rustix::process::Pid::from_raw(*pid) {
                    let _ = rustix::process::kill_process(p, Signal::CONT);
                }
            }
        }
    }
}
