//! Connections to Redis with bounded waits and errors that never leak a password.
//!
//! Every call goes through [`Conn`], which sets a read and write timeout on the socket, so a
//! paused or partitioned server turns into a [`Error::Timeout`] after `--timeout-ms` instead of
//! a hang, and which maps the driver's errors to [`Error`] in one place. Scripts run through
//! `redis::Script` (EVALSHA first, loading the script on `NOSCRIPT`), so a flushed script cache
//! or a restarted server costs one extra round trip, not a failure.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisError};

use crate::error::{Error, Result};

/// How long to wait for Redis, and the certificates for `rediss://`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Limit on opening a connection, including AUTH and SELECT. Default: 2000 ms.
    pub connect_timeout: Duration,
    /// Limit on each call, from sending the command to reading the reply. Default: 2000 ms.
    pub call_timeout: Duration,
    /// PEM files for TLS. Default: none (the system's roots, no client certificate).
    pub tls: TlsFiles,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions::new(Duration::from_millis(2000), Duration::from_millis(2000))
    }
}

impl ConnectOptions {
    /// The given limits and no TLS files.
    pub fn new(connect_timeout: Duration, call_timeout: Duration) -> ConnectOptions {
        ConnectOptions {
            connect_timeout,
            call_timeout,
            tls: TlsFiles::default(),
        }
    }
}

/// PEM files for `rediss://` (`--tls-ca`, `--tls-cert`, `--tls-key`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the server's certificate, instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// A client certificate, for servers that require one (with `key`).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// Reads the files, naming the flag and the path of any that cannot be read.
    fn load(&self) -> Result<redis::TlsCertificates> {
        let read = |flag: &str, p: &PathBuf| {
            std::fs::read(p).map_err(|e| Error::Tls {
                reason: format!("cannot read {flag} '{}': {e}", p.display()),
            })
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("--tls-cert", c)?,
                client_key: read("--tls-key", k)?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::Tls {
                    reason: "--tls-cert and --tls-key go together".into(),
                });
            }
        };
        let root_cert = self.ca.as_ref().map(|p| read("--tls-ca", p)).transpose()?;
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// rustls needs one process-wide choice of cryptography; lockctl uses ring's.
fn init_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A Redis server (or a Redis Cluster, by one of its nodes) to connect to: the parsed URL plus
/// the limits that every connection gets.
#[derive(Clone)]
pub struct Target {
    client: Client,
    url: Arc<str>,
    addr: Arc<str>,
    options: ConnectOptions,
}

#[derive(Clone)]
enum Client {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

impl Client {
    fn open(&self, limit: Duration) -> redis::RedisResult<Inner> {
        match self {
            Client::Single(c) => c.get_connection_with_timeout(limit).map(Inner::Single),
            Client::Cluster(c) => c.get_connection().map(|c| Inner::Cluster(Box::new(c))),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the URL itself: it may carry a password.
        f.debug_struct("Target").field("addr", &self.addr).finish()
    }
}

impl Target {
    /// Parses `url` (any form the `redis` crate reads). The URL is kept only to hand to child
    /// processes through the environment; it is never displayed.
    pub fn open(url: &str, options: ConnectOptions) -> Result<Target> {
        let bad = |_: RedisError| Error::BadUrl {
            url: redact_url(url),
            reason: url_problem(url),
        };
        let tls = url.starts_with("rediss://");
        if tls {
            init_tls();
        } else if options.tls.any() {
            return Err(Error::Tls {
                reason: format!(
                    "--tls-ca/--tls-cert/--tls-key need a rediss:// URL, not '{}'",
                    redact_url(url)
                ),
            });
        }
        let client = if tls && options.tls.any() {
            redis::Client::build_with_tls(url, options.tls.load()?).map_err(bad)?
        } else {
            redis::Client::open(url).map_err(bad)?
        };
        let addr = client.get_connection_info().addr().to_string();
        Ok(Target {
            client: Client::Single(client),
            url: url.into(),
            addr: addr.into(),
            options,
        })
    }

    /// A Redis Cluster reached through the seed node `url`; commands follow MOVED and ASK
    /// redirections to the node that owns each key's slot.
    pub fn open_cluster(url: &str, options: ConnectOptions) -> Result<Target> {
        let bad = |_: RedisError| Error::BadUrl {
            url: redact_url(url),
            reason: url_problem(url),
        };
        if url.starts_with("rediss://") || options.tls.any() {
            return Err(Error::Tls {
                reason: "TLS to a Redis Cluster is not supported yet; use redis:// with --cluster"
                    .into(),
            });
        }
        let addr = redis::Client::open(url)
            .map_err(bad)?
            .get_connection_info()
            .addr()
            .to_string();
        // No retries inside the driver: it would send a packet again after a timeout or a
        // dropped connection, when the first copy may have been applied (a deduction made
        // twice). Redirections, which a server answers without applying anything, are followed
        // by `Conn` itself.
        let client = redis::cluster::ClusterClient::builder([url])
            .retries(0)
            .connection_timeout(options.connect_timeout)
            .response_timeout(options.call_timeout)
            .build()
            .map_err(bad)?;
        Ok(Target {
            client: Client::Cluster(client),
            url: url.into(),
            addr: addr.into(),
            options,
        })
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
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
    fn connect_error(&self, e: RedisError, after: Duration) -> Error {
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
                reason: "the server has reached its maxclients: it refuses new connections \
                         (lower -c, or raise maxclients)"
                    .into(),
                code: Some("MAXCLIENTS".into()),
                indeterminate: false,
            }
        } else if e.is_connection_refusal() {
            Error::Connect {
                addr,
                reason: "connection refused".into(),
            }
        } else if is_tls_error(&e) {
            Error::Tls {
                reason: format!(
                    "could not connect to '{addr}': {} (check --tls-ca, --tls-cert, --tls-key)",
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
            Client::Cluster(c) => Some(c.clone()),
            Client::Single(_) => None,
        };
        let mut conn = Conn {
            inner,
            cluster,
            addr: self.addr.clone(),
            url: self.url.clone(),
            call_timeout: self.options.call_timeout,
        };
        conn.set_call_timeout(self.options.call_timeout)?;
        Ok(conn)
    }
}

/// One connection. Not shared between threads: each worker opens its own.
pub struct Conn {
    inner: Inner,
    /// The cluster's client, to reconnect with a fresh slot map after a redirection.
    cluster: Option<redis::cluster::ClusterClient>,
    addr: Arc<str>,
    url: Arc<str>,
    call_timeout: Duration,
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
    pub fn addr(&self) -> &str {
        &self.addr
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

    /// Runs a script by EVALSHA, loading it first if the server does not know it.
    pub fn script<T: FromRedisValue>(&mut self, inv: &redis::ScriptInvocation<'_>) -> Result<T> {
        self.following_redirects(|c| {
            let r = inv.invoke(c.inner.like());
            r.map_err(|e| c.map_err(e))
        })
    }

    /// An error for a reply that makes no sense here.
    pub fn unexpected(&self, reason: String) -> Error {
        Error::Redis {
            addr: self.addr.to_string(),
            reason,
            code: None,
            indeterminate: false,
        }
    }

    /// Maps a driver error to the library's error, naming this connection's address.
    pub fn map_err(&self, e: RedisError) -> Error {
        let addr = self.addr.to_string();
        let interrupted = is_interrupted(&e);
        if interrupted {
            Error::Redis {
                addr,
                reason: "the call was interrupted (the process was stopped and continued)".into(),
                code: Some(crate::error::INTERRUPTED.into()),
                indeterminate: true,
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
            let mut reason = shorten(scrub(&e.to_string(), &self.url));
            match code.as_deref() {
                Some("MOVED" | "ASK") if self.cluster.is_none() => reason.push_str(
                    " (this server is a node of a Redis Cluster: add --cluster, and write the SKU with a hash tag, {sku})",
                ),
                Some("CLUSTERDOWN") => {
                    reason = "the cluster is down (CLUSTERDOWN): not every slot is served by a \
                              master, so the cluster refuses commands until it is repaired \
                              (see lockctl --cluster check)"
                        .into()
                }
                _ => {}
            }
            Error::Redis {
                addr,
                reason,
                code,
                indeterminate,
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

/// What is wrong with a URL the driver would not parse, and what form is expected.
fn url_problem(url: &str) -> String {
    const FORMS: &str = "expected redis://host:port[/db], rediss://host:port (TLS) or \
                         redis+unix:///path/to/socket";
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        None => format!("it has no scheme; {FORMS}"),
        Some("redis" | "rediss" | "redis+unix" | "unix") => {
            let port = url
                .rsplit_once(':')
                .map(|(_, p)| p.split('/').next().unwrap_or(""))
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty());
            match port.map(|p| p.parse::<u16>()) {
                Some(Err(_)) => format!("the port is not a number from 1 to 65535; {FORMS}"),
                _ => format!("it does not parse as a Redis URL; {FORMS}"),
            }
        }
        Some(other) => format!("{other}:// is not a Redis URL scheme; {FORMS}"),
    }
}

/// An I/O error of kind `Interrupted` (EINTR) somewhere in `e`'s chain; the driver does not
/// expose its I/O error, so its text is the fallback.
fn is_interrupted(e: &RedisError) -> bool {
    if e.kind() != ErrorKind::Io {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = s.source();
    }
    e.to_string().contains("(os error 4)")
}

fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

fn is_tls_error(e: &RedisError) -> bool {
    let text = e.to_string().to_lowercase();
    ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|w| text.contains(w))
}

fn auth_reason(e: &RedisError) -> String {
    match e.code() {
        Some("NOAUTH") => "this server requires a password".into(),
        _ => "wrong user name or password".into(),
    }
}

/// Keeps an error message to one readable line: a driver message can quote a whole reply.
fn shorten(text: String) -> String {
    const MAX: usize = 300;
    let text = text.replace(['\r', '\n'], " ");
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Removes `url`'s password from `text`, in case a driver message ever quotes the URL.
fn scrub(text: &str, url: &str) -> String {
    let text = text.replace(url, &redact_url(url));
    match password_of(url) {
        Some(p) if !p.is_empty() => text.replace(p, "***"),
        _ => text,
    }
}

fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.find('@')?];
    userinfo.split_once(':').map(|(_, p)| p)
}

/// `url` with any password replaced by `***`, for messages. A URL too malformed to have a
/// clear password (`redis//:pw@host`, `redis:/:pw@host`) loses everything before its last
/// `@` but the scheme: whatever looks like credentials is never shown.
pub fn redact_url(url: &str) -> String {
    let well_formed = url.find("://").is_some_and(|i| {
        let scheme = &url[..i];
        !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+')
    });
    let Some(at) = url.rfind('@') else {
        return url.to_string();
    };
    if !well_formed {
        // No telling what before the '@' is a password: none of it is shown.
        return format!("***{}", &url[at..]);
    }
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..at].split_once(':') {
        // user:password: the user stays, the password goes.
        Some((user, _)) => format!("{}{user}:***{}", &url[..start], &url[at..]),
        // A single word where the user goes may well be a password typed there.
        None => format!("{}***{}", &url[..start], &url[at..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_the_password_only() {
        assert_eq!(
            redact_url("redis://alice:s3cret@host:6380/2"),
            "redis://alice:***@host:6380/2"
        );
        assert_eq!(redact_url("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn malformed_urls_lose_whatever_looks_like_credentials() {
        for (bad, shown) in [
            ("redis//:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("redis:/:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("redis:S3cr3tPW@h", "***@h"),
            ("://u:S3cr3tPW@h", "***@h"),
            ("x y:S3cr3tPW@a@h", "***@h"),
            ("S3cr3tPW@127.0.0.1:6390", "***@127.0.0.1:6390"),
            (
                "redis://S3cr3tPW@127.0.0.1:99999",
                "redis://***@127.0.0.1:99999",
            ),
            ("redis://alice:S3cr3tPW@h/2", "redis://alice:***@h/2"),
        ] {
            assert_eq!(redact_url(bad), shown, "{bad}");
        }
        assert_eq!(redact_url("localhost:6379"), "localhost:6379");
    }

    #[test]
    fn scrub_removes_the_password_from_any_text() {
        let url = "redis://u:hunter2@h:1";
        assert_eq!(scrub("bad hunter2 here", url), "bad *** here");
    }

    #[test]
    fn a_malformed_url_is_an_error_that_hides_the_password() {
        let err = Target::open("redis://u:hunter2@host:notaport", ConnectOptions::default())
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("--redis"), "{err}");
    }
}
