//! The native async connection ([`crate::aio`]'s transport): the redis crate's multiplexed
//! tokio connection to a single server, opened as the blocking [`super::Conn`] is (the same
//! limits and client name), its failures mapped by the one mapping of [`Endpoint`].

use std::future::Future;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};

use super::{Endpoint, Target};
use crate::error::{Error, Result};

impl Target {
    /// A new multiplexed async connection to this single server, named as the blocking ones
    /// are (a tool that kills clients by name, the hunt's client-kill, spares lockctl's own).
    /// An error for a cluster, which the async transport does not drive.
    pub(crate) async fn connect_async(&self) -> Result<MultiplexedConnection> {
        let Some(client) = self.single_client().cloned() else {
            return Err(Error::internal(
                "the async transport drives a single server, not a cluster",
            ));
        };
        let options = self.options();
        // The per-call limit is kept by `within`, not by the driver (see there).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(None);
        // Opened in a task of its own: on a runtime built without I/O (`enable_time` alone)
        // tokio panics at the socket's creation, and that panic ends this task, not the
        // caller's; it is answered as the error it is.
        let opening = tokio::spawn(async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        });
        let mut conn = match tokio::time::timeout(options.connect_timeout, opening).await {
            Ok(Ok(Ok(c))) => c,
            Ok(Ok(Err(e))) => return Err(self.connect_error(e, options.connect_timeout)),
            Ok(Err(_)) => {
                return Err(Error::internal(
                    "could not open an async connection to Redis: the tokio runtime has no I/O \
                     driver (build it with enable_io() or enable_all())",
                ));
            }
            Err(_) => {
                return Err(Error::ConnectTimeout {
                    addr: self.addr().to_string(),
                    after: options.connect_timeout,
                });
            }
        };
        if let Some(setname) = self.client_name_command() {
            let _ = within(options.call_timeout, setname.query_async::<()>(&mut conn)).await;
        }
        Ok(conn)
    }

    /// The error of a call that had no reply within the per-call limit.
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            addr: self.addr().to_string(),
            after: self.options().call_timeout,
        }
    }

    /// What this target's driver errors are mapped against.
    pub(crate) fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            addr: self.addr(),
            url: self.secret_url(),
            call_timeout: self.options().call_timeout,
            cluster: self.is_cluster(),
        }
    }
}

/// How late a deadline must fire to count as one that fired while this process was not
/// running.
const LATE: Duration = Duration::from_millis(50);

/// `call`'s output, or `None` when it did not come within `limit`: the async side of the
/// blocking socket's read timeout. The driver's own response timeout is not used: after this
/// process was stopped (SIGSTOP, Ctrl-Z, a paused VM) past a call's deadline, the reply that
/// came in meanwhile and the deadline are ready together, and tokio may run the timer first,
/// failing a call whose answer is in the socket (measured: a hammer of 50 lock buyers stopped
/// for 6 s had 16 purchases fail as timed out, one of which had bought, where the blocking
/// threads' reads found their replies). A deadline that fires late (the process was not
/// running) gives the call one more `limit` from then, as the blocking read does when it is
/// interrupted by the stop and read again; one that fires on time is a server that did not
/// answer, and is final. A runtime too busy to run the timer on time (a starved machine)
/// looks the same as a stop: there a server that does not answer costs up to two limits and
/// the lateness, not one.
pub(crate) async fn within<T>(limit: Duration, call: impl Future<Output = T>) -> Option<T> {
    let started = Instant::now();
    let mut call = std::pin::pin!(call);
    if let Ok(out) = tokio::time::timeout(limit, &mut call).await {
        return Some(out);
    }
    if started.elapsed() < limit + LATE {
        return None;
    }
    tokio::time::timeout(limit, call).await.ok()
}

/// A multiplexed connection with the blocking [`super::Conn`]'s calls: typed replies, scripts
/// loaded on `NOSCRIPT`, errors in the library's terms. A clone shares the connection (its
/// requests are pipelined with the others'); one that blocks (a lock waiter's BLPOP) is used by
/// one caller at a time.
#[derive(Clone)]
pub(crate) struct AsyncConn {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) target: Target,
    /// Closed once the task holding its sender, spawned on the runtime the connection was
    /// opened on, is dropped: when that runtime shuts down. The connection's reader and writer
    /// are a task of that runtime and go with it; a caller kept across runtimes (one per test,
    /// a runtime restarted) must not send on a connection whose driver is gone: the driver
    /// would fail the call as a broken pipe, as if it might have been applied, when it never
    /// left.
    runtime_alive: std::sync::Arc<std::sync::Mutex<tokio::sync::oneshot::Receiver<()>>>,
}

impl AsyncConn {
    /// Opens one to `target`.
    pub(crate) async fn open(target: &Target) -> Result<AsyncConn> {
        let conn = target.connect_async().await?;
        let (alive, runtime_alive) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _alive = alive;
            std::future::pending::<()>().await
        });
        Ok(AsyncConn {
            conn,
            target: target.clone(),
            runtime_alive: std::sync::Arc::new(std::sync::Mutex::new(runtime_alive)),
        })
    }

    /// Whether the runtime that drives this connection still runs.
    pub(crate) fn usable(&self) -> bool {
        use tokio::sync::oneshot::error::TryRecvError;
        let mut alive = self.runtime_alive.lock().unwrap_or_else(|p| p.into_inner());
        !matches!(alive.try_recv(), Err(TryRecvError::Closed))
    }

    /// `cmd`'s reply as a `T`.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        let limit = self.target.options().call_timeout;
        match within(limit, cmd.query_async::<T>(&mut self.conn)).await {
            Some(r) => r.map_err(|e| self.target.endpoint().map_err(e)),
            None => Err(self.target.timed_out()),
        }
    }

    /// A script's reply as a `T`, loaded on `NOSCRIPT` and tried again, as
    /// [`super::Conn::script`] does.
    pub(crate) async fn script<T: FromRedisValue>(
        &mut self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            let limit = self.target.options().call_timeout;
            let r = match within(limit, inv.invoke_async::<T>(&mut self.conn)).await {
                Some(r) => r.map_err(|e| self.target.endpoint().map_err(e)),
                None => Err(self.target.timed_out()),
            };
            match r {
                Err(Error::Redis { code: Some(c), .. }) if c == "NOSCRIPT" && tries < 5 => {}
                other => return other,
            }
        }
    }
}
