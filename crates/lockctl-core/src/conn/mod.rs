//! Connections to Redis with bounded waits and errors that never leak a password.
//!
//! Every call goes through [`Conn`], which sets a read and write timeout on the socket, so a
//! paused or partitioned server turns into a [`Error::Timeout`] after `--timeout-ms` instead of
//! a hang, and which maps the driver's errors to [`Error`] in one place. Scripts run through
//! `redis::Script` (EVALSHA first, loading the script on `NOSCRIPT`), so a flushed script cache
//! or a restarted server costs one extra round trip, not a failure.
//!
//! Layout: [`Conn`] here; [`Target`] (what to connect to, and connecting) in `target`; the
//! limits and TLS files in `options`; error wording in `errors` (passwords hidden by
//! [`crate::redact`]).

#[cfg(feature = "tokio")]
mod async_conn;
mod errors;
mod holdings;
mod options;
mod target;

use crate::redact::scrub;
#[cfg(feature = "tokio")]
pub(crate) use async_conn::{AsyncConn, within};
use errors::{auth_reason, is_auth_error, is_interrupted, shorten};
#[cfg(feature = "tokio")]
pub(crate) use holdings::SETTLE;
pub use holdings::{GiveBack, Held, Holdings};
pub use options::{ConnectOptions, TlsFiles};
pub use target::Target;

/// A range of a cluster's slots and the nodes serving it (host, port), the master first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot.
    pub start: u16,
    /// The last slot.
    pub end: u16,
    /// The master, then its replicas.
    pub nodes: Vec<(String, u16)>,
}

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisError};

use crate::error::{Error, Result};

/// One connection. Not shared between threads: each worker opens its own.
pub struct Conn {
    inner: Inner,
    /// The cluster's client, to reconnect with a fresh slot map after a redirection.
    cluster: Option<redis::cluster::ClusterClient>,
    addr: Arc<str>,
    url: Arc<str>,
    call_timeout: Duration,
    /// Where work on this connection records (see [`Target::with_metrics`]).
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Whether the server has the native compare-and-delete `DELIFEQ`, once asked.
    delifeq: Option<bool>,
}

enum Inner {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Inner {
    fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Inner::Single(c) => c,
            Inner::Cluster(c) => c,
        }
    }

    fn set_timeouts(&self, limit: Duration) -> redis::RedisResult<()> {
        match self {
            Inner::Single(c) => c
                .set_read_timeout(Some(limit))
                .and(c.set_write_timeout(Some(limit))),
            Inner::Cluster(c) => c
                .set_read_timeout(Some(limit))
                .and(c.set_write_timeout(Some(limit))),
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn").field("addr", &self.addr).finish()
    }
}

impl Conn {
    /// `host:port` of the server.
    /// Where work on this connection records, if anywhere.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.metrics.as_ref()
    }

    /// The server's `host:port`, as errors name it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether this is a connection to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The cluster's slot ranges and the nodes serving each (`CLUSTER SLOTS`), the master
    /// first. Entries the server writes otherwise than Redis does are left out.
    pub fn cluster_slots(&mut self) -> Result<Vec<SlotRange>> {
        let slots: Vec<redis::Value> = self.query(redis::cmd("CLUSTER").arg("SLOTS"))?;
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        };
        let mut out = Vec::new();
        for range in slots {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let (Some(a), Some(b)) = (int(parts.first()), int(parts.get(1))) else {
                continue;
            };
            let nodes: Vec<(String, u16)> = parts[2..]
                .iter()
                .filter_map(|node| {
                    let redis::Value::Array(node) = node else {
                        return None;
                    };
                    let host = match node.first() {
                        Some(redis::Value::BulkString(h)) => String::from_utf8(h.clone()).ok()?,
                        _ => return None,
                    };
                    let port = u16::try_from(int(node.get(1))?).ok()?;
                    Some((host, port))
                })
                .collect();
            if nodes.is_empty() {
                continue;
            }
            out.push(SlotRange {
                start: a.clamp(0, 16383) as u16,
                end: b.clamp(0, 16383) as u16,
                nodes,
            });
        }
        Ok(out)
    }

    /// The per-call limit now in force.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Changes the per-call limit (a blocking command needs more than its own block time).
    pub fn set_call_timeout(&mut self, limit: Duration) -> Result<()> {
        let limit = limit.max(Duration::from_millis(1));
        self.call_timeout = limit;
        self.inner.set_timeouts(limit).map_err(|e| self.map_err(e))
    }

    /// Runs one command.
    pub fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        self.following_redirects(|c| {
            let r = cmd.query(c.inner.like());
            r.map_err(|e| c.map_err(e))
        })
    }

    /// Whether the server knows the command `name` (`COMMAND INFO` answers nil for one it
    /// does not). A server that refuses `COMMAND` is taken not to have it.
    pub fn has_command(&mut self, name: &str) -> bool {
        let info: Result<Vec<redis::Value>> =
            self.query(redis::cmd("COMMAND").arg("INFO").arg(name));
        matches!(info.as_deref(), Ok([first]) if !matches!(first, redis::Value::Nil))
    }

    /// Whether the server has the native compare-and-delete `DELIFEQ key value` (Valkey 9):
    /// probed once per connection, then remembered.
    pub fn has_delifeq(&mut self) -> bool {
        if let Some(known) = self.delifeq {
            return known;
        }
        let known = self.has_command("DELIFEQ");
        self.delifeq = Some(known);
        known
    }

    /// `INFO section` (`"server"`, `"clients"`, `""` for the default sections), read by the
    /// redis crate's own parser: the one way lockctl reads INFO.
    pub fn info(&mut self, section: &str) -> Result<redis::InfoDict> {
        let mut cmd = redis::cmd("INFO");
        if !section.is_empty() {
            cmd.arg(section);
        }
        self.query(&cmd)
    }

    /// Runs `call`, and on a cluster runs it again while the server answers with a
    /// redirection (`MOVED`, `ASK`, `TRYAGAIN`: the slot is elsewhere or migrating). Such an
    /// answer means the server applied nothing, so sending again cannot apply anything twice;
    /// the connection is reopened first, which reads the slot map afresh. Nothing else is ever
    /// sent again: a timeout or a broken connection may have been applied. Gives up after the
    /// per-call limit.
    fn following_redirects<T>(
        &mut self,
        mut call: impl FnMut(&mut Conn) -> Result<T>,
    ) -> Result<T> {
        let deadline = std::time::Instant::now() + self.call_timeout;
        let mut pause = Duration::from_millis(5);
        loop {
            let result = call(self);
            let redirected = matches!(&result,
                Err(Error::Redis { code: Some(c), indeterminate: false, .. })
                    if matches!(c.as_str(), "MOVED" | "ASK" | "TRYAGAIN"));
            let Some(client) = self.cluster.as_ref().filter(|_| redirected) else {
                return result;
            };
            if std::time::Instant::now() + pause > deadline {
                return result;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
            if let Ok(fresh) = client.get_connection() {
                self.inner = Inner::Cluster(Box::new(fresh));
                let limit = self.call_timeout;
                self.inner
                    .set_timeouts(limit)
                    .map_err(|e| self.map_err(e))?;
            }
        }
    }

    /// Runs `commands` in one MULTI/EXEC transaction, followed in the same round trip by `then`
    /// if given (which runs whatever the transaction did; on a cluster, in a second round trip).
    /// Returns EXEC's replies, parsed as `T`, and `then`'s reply (`None` if it could not be
    /// read: the caller runs it again its own way).
    ///
    /// Built by hand rather than with `redis::Pipeline` because a cluster connection refuses
    /// pipelines; sent as one packet, it goes to the node owning the first command's key, which
    /// is the node of every key of a SKU when the SKU carries a hash tag.
    pub fn transaction<T: FromRedisValue>(
        &mut self,
        commands: &[redis::Cmd],
        then: Option<&redis::Cmd>,
    ) -> Result<(T, Option<redis::Value>)> {
        self.following_redirects(|c| c.transaction_once(commands, then))
    }

    fn transaction_once<T: FromRedisValue>(
        &mut self,
        commands: &[redis::Cmd],
        then: Option<&redis::Cmd>,
    ) -> Result<(T, Option<redis::Value>)> {
        // A cluster connection fails a whole packet on any error reply in it, so a NOSCRIPT
        // from `then` would hide that the transaction ran: there `then` is sent on its own,
        // after the transaction.
        let (in_packet, after) = match self.inner {
            Inner::Cluster(_) => (None, then),
            Inner::Single(_) => (then, None),
        };
        let mut packed = redis::cmd("MULTI").get_packed_command();
        for c in commands {
            packed.extend(c.get_packed_command());
        }
        packed.extend(redis::cmd("EXEC").get_packed_command());
        if let Some(t) = in_packet {
            packed.extend(t.get_packed_command());
        }
        let count = commands.len() + 2 + usize::from(in_packet.is_some());
        // An error here may come from any command of the packet, after EXEC applied the
        // transaction: its effect is unknown.
        let mut replies = self
            .inner
            .like()
            .req_packed_commands(&packed, 0, count)
            .map_err(|e| self.map_err(e).into_indeterminate())?;
        let then_reply = in_packet.and_then(|_| replies.pop());
        let exec = replies.pop().unwrap_or(redis::Value::Nil);
        let exec = match exec {
            redis::Value::ServerError(e) => return Err(self.map_err(e.into())),
            redis::Value::Nil => {
                // MULTI refused a command (EXECABORT): find the reason among the replies.
                let why = replies.into_iter().find_map(|r| match r {
                    redis::Value::ServerError(e) => Some(e),
                    _ => None,
                });
                return Err(match why {
                    Some(e) => self.map_err(e.into()),
                    None => self.unexpected("the transaction was aborted".into()),
                });
            }
            v => v,
        };
        let parsed = T::from_redis_value(exec).map_err(|e| self.map_err(e.into()))?;
        // An error from a separate `then` is left to the caller to retry (as for NOSCRIPT).
        let then_reply =
            then_reply.or_else(|| after.and_then(|t| self.inner.like().req_command(t).ok()));
        Ok((parsed, then_reply))
    }

    /// Sends a command without reading its reply, for a caller that drives several
    /// connections at once; read the reply with [`Conn::recv`]. Not on a cluster connection.
    pub fn send(&mut self, cmd: &redis::Cmd) -> Result<()> {
        let r = match &mut self.inner {
            Inner::Single(c) => c.send_packed_command(&cmd.get_packed_command()),
            Inner::Cluster(_) => {
                return Err(self.unexpected("send/recv is not available on a cluster".into()));
            }
        };
        r.map_err(|e| self.map_err(e).into_indeterminate())
    }

    /// Reads the reply to the oldest command sent with [`Conn::send`]. A failure here is
    /// indeterminate: the command may have run.
    pub fn recv<T: FromRedisValue>(&mut self) -> Result<T> {
        let r = match &mut self.inner {
            Inner::Single(c) => c.recv_response(),
            Inner::Cluster(_) => {
                return Err(self.unexpected("send/recv is not available on a cluster".into()));
            }
        };
        let value = match r {
            Ok(redis::Value::ServerError(e)) => return Err(self.map_err(e.into())),
            Ok(v) => v,
            Err(e) => return Err(self.map_err(e).into_indeterminate()),
        };
        T::from_redis_value(value).map_err(|e| self.map_err(e.into()))
    }

    /// `WAIT replicas timeout_ms` on the server that holds `key` (on a cluster, the master of
    /// its slot: the one the writes just made through this connection went to): how many
    /// replicas have acknowledged every write this connection made there. Never sent again
    /// after a redirection: a WAIT that moved would count another server's replicas.
    pub fn wait_replicas(&mut self, key: &str, replicas: u32, timeout: Duration) -> Result<u32> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis() as u64);
        // WAIT blocks for its timeout: the call's own limit must outlast it.
        let limit = self.call_timeout;
        let longer = limit + timeout;
        self.inner
            .set_timeouts(longer)
            .map_err(|e| self.map_err(e))?;
        let acked = self.on_master_of::<i64>(key, &cmd);
        let restored = self.inner.set_timeouts(limit);
        let acked = acked.map_err(|e| self.map_err(e))?;
        restored.map_err(|e| self.map_err(e))?;
        Ok(acked.max(0) as u32)
    }

    /// Sends `cmd`, a command about a server rather than a key (WAIT, INFO), to the master
    /// serving `key`: on a cluster the master of its slot, else the one server.
    fn on_master_of<T: FromRedisValue>(
        &mut self,
        key: &str,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        self.on_master_of_slot(crate::keys::key_slot(key), cmd)
    }

    /// Sends `cmd` to the master serving `slot` (on one server, to that server).
    fn on_master_of_slot<T: FromRedisValue>(
        &mut self,
        slot: u16,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        match &mut self.inner {
            Inner::Single(c) => cmd.query(c),
            Inner::Cluster(c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let to = Route::new(slot, SlotAddr::Master);
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(to)),
                )
                .and_then(|v| T::from_redis_value(v).map_err(RedisError::from))
            }
        }
    }

    /// `INFO replication` of the master serving `key` (on a cluster, the master of its slot):
    /// its `master_replid`, which changes when a replica is promoted in its place or it
    /// restarts. `None` where the server does not say (or refuses INFO).
    pub fn master_replid(&mut self, key: &str) -> Result<Option<String>> {
        self.master_replid_at(crate::keys::key_slot(key))
    }

    /// [`Conn::master_replid`] of the master serving `slot`.
    pub fn master_replid_at(&mut self, slot: u16) -> Result<Option<String>> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        let info = self.on_master_of_slot::<redis::InfoDict>(slot, &cmd);
        let info = match info {
            Ok(i) => i,
            Err(e) if e.code() == Some("NOPERM") => return Ok(None),
            Err(e) => return Err(self.map_err(e)),
        };
        // A replica's own id is its master's: only a master's says who has been serving.
        if info.get::<String>("role").as_deref() != Some("master") {
            return Ok(None);
        }
        Ok(info.get::<String>("master_replid"))
    }

    /// Runs a script by EVALSHA, loading it first if the server does not know it.
    pub fn script<T: FromRedisValue>(&mut self, inv: &redis::ScriptInvocation<'_>) -> Result<T> {
        // The driver loads a script the server lacks and tries once more; a cache flushed again
        // between the load and that try (SCRIPT FLUSH, a failover) answers NOSCRIPT again, and
        // the script, which did not run, is simply tried again.
        let mut tries = 0;
        loop {
            tries += 1;
            let r = self.following_redirects(|c| {
                let r = inv.invoke(c.inner.like());
                r.map_err(|e| c.map_err(e))
            });
            match r {
                Err(Error::Redis { code: Some(c), .. }) if c == "NOSCRIPT" && tries < 5 => {}
                other => return other,
            }
        }
    }

    /// An error for a reply that makes no sense here.
    pub fn unexpected(&self, reason: String) -> Error {
        unexpected(&self.addr, reason)
    }

    /// Maps a driver error to the library's error, naming this connection's address.
    pub fn map_err(&self, e: RedisError) -> Error {
        self.endpoint().map_err(e)
    }

    /// What this connection's driver errors and replies are mapped against.
    pub(crate) fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            addr: &self.addr,
            url: &self.url,
            call_timeout: self.call_timeout,
            cluster: self.cluster.is_some(),
        }
    }
}

/// An error for a reply from the server at `addr` that makes no sense here.
pub(crate) fn unexpected(addr: &str, reason: String) -> Error {
    Error::Redis {
        addr: addr.to_string(),
        reason,
        code: None,
        indeterminate: false,
        hint: None,
    }
}

/// What a driver error is mapped against: the one mapping of the blocking [`Conn`] and the
/// async transport ([`crate::aio`]) alike, so a failure reads the same whichever made the call.
pub(crate) struct Endpoint<'a> {
    /// The server's `host:port`, as errors name it.
    pub addr: &'a str,
    /// The URL, only to scrub its password out of the driver's words.
    pub url: &'a str,
    /// The per-call limit a timeout is reported against.
    pub call_timeout: Duration,
    /// Whether the connection is to a Redis Cluster.
    pub cluster: bool,
}

impl Endpoint<'_> {
    /// An error for a reply from this endpoint that makes no sense here.
    pub(crate) fn unexpected(&self, reason: String) -> Error {
        unexpected(self.addr, reason)
    }

    /// Maps a driver error to the library's error, naming this endpoint's address.
    pub(crate) fn map_err(&self, e: RedisError) -> Error {
        let addr = self.addr.to_string();
        let interrupted = is_interrupted(&e);
        if interrupted {
            Error::Redis {
                addr,
                reason: "the call was interrupted (the process was stopped and continued)".into(),
                code: Some(crate::error::INTERRUPTED.into()),
                indeterminate: true,
                hint: None,
            }
        } else if e.is_timeout() {
            Error::Timeout {
                addr,
                after: self.call_timeout,
            }
        } else if is_auth_error(&e) {
            Error::Auth {
                addr,
                reason: auth_reason(&e),
            }
        } else if e.is_connection_refusal() {
            Error::Connect {
                addr,
                reason: "connection refused".into(),
            }
        } else {
            // An I/O failure after the command was written may have been applied; a reply from
            // the server (an error string) means it was processed and rejected.
            let indeterminate = matches!(e.kind(), ErrorKind::Io | ErrorKind::Parse);
            let code = e.code().map(str::to_string);
            let mut reason = shorten(scrub(&e.to_string(), self.url));
            // A node of a cluster refuses a script over keys of several slots before it
            // redirects: CROSSSLOT is the first sign of a cluster, as MOVED is.
            let cross_slot = code.as_deref() == Some("CROSSSLOT")
                || e.to_string().to_ascii_uppercase().starts_with("CROSSSLOT");
            let redirected = matches!(code.as_deref(), Some("MOVED" | "ASK"));
            let mut hint = None;
            match code.as_deref() {
                _ if cross_slot && self.cluster => reason.push_str(
                    " (a SKU's keys must share a slot on a Redis Cluster: write the SKU with a hash tag, {sku})",
                ),
                _ if (cross_slot || redirected) && !self.cluster => {
                    reason.push_str(" (this server is a node of a Redis Cluster)");
                    hint = Some(crate::Hint::ClusterNode);
                }
                Some("CLUSTERDOWN") => {
                    reason = "the cluster is down (CLUSTERDOWN): not every slot is served by a \
                              master, so the cluster refuses commands until it is repaired"
                        .into();
                    hint = Some(crate::Hint::ClusterDown);
                }
                _ => {}
            }
            Error::Redis {
                addr,
                reason,
                code,
                indeterminate,
                hint,
            }
        }
    }
}

/// `EVALSHA` of `script` with `keys`, for a caller that adds the arguments and sends the
/// command itself (pipelined, or inside a packet with others): the key count always comes from
/// `keys`. Unlike [`Conn::script`] it does not load a script the server lacks; the caller
/// handles `NOSCRIPT`.
pub fn evalsha<K: redis::ToRedisArgs>(script: &redis::Script, keys: &[K]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

/// A connection opened on first use and dropped after a failure (a failed connection may be in
/// any state), so the next use opens a fresh one: for long-lived helpers (a metrics endpoint,
/// the exporter, the read-back) that must outlive outages.
#[derive(Debug)]
pub struct Reconnecting {
    target: Target,
    conn: Option<Conn>,
}

impl Reconnecting {
    /// Nothing is opened until the first call.
    pub fn new(target: &Target) -> Reconnecting {
        Reconnecting {
            target: target.clone(),
            conn: None,
        }
    }

    /// Runs `f` on the connection, opening it first if needed; after an error the connection
    /// is dropped and the next call opens another.
    pub fn with<T>(&mut self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let result = f(self.get()?);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    /// The connection, opened first if none is.
    pub fn get(&mut self) -> Result<&mut Conn> {
        if self.conn.is_none() {
            self.conn = Some(self.target.connect()?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| Error::internal("the connection was not kept"))
    }

    /// Drops the connection: the next call opens a fresh one.
    pub fn reset(&mut self) {
        self.conn = None;
    }
}
