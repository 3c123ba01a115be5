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

/// The `redis` crate builds its TLS configuration from rustls's process-wide crypto provider,
/// which is the program's to choose (ring, aws-lc-rs, a FIPS build): this library installs none
/// and refuses a `rediss://` URL, with [`Error::NoCryptoProvider`], until one is installed.
pub(super) fn require_crypto_provider() -> Result<()> {
    match rustls::crypto::CryptoProvider::get_default() {
        Some(_) => Ok(()),
        None => Err(Error::NoCryptoProvider),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ConnectOptions, Target};
    use crate::Error;

    // No test of this crate installs a provider: this process has none.
    #[test]
    fn a_rediss_url_without_a_crypto_provider_is_refused_saying_so() {
        let opened = Target::open("rediss://127.0.0.1:6380", ConnectOptions::default());
        assert!(matches!(opened, Err(Error::NoCryptoProvider)), "{opened:?}");
    }

    #[test]
    fn a_redis_url_needs_no_crypto_provider() {
        assert!(Target::open("redis://127.0.0.1:6380", ConnectOptions::default()).is_ok());
    }
}
