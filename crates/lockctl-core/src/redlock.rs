//! Redlock: one lock held by a majority of independent Redis masters.
//!
//! The algorithm as Redis documents it, with the details the well-known clients get wrong
//! done carefully:
//! - every node is asked at once (a thread per node), each with a timeout much smaller than
//!   the lease, so one slow node cannot eat the lease;
//! - a node that errors or times out is a vote against, never a reason to abort (redlock-rs
//!   returned early on the first error);
//! - the lock counts only with a majority *and* a positive validity: the lease minus the time
//!   the round took (measured on a monotonic clock started before the first request) minus the
//!   clock drift allowance, 1% of the lease plus 2 ms;
//! - a failed round releases wherever it did take the lock, so a minority grant never lingers;
//! - an extension counts only when a majority extends within the remaining validity.
//!
//! What Redlock does not give (Kleppmann): safety against a holder that pauses past its lease,
//! clocks that jump, or a node that restarts without fsync and forgets a grant. lockctl's answer
//! for the stock is the fenced strategy, whose deduction checks the holder's token on the data
//! node itself, in the same script as the write.

use std::sync::{LazyLock, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Script;

use crate::conn::{Conn, Target};
use crate::error::Result;

/// What it takes and answers: the header comment of `lua/redlock_release.lua`.
const RELEASE_LUA: &str = include_str!("lua/redlock_release.lua");

/// What it takes and answers: the header comment of `lua/redlock_extend.lua`.
const EXTEND_LUA: &str = include_str!("lua/redlock_extend.lua");

static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// Compare-and-delete on one node: 1 deleted, 0 not this token's.
fn release_one(c: &mut Conn, key: &str, token: &str) -> Result<i64> {
    if c.has_delifeq() {
        return c.query(redis::cmd("DELIFEQ").arg(key).arg(token));
    }
    c.script(RELEASE.key(key).arg(token))
}
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));

/// The independent masters that vote on a lock.
#[derive(Debug)]
pub struct Quorum {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    target: Target,
    /// Idle connections, reused across rounds; a connection that failed is dropped.
    pool: Mutex<Vec<Conn>>,
    /// After a failure the node is counted as a vote against, without being asked, until
    /// then: a paused or partitioned node would otherwise cost every round its timeout.
    down_until: Mutex<Option<Instant>>,
}

/// How long a node that failed is left out before it is asked again.
pub const NODE_COOLDOWN: Duration = Duration::from_millis(1000);

impl Quorum {
    /// `targets` should be an odd number, at least 3, of independent masters.
    pub fn new(targets: Vec<Target>) -> Quorum {
        Quorum {
            nodes: targets
                .into_iter()
                .map(|target| Node {
                    target,
                    pool: Mutex::new(Vec::new()),
                    down_until: Mutex::new(None),
                })
                .collect(),
        }
    }

    /// How many nodes make a majority.
    pub fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The nodes' URLs, passwords included: for a child process's environment only.
    pub fn secret_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.target.secret_url().to_string())
            .collect()
    }

    /// The nodes' addresses, for messages.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.target.addr().to_string())
            .collect()
    }

    /// One round: `SET key token NX PX ttl` on every node at once. Won with the validity left
    /// when a majority granted it in time; otherwise releases wherever it was granted and says
    /// how many nodes answered at all (fewer than a majority: no quorum, not a held lock).
    pub fn try_acquire(&self, key: &str, token: &str, ttl: Duration) -> Round {
        let started = Instant::now();
        let ttl_ms = ttl.as_millis() as u64;
        let votes = self.on_all(ttl, |c| {
            let ok: Option<String> = c.query(
                redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms),
            )?;
            Ok(ok.is_some())
        });
        let granted = votes.iter().filter(|v| matches!(v, Ok(true))).count();
        let answered = votes.iter().filter(|v| v.is_ok()).count();
        let drift = ttl / 100 + Duration::from_millis(2);
        let validity = ttl
            .checked_sub(started.elapsed())
            .and_then(|v| v.checked_sub(drift));
        match validity {
            Some(v) if granted >= self.majority() && !v.is_zero() => Round::Won(v),
            _ => {
                self.release(key, token, ttl);
                Round::Lost { answered }
            }
        }
    }

    /// Deletes the lock on every node that still holds this token (best effort): by the
    /// node's native compare-and-delete where it has one (`DELIFEQ`, Valkey 9: no script to
    /// run, see BENCHMARKS.md "Releasing a lock, server by server"), else by the script.
    pub fn release(&self, key: &str, token: &str, ttl: Duration) {
        let _ = self.on_all(ttl, |c| release_one(c, key, token));
    }

    /// Extends the lease on every node; true only when a majority extended it within
    /// `validity` (the time the current lease still counts).
    pub fn extend(&self, key: &str, token: &str, ttl: Duration, validity: Duration) -> bool {
        let started = Instant::now();
        let ttl_ms = ttl.as_millis() as u64;
        let votes = self.on_all(ttl, |c| {
            c.script::<i64>(EXTEND.key(key).arg(token).arg(ttl_ms))
        });
        let extended = votes.iter().filter(|v| matches!(v, Ok(1))).count();
        extended >= self.majority() && started.elapsed() < validity
    }

    /// Who answers, for `check`: each node's address and `Ok(rtt)` or the error, on a fresh
    /// connection with the command line's own limits (`--connect-timeout-ms`, `--timeout-ms`),
    /// so a failure names the flag that sets it.
    pub fn ping_all(&self) -> Vec<(String, Result<Duration>)> {
        thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|node| {
                    thread::Builder::new().spawn_scoped(s, move || {
                        let mut c = node.target.connect()?;
                        let t = Instant::now();
                        c.query::<String>(&redis::cmd("PING"))?;
                        Ok(t.elapsed())
                    })
                })
                .collect();
            self.addrs()
                .into_iter()
                .zip(handles)
                .map(|(addr, h)| (addr, joined(h)))
                .collect()
        })
    }

    /// Runs `f` on every node at once, each with a pooled connection whose calls time out
    /// after a fiftieth of `ttl` (5 to 50 ms, and never more than the target's call timeout:
    /// much less than the lease, so slow nodes cannot eat it). Nodes in their cooldown answer
    /// with an error at once.
    fn on_all<T: Send>(
        &self,
        ttl: Duration,
        f: impl Fn(&mut Conn) -> Result<T> + Sync,
    ) -> Vec<Result<T>> {
        let limit = (ttl / 50).clamp(Duration::from_millis(5), Duration::from_millis(50));
        thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|node| {
                    let f = &f;
                    thread::Builder::new().spawn_scoped(s, move || node.call(limit, f))
                })
                .collect();
            handles.into_iter().map(joined).collect()
        })
    }
}

/// What happened to one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// A majority granted the lock; it counts for this long.
    Won(Duration),
    /// No majority; this many nodes answered at all.
    Lost {
        /// How many nodes granted it.
        answered: usize,
    },
}

/// A node's thread's result; a thread that could not start or that panicked is an error.
fn joined<T>(h: std::io::Result<thread::ScopedJoinHandle<'_, Result<T>>>) -> Result<T> {
    match h {
        Ok(h) => h
            .join()
            .unwrap_or_else(|_| Err(crate::Error::internal("a Redlock node thread panicked"))),
        Err(e) => Err(crate::Error::internal(format!(
            "could not start a Redlock node thread: {e}"
        ))),
    }
}

impl Node {
    fn call<T>(&self, limit: Duration, f: impl Fn(&mut Conn) -> Result<T>) -> Result<T> {
        let lock = |m: &Mutex<Option<Instant>>| *m.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(until) = lock(&self.down_until)
            && Instant::now() < until
        {
            return Err(crate::Error::Connect {
                addr: self.target.addr().to_string(),
                reason: "left out after a recent failure".into(),
            });
        }
        let limit = limit.min(self.target.options().call_timeout);
        let result = self.call_pooled(limit, f);
        *self.down_until.lock().unwrap_or_else(|e| e.into_inner()) = match result {
            Ok(_) => None,
            Err(_) => Some(Instant::now() + NODE_COOLDOWN),
        };
        result
    }

    fn call_pooled<T>(&self, limit: Duration, f: impl Fn(&mut Conn) -> Result<T>) -> Result<T> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.target.connect_within(limit)?,
        };
        conn.set_call_timeout(limit)?;
        let out = f(&mut conn);
        if out.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
        out
    }
}
