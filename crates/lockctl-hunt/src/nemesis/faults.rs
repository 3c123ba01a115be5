//! How each fault is done and undone: Redis (pause, client kill), the proxy (stall), the SQL
//! database (a held row, ended sessions) and processes (of the system, or lockctl's own
//! buyers). Each returns whether it took effect and what it did, for the history.

use std::collections::HashSet;
use std::time::Duration;

use rand::RngExt;
use rustix::process::Signal;

use super::{Nemesis, OWN_NAME};

impl Nemesis {
    pub(super) fn let_row_go(&self) {
        // Dropped outside the lock: its session's rollback is awaited.
        let row = self.undo.lock().ok().and_then(|mut u| u.row.take());
        drop(row);
    }

    pub(super) fn db_lock(&self) -> (bool, String) {
        let Some(sql) = &self.sql else {
            return (false, "no SQL database to lock a row in".into());
        };
        let Some(query) = &sql.stock_query else {
            return (false, "no stock query to lock its row with".into());
        };
        let Some(sku) = self.sku.lock().ok().and_then(|s| s.clone()) else {
            return (false, "no round under way".into());
        };
        let param = crate::sql::SkuParam {
            text: &sku,
            format: sql.format,
        };
        let shown = format!("the stock row of '{sku}' ({query} FOR UPDATE, in a transaction)");
        match sql.db.hold_row(query, param, Duration::from_millis(300)) {
            Ok(held) => {
                let (row, detail) = match held {
                    crate::sql::RowHeld::Held(row) => (row, format!("held {shown}")),
                    crate::sql::RowHeld::Queued(row) => (
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

    pub(super) fn db_kill(&self, within: Duration) -> (bool, String) {
        let Some(sql) = &self.sql else {
            return (false, "no SQL database to end sessions on".into());
        };
        match sql.db.kill_sessions(within) {
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

    pub(super) fn unstall(&self) {
        if let Some(p) = &self.proxy {
            p.unstall_all();
        }
    }

    pub(super) fn stall(&self, rng: &mut impl rand::Rng) -> (bool, String) {
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

    pub(super) fn unpause_redis(&self) {
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

    pub(super) fn continue_stopped(&self) {
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

    pub(super) fn redis_pause(&self, hold: Duration) -> (bool, String) {
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

    /// `CLIENT KILL` of the Redis's clients but lockctl's own and replicas; with `--serve`,
    /// not those known to be other processes' of this machine either (see
    /// [`super::Outsider::known_outside`]: a `redis-cli`, another service on the same Redis):
    /// killed too before, an operator's session was faulted with the system. A TCP client
    /// whose process is not found (another machine's, or one gone meanwhile) is killed, as it
    /// may be the system's, and the detail counts it apart.
    pub(super) fn client_kill(&self) -> (bool, String) {
        let killed = self.redis.connect().and_then(|mut c| {
            let me: i64 = c.query(redis::cmd("CLIENT").arg("ID"))?;
            let list: String = c.query(redis::cmd("CLIENT").arg("LIST"))?;
            let (mut outside, mut unknown) = (HashSet::new(), HashSet::new());
            if self.client_kill_spares_outsiders() {
                for o in self.outsiders_in(&list) {
                    match o.known_outside() {
                        true => outside.insert(o.addr),
                        false => unknown.insert(o.addr),
                    };
                }
            }
            let (mut n, mut spared, mut of_unknown) = (0, 0, 0);
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
                let addr = field("addr").unwrap_or_default();
                if outside.contains(addr) {
                    spared += 1;
                    continue;
                }
                // A client gone meanwhile is no error: it is killed all the same.
                let k = c
                    .query::<i64>(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id))
                    .unwrap_or(0);
                n += k;
                of_unknown += k * i64::from(unknown.contains(addr));
            }
            Ok((n, spared, of_unknown))
        });
        match killed {
            Ok((n, spared, of_unknown)) => {
                let mut detail = match of_unknown {
                    0 => format!("killed {n} connection(s) of the system to Redis"),
                    k => format!(
                        "killed {n} connection(s) to Redis ({k} of no process found on this machine)"
                    ),
                };
                if spared > 0 {
                    detail.push_str(&format!(", spared {spared} of other processes"));
                }
                (n > 0, detail)
            }
            Err(e) => (false, format!("could not kill connections: {e}")),
        }
    }

    /// Of the system's processes `tree`, the group a process fault picks from, a draw in it,
    /// and whether it is the web tier.
    fn group(tree: &[i32], rng: &mut impl rand::Rng) -> (Vec<i32>, usize, bool) {
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
        let web = crate::owners::web_tier(&procs);
        let (mut serving, other): (Vec<i32>, Vec<i32>) =
            procs.iter().partition(|p| web.contains(p));
        if serving.len() > 1 {
            serving.remove(0);
        }
        let (side, pick) = (rng.random_range(0..2u32), rng.random_range(0..1024usize));
        match (side, serving.is_empty(), other.is_empty()) {
            (_, true, true) => (tree.to_vec(), pick, false),
            (0, false, _) | (_, false, true) => (serving, pick, true),
            _ => (other, pick, false),
        }
    }

    /// The one process of `tree` a kill picks.
    fn pick(tree: &[i32], rng: &mut impl rand::Rng) -> Vec<i32> {
        let (group, pick, _) = Self::group(tree, rng);
        group
            .get(pick % group.len().max(1))
            .copied()
            .into_iter()
            .collect()
    }

    /// Sends `signal` to the processes `choose` picks of the system's tree, frozen while it
    /// chooses (see [`crate::serve::Served::freeze_and_signal`]); those it reached.
    fn signal_picked(&self, signal: Signal, choose: impl FnOnce(&[i32]) -> Vec<i32>) -> Vec<i32> {
        match self.serve.as_ref().and_then(|s| s.lock().ok()) {
            Some(s) => s.freeze_and_signal(signal, choose),
            None => Vec::new(),
        }
    }

    /// The processes a pause stops. Of a web tier with several workers, a random half (the
    /// others go on serving): a worker that holds a lock is then among them half the time,
    /// whichever it is, and only a holder stalled past its lease shows that bug (one worker
    /// picked of 16 was, most of the time, one waiting for the lock). Else the one process
    /// [`Self::pick`] would pick. The half is drawn from the same two draws as one process,
    /// so a seed's later rounds stay as they were.
    fn pick_for_pause(tree: &[i32], rng: &mut impl rand::Rng) -> Vec<i32> {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let (mut group, pick, web) = Self::group(tree, rng);
        if !web || group.len() < 2 {
            return group
                .get(pick % group.len().max(1))
                .copied()
                .into_iter()
                .collect();
        }
        group.shuffle(&mut rand::rngs::StdRng::seed_from_u64(pick as u64));
        group.truncate(group.len() / 2);
        group
    }

    pub(super) fn pause_worker(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let stopped = self.signal_picked(Signal::STOP, |tree| Self::pick_for_pause(tree, rng));
        if let Ok(mut u) = self.undo.lock() {
            u.stopped.extend(&stopped);
        }
        let detail = match stopped.as_slice() {
            [] => "no process of the system under test to pause".to_string(),
            [one] => format!("process {one} of the system under test stopped (SIGSTOP)"),
            many => format!(
                "processes {} of the system under test stopped (SIGSTOP)",
                many.iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        (!stopped.is_empty(), detail)
    }

    pub(super) fn pause_holder(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let children = crate::serve::children_of(std::process::id() as i32);
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

    pub(super) fn kill_worker(&self, rng: &mut impl rand::Rng) -> (bool, String) {
        let killed = self.signal_picked(Signal::KILL, |tree| Self::pick(tree, rng));
        let Some(pid) = killed.first() else {
            return (false, "no process of the system under test to kill".into());
        };
        if let Ok(mut u) = self.undo.lock() {
            u.killed = true;
        }
        (
            true,
            format!("process {pid} of the system under test killed (SIGKILL)"),
        )
    }
}
