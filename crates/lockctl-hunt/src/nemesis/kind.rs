//! The kinds of fault, by the names `nemesis` lists take, and what each needs.

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
