//! The faults the hunt does to a system while a round runs, and their undoing.
//!
//! Every fault done is recorded with how to undo it; [`Nemesis::heal`] undoes them all, and is
//! called before a round is judged, at the end of the hunt, on errors (through `Drop`) and by
//! the caller's quit handler (a second Ctrl-C): no Redis is left paused and no process
//! stopped. Process faults touch only the `--serve` tree; `client-kill` spares lockctl's own
//! connections (named `lockctl-hunt` on the server).

mod faults;
pub(crate) mod kind;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::Signal;

use crate::error::{FaultCheckError, ServeError};
use crate::serve::Served;
pub use kind::FaultKind;
use lockctl_core::conn::Target;
use lockctl_hammer::history::Fault;

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
    row: Option<crate::sql::RowLock>,
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
    proxy: Option<Arc<crate::proxy::Proxy>>,
    /// Set by a heal, cleared at a round's start: no fault is done while it is set.
    closed: Arc<Mutex<bool>>,
    /// The system's SQL database, for `db-lock` and `db-kill`.
    sql: Option<Arc<SqlFaults>>,
    /// The round's SKU, whose stock row `db-lock` holds.
    sku: Arc<Mutex<Option<String>>>,
    /// The rounds begun so far, and the last fault of the hunt that took effect (its name,
    /// what it did, its round): what a system that died or broke afterwards followed.
    rounds: Arc<Mutex<(u64, Option<String>)>>,
}

/// What the database faults act on.
pub struct SqlFaults {
    /// The database of the stock (or, without it, of the orders).
    pub db: Arc<crate::sql::SqlDb>,
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
    /// Its address as the server lists it (`ip:port`, or a unix socket's path and `:0`).
    pub addr: String,
    /// The process on this machine that holds the connection, when one was found.
    pub owner: Option<crate::owners::Owner>,
}

impl Outsider {
    /// Whether it is known to be another process of this machine's, which `client-kill`
    /// spares when `--serve` names the system: a connection whose process was found, or one
    /// over a unix socket (always this machine's; whose, `/proc` does not say). Killed before,
    /// a service on the same Redis's socket lost its connection at every strike, and the
    /// fault was counted as the system's.
    pub fn known_outside(&self) -> bool {
        self.owner.is_some() || self.addr.parse::<std::net::SocketAddr>().is_err()
    }
}

/// What a heal undid, and what it could not.
pub struct Healed {
    /// The round's faults, each with when it was undone.
    pub faults: Vec<Fault>,
    /// A system that could not be brought back (its restart failed): the hunt cannot go on.
    pub failed: Option<ServeError>,
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
            rounds: Arc::default(),
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
    pub fn with_proxy(mut self, proxy: Arc<crate::proxy::Proxy>) -> Nemesis {
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
            // A session to end is waited for within the hold, at most a second (a heal waits
            // for a fault under way).
            FaultKind::DbKill => self.db_kill(hold.min(Duration::from_secs(1))),
        };
        if took && let Ok(mut r) = self.rounds.lock() {
            r.1 = Some(format!("{} in round {} ({detail})", kind.name(), r.0));
        }
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

    /// The last fault of the hunt that took effect, in words (`db-kill in round 3 (ended 1
    /// session on ...)`); `None` while none has: a failure before it is not the faults' doing.
    pub fn last_fault(&self) -> Option<String> {
        self.rounds.lock().ok().and_then(|r| r.1.clone())
    }

    /// The system's first process, when it has exited by itself (looked at for up to
    /// `within`); `None` without `--serve`, while it runs, or once the hunt stopped it.
    pub fn system_exit(&self, within: Duration) -> Option<crate::serve::SystemExit> {
        let serve = self.serve.as_ref()?;
        let mut s = serve.lock().unwrap_or_else(|p| p.into_inner());
        s.exited(within)
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
            failed = s.restart().err();
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
        if let Ok(mut r) = self.rounds.lock() {
            r.0 += 1;
        }
    }

    /// Whether the server lets lockctl do `kinds`' Redis faults (managed services often refuse
    /// CLIENT PAUSE or CLIENT KILL): asked once before the hunt, with a pause of 1 ms.
    pub fn check(&self, kinds: &[FaultKind]) -> Result<(), FaultCheckError> {
        let mut c = self
            .redis
            .connect()
            .map_err(|source| FaultCheckError::Connect {
                addr: self.redis.addr().to_string(),
                source: Box::new(source),
            })?;
        for kind in kinds {
            if *kind == FaultKind::RedisPause {
                lockctl_core::check::require(&mut c, lockctl_core::check::REDIS_PAUSE_NEEDS)
                    .map_err(|source| FaultCheckError::Unsupported {
                        kind: *kind,
                        source: Box::new(source),
                    })?;
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
                return Err(FaultCheckError::Refused {
                    kind: *kind,
                    command: if *kind == FaultKind::RedisPause {
                        "PAUSE"
                    } else {
                        "LIST and CLIENT KILL"
                    },
                    addr: self.redis.addr().to_string(),
                    reason: e.to_string(),
                });
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
        self.outsiders_in(&list)
    }

    /// [`Self::outsiders`], of the clients of `list` (a `CLIENT LIST` answer).
    pub(crate) fn outsiders_in(&self, list: &str) -> Vec<Outsider> {
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
        let owners = crate::owners::owners(&parsed);
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

    /// Whether `client-kill` spares the outsiders it can tell apart: with `--serve` the
    /// system's processes are known, and a connection held by another process of this machine
    /// is not the system's.
    pub fn client_kill_spares_outsiders(&self) -> bool {
        self.serve.is_some()
    }

    /// Undoes what can be undone at once, for a process that is quitting now.
    pub fn heal_now(&self) {
        self.unpause_redis();
        self.continue_stopped();
        self.unstall();
        self.let_row_go();
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
