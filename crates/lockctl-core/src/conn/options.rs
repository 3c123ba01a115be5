//! What every connection gets: its limits and, for `rediss://`, the certificate files.

use std::path::PathBuf;
use std::time::Duration;

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
    pub(super) fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// Reads the files, naming which file and the path of any that cannot be read.
    pub(super) fn load(&self) -> Result<redis::TlsCertificates> {
        let read = |what: &str, p: &PathBuf| {
            std::fs::read(p).map_err(|e| Error::Tls {
                reason: format!("cannot read {what} '{}': {e}", p.display()),
            })
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("the client certificate", c)?,
                client_key: read("the client key", k)?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::Tls {
                    reason: "a client certificate needs its key, and a key its certificate".into(),
                });
            }
        };
        let root_cert = self
            .ca
            .as_ref()
            .map(|p| read("the CA certificate", p))
            .transpose()?;
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// rustls needs one process-wide choice of cryptography; lockctl uses ring's.
pub(super) fn init_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
