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

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
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
            // Expired, not yet valid, badly made: refused as surely as an unknown issuer, and
            // said as such (a probe that waits for a server to start gives up on it at once).
            Some(rustls::Error::InvalidCertificate(c)) => (
                format!("refused the certificate of '{url}': {c} (checked against {trusted})"),
                Hint::EndpointCert,
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
    let mut pinned: Vec<CertificateDer<'static>> = Vec::new();
    match &files.ca {
        Some(ca) => {
            let certs = pem_certs(ca, "the CA certificate")?;
            pinned = certs.clone();
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
            .map_err(|e| bad(format!("no TLS version to offer: {e}")))?;
    let builder = match &files.ca {
        // The CA file may hold the server's own self-signed certificate (the usual `openssl req
        // -x509` one-liner makes one marked as a CA): trusted as it is, as `curl --cacert` does.
        Some(_) => {
            let webpki = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots.clone()),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .map_err(|e| {
                bad(format!(
                    "cannot check certificates against the CA file: {e}"
                ))
            })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned {
                    webpki,
                    pinned: pinned.clone(),
                }))
        }
        None => builder.with_root_certificates(roots),
    };
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

/// The server certificate check when a CA file is given: webpki's, against the file's
/// certificates as roots; and, where webpki refuses the server's certificate only because it
/// is marked as a CA (`CaUsedAsEndEntity`: a self-signed certificate made by `openssl req
/// -x509`), that certificate is accepted when it is byte for byte one the file holds and it is
/// for the URL's host. Its dates were checked already: webpki reads them before its CA mark.
#[derive(Debug)]
struct Pinned {
    webpki: Arc<WebPkiServerVerifier>,
    /// The certificates of the CA file, as given.
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let checked = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match checked {
            // rustls passes webpki's CaUsedAsEndEntity on as an "other" error, known by name.
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(why)))
                if why.to_string().contains("CaUsedAsEndEntity")
                    && self
                        .pinned
                        .iter()
                        .any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                named_for(end_entity, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether a self-signed certificate the user trusts is for `name`: its subject alternative
/// names when it has any (webpki's check); else its subject's common name, as OpenSSL (and so
/// curl) falls back to, since the `openssl req -x509 -subj /CN=localhost` one-liner writes
/// only that.
fn named_for(
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
) -> std::result::Result<(), rustls::Error> {
    let der = cert.as_ref();
    if find(der, &SAN_OID).is_some() {
        let parsed = ParsedCertificate::try_from(cert)?;
        return verify_server_name(&parsed, name);
    }
    let wanted = match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    };
    // A self-signed certificate's issuer is its subject: the first common name is its own.
    let cn = find(der, &CN_OID).and_then(|at| der_string(&der[at + CN_OID.len()..]));
    match cn {
        Some(cn) if cn.eq_ignore_ascii_case(&wanted) => Ok(()),
        _ => Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        )),
    }
}

/// The DER of the OID 2.5.4.3 (commonName).
const CN_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
/// The DER of the OID 2.5.29.17 (subjectAltName).
const SAN_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x11];

/// Where `needle` first is in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The text of a short DER string (UTF8String, PrintableString, IA5String) at the start of
/// `der`.
fn der_string(der: &[u8]) -> Option<String> {
    let (&tag, rest) = der.split_first()?;
    let (&len, rest) = rest.split_first()?;
    if !matches!(tag, 0x0c | 0x13 | 0x16) || len >= 0x80 {
        return None;
    }
    let text = rest.get(..len as usize)?;
    std::str::from_utf8(text).ok().map(str::to_string)
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
