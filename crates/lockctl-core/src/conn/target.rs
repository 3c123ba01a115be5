//! A server to connect to, and opening connections to it with a bounded wait and an error that
//! says what to check.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use super::errors::{auth_reason, is_auth_error, is_tls_error, shorten, url_problem};
use super::holdings::Holdings;
use super::options::{ConnectOptions, require_crypto_provider};
use super::{Conn, Inner};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::redact::{redact, scrub};

/// A Redis server (or a Redis Cluster, by one of its nodes) to connect to: the parsed URL plus
/// the limits that every connection gets.
#[derive(Clone)]
pub struct Target {
    client: Client,
    url: Arc<str>,
    addr: Arc<str>,
    options: ConnectOptions,
    /// Where the lock, the stock and the worker record what they do: nothing (`None`, the
    /// default, which costs nothing) or the caller's [`Metrics`].
    metrics: Option<Arc<Metrics>>,
    /// Where locks taken through this target are registered, to be given back on a quick
    /// exit (`None`: nowhere).
    holdings: Option<Holdings>,
    /// The name each connection gives itself (`CLIENT SETNAME`), so that the server's client
    /// list tells them from others' (`None`: no name, and no extra call).
    client_name: Option<Arc<str>>,
}

#[derive(Clone)]
pub(super) enum Client {
    Single(Box<redis::Client>),
    Cluster(Arc<Seeds>),
}

impl Client {
    pub(super) fn open(&self, limit: Duration) -> redis::RedisResult<Inner> {
        match self {
            Client::Single(c) => c.get_connection_with_timeout(limit).map(Inner::Single),
            Client::Cluster(s) => s
                .client()
                .get_connection()
                .map(|c| Inner::Cluster(Box::new(c))),
        }
    }
}

/// The nodes a cluster connection starts from: the one given, then every node the cluster
/// named since (its masters and replicas, learned at each connect), so that a new connection
/// still finds the cluster when the given node is down (a master killed and failed over). The
/// driver tries them in order and asks the first that answers for the slots.
pub(super) struct Seeds {
    given: redis::ConnectionInfo,
    connect_timeout: Duration,
    call_timeout: Duration,
    /// The nodes learned (host, port), and the client that starts from them.
    known: std::sync::RwLock<(Vec<(String, u16)>, redis::cluster::ClusterClient)>,
}

impl Seeds {
    fn new(
        given: redis::ConnectionInfo,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> redis::RedisResult<Seeds> {
        let client = Seeds::build(&given, connect_timeout, call_timeout, &[])?;
        Ok(Seeds {
            given,
            connect_timeout,
            call_timeout,
            known: std::sync::RwLock::new((Vec::new(), client)),
        })
    }

    fn build(
        given: &redis::ConnectionInfo,
        connect_timeout: Duration,
        call_timeout: Duration,
        learned: &[(String, u16)],
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let mut nodes = vec![given.clone()];
        for (host, port) in learned {
            let addr = redis::ConnectionAddr::Tcp(host.clone(), *port);
            if *given.addr() != addr {
                nodes.push(given.clone().set_addr(addr));
            }
        }
        // No retries inside the driver: it would send a packet again after a timeout or a
        // dropped connection, when the first copy may have been applied (a deduction made
        // twice). Redirections, which a server answers without applying anything, are followed
        // by `Conn` itself.
        redis::cluster::ClusterClient::builder(nodes)
            .retries(0)
            .connection_timeout(connect_timeout)
            .response_timeout(call_timeout)
            .build()
    }

    pub(super) fn client(&self) -> redis::cluster::ClusterClient {
        self.known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Takes the nodes of `slots` as seeds from now on, when they are not the ones known.
    fn learn(&self, slots: &[super::SlotRange]) {
        let mut nodes: Vec<(String, u16)> = slots
            .iter()
            .flat_map(|r| r.nodes.iter().cloned())
            .filter(|(host, _)| !host.is_empty() && host != "?")
            .collect();
        nodes.sort();
        nodes.dedup();
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        if nodes.is_empty() || known.0 == nodes {
            return;
        }
        if let Ok(client) =
            Seeds::build(&self.given, self.connect_timeout, self.call_timeout, &nodes)
        {
            *known = (nodes, client);
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the URL itself: it may carry a password.
        f.debug_struct("Target").field("addr", &self.addr).finish()
    }
}

/// Port 0 parses (the `redis` crate takes it) but no server listens there: said as a bad URL,
/// not left to fail as "connection refused" as if Redis were down.
fn refuse_port_zero(url: &str, addr: &redis::ConnectionAddr) -> Result<()> {
    let port = match addr {
        redis::ConnectionAddr::Tcp(_, port) => *port,
        redis::ConnectionAddr::TcpTls { port, .. } => *port,
        _ => return Ok(()),
    };
    match port {
        0 => Err(Error::BadUrl {
            flag: None,
            url: redact(url),
            reason: "port 0 is not a port a server listens on; give Redis's port, 1 to 65535 (6379 when left out)".into(),
        }),
        _ => Ok(()),
    }
}

impl Target {
    /// Parses `url` (any form the `redis` crate reads). The URL is kept only to hand to child
    /// processes through the environment; it is never displayed.
    ///
    /// A `rediss://` URL needs rustls's process-wide crypto provider, which the program
    /// chooses and installs before it (for ring's:
    /// `rustls::crypto::ring::default_provider().install_default()`); this library installs
    /// none, and without one returns [`Error::NoCryptoProvider`].
    pub fn open(url: &str, options: ConnectOptions) -> Result<Target> {
        let bad = |_: RedisError| Error::BadUrl {
            flag: None,
            url: redact(url),
            reason: url_problem(url),
        };
        let tls = url.starts_with("rediss://");
        if tls {
            require_crypto_provider()?;
        } else if options.tls.any() {
            return Err(Error::Tls {
                reason: format!(
                    "certificate files need a rediss:// URL, not '{}'",
                    redact(url)
                ),
            });
        }
        let client = if tls && options.tls.any() {
            redis::Client::build_with_tls(url, options.tls.load()?).map_err(bad)?
        } else {
            redis::Client::open(url).map_err(bad)?
        };
        refuse_port_zero(url, client.get_connection_info().addr())?;
        let addr = client.get_connection_info().addr().to_string();
        Ok(Target {
            client: Client::Single(Box::new(client)),
            url: url.into(),
            addr: addr.into(),
            options,
            metrics: None,
            holdings: None,
            client_name: None,
        })
    }

    /// A Redis Cluster reached through the seed node `url`; commands follow MOVED and ASK
    /// redirections to the node that owns each key's slot.
    pub fn open_cluster(url: &str, options: ConnectOptions) -> Result<Target> {
        let bad = |_: RedisError| Error::BadUrl {
            flag: None,
            url: redact(url),
            reason: url_problem(url),
        };
        if url.starts_with("rediss://") || options.tls.any() {
            return Err(Error::Tls {
                reason:
                    "TLS to a Redis Cluster is not supported yet; use a redis:// URL for a cluster"
                        .into(),
            });
        }
        let seed = redis::Client::open(url).map_err(bad)?;
        refuse_port_zero(url, seed.get_connection_info().addr())?;
        let addr = seed.get_connection_info().addr().to_string();
        let seeds = Seeds::new(
            seed.get_connection_info().clone(),
            options.connect_timeout,
            options.call_timeout,
        )
        .map_err(bad)?;
        Ok(Target {
            client: Client::Cluster(Arc::new(seeds)),
            url: url.into(),
            addr: addr.into(),
            options,
            metrics: None,
            holdings: None,
            client_name: None,
        })
    }

    /// The driver's client of a single server, for the native async transport
    /// ([`crate::aio`]); `None` for a cluster, which that transport does not drive.
    #[cfg(feature = "tokio")]
    pub(crate) fn single_client(&self) -> Option<&redis::Client> {
        match &self.client {
            Client::Single(c) => Some(c),
            Client::Cluster(_) => None,
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
    }

    /// The same target, whose connections name themselves `name` on the server (CLIENT
    /// SETNAME; a server that refuses it is not an error): one more call per connection.
    pub fn with_client_name(mut self, name: &str) -> Target {
        self.client_name = Some(name.into());
        self
    }

    /// The `CLIENT SETNAME` each new connection sends, when [`Target::with_client_name`] gave a
    /// name: one command for the blocking and the async connections.
    pub fn client_name_command(&self) -> Option<redis::Cmd> {
        let name = self.client_name.as_deref()?;
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("SETNAME").arg(name);
        Some(cmd)
    }

    /// The same target, whose connections record into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Target {
        self.metrics = Some(metrics);
        self
    }

    /// Where this target's connections record, if anywhere.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// The same target, whose locks are registered in `holdings`.
    pub fn with_holdings(mut self, holdings: Holdings) -> Target {
        self.holdings = Some(holdings);
        self
    }

    /// Where this target's locks are registered, if anywhere.
    pub fn holdings(&self) -> Option<&Holdings> {
        self.holdings.as_ref()
    }

    /// `host:port` (or the socket path): safe to print.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The URL as given, password included: for a child process's environment only.
    pub fn secret_url(&self) -> &str {
        &self.url
    }

    /// The limits every connection gets.
    pub fn options(&self) -> &ConnectOptions {
        &self.options
    }

    /// Opens a connection whose every call is bounded by the call timeout.
    pub fn connect(&self) -> Result<Conn> {
        self.connect_within(self.options.connect_timeout)
    }

    /// Opens the driver's connection on a helper thread and waits at most `limit` for it: the
    /// driver bounds the TCP connect and the handshake that follows (HELLO, AUTH, SELECT) each
    /// by the timeout, so a server that accepts and then says nothing would cost twice the
    /// limit. `None` when the limit passed; the thread then finishes on its own within the
    /// driver's bounds and its connection is dropped.
    fn open_within(&self, limit: Duration) -> Option<redis::RedisResult<Inner>> {
        let client = self.client.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("lockctl-connect".into())
            .spawn(move || {
                let _ = tx.send(client.open(limit));
            });
        match spawned {
            Ok(_) => rx.recv_timeout(limit).ok(),
            // No thread to be had: connect here, with the driver's own bounds.
            Err(_) => Some(self.client.open(limit)),
        }
    }

    /// What a failed connect means, in the library's terms: each case names what to check.
    pub(crate) fn connect_error(&self, e: RedisError, after: Duration) -> Error {
        let addr = self.addr.to_string();
        let text = e.to_string();
        if e.is_timeout() {
            Error::ConnectTimeout { addr, after }
        } else if is_auth_error(&e) {
            Error::Auth {
                addr,
                reason: auth_reason(&e),
            }
        } else if text.contains("max number of clients") {
            // Up and answering, but full: not an outage to wait out.
            Error::Redis {
                addr,
                reason: "the server has reached its maxclients: it refuses new connections".into(),
                code: Some("MAXCLIENTS".into()),
                indeterminate: false,
                hint: Some(crate::Hint::MaxClients),
            }
        } else if e.is_connection_refusal() {
            Error::Connect {
                addr,
                reason: "connection refused".into(),
            }
        } else if is_tls_error(&e) {
            Error::Tls {
                reason: format!(
                    "could not connect to '{addr}': {}",
                    shorten(scrub(&text, &self.url))
                ),
            }
        } else if e.kind() == ErrorKind::Parse || text.contains("Parse error") {
            Error::NotRedis { addr }
        } else if e.code().is_some() || text.contains("refused to switch database") {
            // The server answered, and said no (a database index out of range, say).
            Error::Refused {
                addr,
                reason: shorten(scrub(&text, &self.url)),
            }
        } else {
            Error::Connect {
                addr,
                reason: shorten(scrub(&text, &self.url)),
            }
        }
    }

    /// Opens a connection, giving up after `connect_timeout`.
    pub fn connect_within(&self, connect_timeout: Duration) -> Result<Conn> {
        let inner = match self.open_within(connect_timeout) {
            Some(opened) => opened,
            None => {
                return Err(Error::ConnectTimeout {
                    addr: self.addr.to_string(),
                    after: connect_timeout,
                });
            }
        }
        .map_err(|e| self.connect_error(e, connect_timeout))?;
        let cluster = match &self.client {
            Client::Cluster(s) => Some(s.client()),
            Client::Single(_) => None,
        };
        let mut conn = Conn {
            inner,
            cluster,
            addr: self.addr.clone(),
            url: self.url.clone(),
            call_timeout: self.options.call_timeout,
            metrics: self.metrics.clone(),
            delifeq: None,
        };
        conn.set_call_timeout(self.options.call_timeout)?;
        if let Client::Cluster(seeds) = &self.client
            && let Ok(slots) = conn.cluster_slots()
        {
            // One more call per connection: connections live long, and the next one must not
            // depend on the given node being up.
            seeds.learn(&slots);
        }
        if let (Some(setname), None) = (self.client_name_command(), &conn.cluster) {
            let _ = conn.query::<()>(&setname);
        }
        Ok(conn)
    }
}
