//! HTTPS for the HTTP client: one rustls client configuration per run (or per readiness
//! probe), shared by every connection, and what a failed handshake says.
//!
//! The server's certificate is checked as a browser would: against the system's trusted roots
//! (the same store `rediss://` uses), or against the one CA given instead, and for the URL's
//! host (sent as SNI). A certificate nobody vouches for, or one for another name, is refused,
//! and the refusal names the URL and what is wrong, with a [`Hint`] for the fix.
//!
//! The cryptography is ring's, passed to the configuration itself rather than installed
//! process-wide: a library has no business choosing for the whole process.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::request::RequestSpec;
use crate::report::Ended;
use lockctl_core::conn::TlsFiles;
use lockctl_core::error::{Error, ErrorKind, Result};
use lockctl_core::hint::Hint;

/// Where an endpoint is, and how to speak TLS to it when its URL is `https://`.
#[derive(Clone, Debug)]
pub(crate) struct Dial {
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<Tls>,
}

/// What every TLS connection to one endpoint shares.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) connector: TlsConnector,
    /// The name the certificate must carry, and the SNI sent: the URL's host.
    pub(crate) name: ServerName<'static>,
    /// The URL, any password hidden: for errors.
    url: String,
    /// The CA file trusted instead of the system's roots, if one was given.
    ca: Option<String>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("name", &self.name)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// The TLS side of `spec`'s endpoint: `None` for `http://`. The files are read and the
    /// roots loaded here, once; an error names the file and what is wrong with it.
    pub(crate) fn of(spec: &RequestSpec, files: &TlsFiles) -> Result<Option<Tls>> {
        if !spec.is_https() {
            return Ok(None);
        }
        let name = ServerName::try_from(spec.host().to_string()).map_err(|e| Error::Tls {
            reason: format!(
                "'{}' (from '{}') cannot be a TLS server name: {e}",
                spec.host(),
                spec.shown_url()
            ),
        })?;
        Ok(Some(Tls {
            connector: TlsConnector::from(Arc::new(config(files)?)),
            name,
            url: spec.shown_url().to_string(),
            ca: files.ca.as_ref().map(|p| p.display().to_string()),
        }))
    }

    /// A handshake with the endpoint at `addr` that failed: what went wrong, said as whose
    /// trouble it is, with the fix.
    pub(crate) fn refused(&self, addr: SocketAddr, e: &std::io::Error) -> Ended {
        let url = &self.url;
        let trusted = match &self.ca {
            Some(ca) => format!("the CA in '{ca}'"),
            None => "the system's trusted roots".to_string(),
        };
        let rustls_error = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
        let (message, hint) = match rustls_error {
            Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => (
                format!(
                    "refused the certificate of '{url}': it is not signed by {trusted} (unknown issuer)"
                ),
                Hint::EndpointCa,
            ),
            Some(rustls::Error::InvalidCertificate(
                c @ (CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }),
            )) => (
                format!("refused the certificate of '{url}': {c}"),
                Hint::EndpointName,
            ),
            Some(rustls::Error::InvalidCertificate(c)) => (
                format!("refused the certificate of '{url}': {c}"),
                Hint::EndpointTls,
            ),
            Some(other) => (
                format!(
                    "the TLS handshake with '{url}' failed: {other} (does {addr} speak https?)"
                ),
                Hint::EndpointTls,
            ),
            None => (
                format!(
                    "the TLS handshake with '{url}' failed: {e} (the endpoint at {addr} closed or reset it: does it speak https?)"
                ),
                Hint::EndpointTls,
            ),
        };
        Ended::Failed {
            kind: ErrorKind::Tls,
            indeterminate: false,
            message,
            hint: Some(hint),
        }
    }
}

/// The client configuration: ring's cryptography, the roots to trust (the system's, or the
/// CA file given instead), a client certificate when both its files are given, HTTP/1.1
/// offered by ALPN.
fn config(files: &TlsFiles) -> Result<ClientConfig> {
    let bad = |reason: String| Error::Tls { reason };
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            let certs = pem_certs(ca, "the CA certificate")?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bad(format!(
                    "the CA certificate '{}' holds no certificate rustls can use",
                    ca.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or(String::new(), |e| format!(": {e}"));
                return Err(bad(format!(
                    "this machine has no trusted root certificates to check an https endpoint with{why}; install them (apt-get install ca-certificates) or name the CA"
                )));
            }
        }
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("no TLS version to offer: {e}")))?
            .with_root_certificates(roots);
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = pem_certs(cert, "the client certificate")?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                bad(format!(
                    "cannot read the client key '{}': {e}",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                bad(format!(
                    "the client certificate and key do not go together: {e}"
                ))
            })?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(bad(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The certificates of a PEM file; an error names the file.
fn pem_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |e: &dyn fmt::Display| Error::Tls {
        reason: format!("cannot read {what} '{}': {e}", path.display()),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"it holds no PEM certificate"));
    }
    Ok(certs)
}
