//! What would fix a failure or a finding, as data.
//!
//! The library says what is wrong and which value is at fault; what a user should do about it
//! depends on the program they run (a flag, a command, a config key), so the library names the
//! fix and the program words it. The `lockctl` binary's words are in its `advice` module.

/// A fix the library knows for an [`crate::Error`] or a finding of `check` or `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hint {
    /// Correct the Redis URL (of the setting named, when the caller said which).
    RedisUrl {
        /// The setting the URL came from, when the caller said (its own words for it).
        flag: Option<&'static str>,
    },
    /// Nothing listens at the Redis address: start a server or point at one that runs.
    StartRedis,
    /// What answers is not Redis: check the host and port.
    RedisAddress,
    /// The Redis address names a host that does not resolve: check its spelling.
    UnknownHost,
    /// The server refused the handshake: check the URL's database and options.
    RedisHandshake,
    /// The server refused the credentials: check the user and password.
    Credentials,
    /// A connection took longer than its limit: raise it, or check the network.
    ConnectTimeout,
    /// A call took longer than its limit: raise it, or check the server.
    CallTimeout,
    /// The server accepts no more clients: use fewer connections, or raise its maxclients.
    MaxClients,
    /// TLS: check the certificate files and the `rediss://` URL.
    TlsFiles,
    /// An https endpoint's certificate is signed by a CA not trusted: name the CA that signed
    /// it.
    EndpointCa,
    /// An https endpoint's certificate is for another name: use the name it was issued for,
    /// or give the endpoint a certificate for this one.
    EndpointName,
    /// An https endpoint's certificate is refused for itself (expired, not yet valid, badly
    /// made): renew it (or fix a clock), or name the certificate to trust.
    EndpointCert,
    /// A TLS handshake with an https endpoint failed otherwise: check the certificate files
    /// and that the endpoint speaks https.
    EndpointTls,
    /// An endpoint's host name does not resolve: check the URL.
    EndpointUrl,
    /// Nothing answers at an endpoint's address: start it, or correct the URL.
    StartEndpoint,
    /// An endpoint took longer than the limit on one request: raise it, or look at the
    /// endpoint.
    RequestTimeout,
    /// The SKU has no stock yet: seed it.
    Seed {
        /// The SKU to seed.
        sku: String,
    },
    /// The SKU's stock or books hold garbage: a seed resets them.
    Reseed {
        /// The SKU whose stock or books a seed resets.
        sku: String,
    },
    /// A key lockctl writes only as a stream holds another type: look at it, then delete it.
    DeleteKey {
        /// The key to look at and delete.
        key: String,
    },
    /// An endpoint's stock key does not exist: set it before the run or name the right one.
    StockKey,
    /// A lock's keys are damaged: a forced unlock repairs them.
    ForceUnlock {
        /// The lock to unlock with force.
        name: String,
    },
    /// Too few Redlock nodes answered: check which are down.
    LockNodes,
    /// A node of a Redis Cluster was reached as a single server: connect in cluster mode and
    /// put a hash tag in the SKU.
    ClusterNode,
    /// The cluster does not serve every slot: check it.
    ClusterDown,
    /// A replica was reached where writes are needed: point at the master.
    Replica,
    /// A master with asynchronous replicas: a failover can lose a held lock; prefer a fenced
    /// or atomic strategy, or Redlock.
    AsyncReplicas,
    /// Correct the PostgreSQL URL.
    DbUrl,
    /// PostgreSQL could not be reached: start it or correct the URL.
    StartDatabase,
    /// The database named in the URL does not exist: create it.
    CreateDatabase {
        /// The database's name, as the URL gives it (when it names one).
        name: Option<String>,
    },
    /// The orders schema is missing or older than this build: create or upgrade it.
    InitSchema {
        /// The database URL, as given, when it holds no password (one that does is never
        /// repeated: the caller words the fix without it).
        url: Option<String>,
    },
    /// Orders are set aside in the SKU's dead letters: fix what the database refused, then
    /// put them back.
    RequeueDead {
        /// The SKU whose dead letters to requeue.
        sku: String,
    },
    /// An HTTP request's body is JSON and goes with no `Content-Type` header: name it.
    JsonContentType,
}

/// One thing `check` or `status` found: what it is, in words, and its fix as data.
///
/// It serializes and displays as its words alone; a program that words hints adds its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was found.
    pub text: String,
    /// What would fix it, when lockctl knows.
    pub hint: Option<Hint>,
}

impl Finding {
    /// The same finding with the fix named.
    pub fn with_hint(self, hint: Hint) -> Finding {
        Finding {
            hint: Some(hint),
            ..self
        }
    }
}

impl From<String> for Finding {
    fn from(text: String) -> Finding {
        Finding { text, hint: None }
    }
}

impl From<&str> for Finding {
    fn from(text: &str) -> Finding {
        text.to_string().into()
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}
