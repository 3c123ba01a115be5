//! One request on its own, outside any run: the GET that says whether a system is ready
//! (`hunt --ready`) and a user's login, on the same request writer, connections (TLS for
//! `https://`) and answer reader as the driver.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::error::Result;
use lockctl_core::conn::TlsFiles;
use lockctl_core::hint::Hint;

use super::request::{RequestSpec, Vars};
use super::socket::{Stream, secure};
use super::tls::Tls;
use super::wire::{self, ReadError};
use crate::report::Ended;

/// What one GET came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// An answer, with its status and the start of its body.
    Answer {
        /// The answer's status code.
        status: u16,
        /// The start of its body, for saying what a refusal said.
        body: String,
    },
    /// No answer: why (refused, timed out, cut).
    Nothing(String),
    /// No answer, and none will come by asking again: the endpoint's certificate was refused
    /// (not signed by the CA trusted, for another name, expired or not yet valid: every
    /// refusal of the certificate alike); what to do about it is the hint.
    Refused {
        /// What was refused, and why.
        message: String,
        /// What to do about it.
        hint: lockctl_core::hint::Hint,
    },
}

/// A URL to GET, checked: the error says what is wrong with it (naming `--url`: the caller
/// words it for its own flag).
#[derive(Clone, Debug)]
pub struct Probe {
    spec: RequestSpec,
    /// For `https://`: checked against the system's roots unless [`Probe::with_tls`] says.
    tls: Option<Tls>,
}

impl Probe {
    /// A GET of `url`, checked as `--url` is (an error names the URL and the fix).
    pub fn new(url: &str) -> Result<Probe> {
        let spec = RequestSpec::new("GET", url, &["Connection: close".to_string()], None)?;
        let tls = Tls::of(&spec, &TlsFiles::default())?;
        Ok(Probe { spec, tls })
    }

    /// The same probe, an `https://` one trusting the CA in `files` instead of the system's
    /// roots (and showing the client certificate in it, if any). An error names the file.
    pub fn with_tls(self, files: &TlsFiles) -> Result<Probe> {
        let tls = Tls::of(&self.spec, files)?;
        Ok(Probe { tls, ..self })
    }

    /// The URL, any password hidden.
    pub fn shown_url(&self) -> &str {
        self.spec.shown_url()
    }

    /// One GET, answered within `limit` (connecting included).
    pub fn get(&self, limit: Duration) -> Got {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
        {
            Ok(r) => r,
            Err(e) => return Got::Nothing(format!("no runtime for the request: {e}")),
        };
        let ms = limit.as_millis();
        let vars = Vars {
            sku: "",
            user: "",
            order: "",
            n: 0,
            token: "",
        };
        runtime.block_on(async {
            let got = once(&self.spec, self.tls.as_ref(), &vars, 200, limit);
            match tokio::time::timeout(limit, got).await {
                Ok(got) => got,
                Err(_) => Got::Nothing(format!("no answer within {ms} ms")),
            }
        })
    }
}

/// One request of `spec` with `vars` on a connection of its own (TLS through `tls` for an
/// `https://` one, its handshake within `limit`), its answer's body kept up to `keep` bytes
/// (unbounded in time otherwise: the caller bounds it).
pub(super) async fn once(
    spec: &RequestSpec,
    tls: Option<&Tls>,
    vars: &Vars<'_>,
    keep: usize,
    limit: Duration,
) -> Got {
    let addr = match spec.resolve() {
        Ok(a) => a,
        Err(e) => return Got::Nothing(e.to_string()),
    };
    let mut request = Vec::new();
    if let Err(e) = spec.write(vars, &mut request) {
        return Got::Nothing(e.to_string());
    }
    let stream = match tokio::net::TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => return Got::Nothing(format!("could not connect to {addr}: {e}")),
    };
    let mut stream = match tls {
        None => Stream::Plain(stream),
        Some(tls) => match secure(tls, addr, stream, limit).await {
            Ok(s) => s,
            Err(Ended::Failed {
                message,
                hint: Some(hint @ (Hint::EndpointCa | Hint::EndpointName | Hint::EndpointCert)),
                ..
            }) => return Got::Refused { message, hint },
            Err(Ended::Failed { message, .. }) => return Got::Nothing(message),
            Err(_) => return Got::Nothing(format!("no TLS with {addr}")),
        },
    };
    let sent = async {
        stream.write_all(&request).await?;
        stream.flush().await
    };
    if let Err(e) = sent.await {
        return Got::Nothing(format!("could not send the request: {e}"));
    }
    let (mut buf, mut status, mut body) = (Vec::new(), None, Vec::new());
    let mut sink = |data: &[u8]| {
        if body.len() < keep {
            body.extend_from_slice(&data[..data.len().min(keep - body.len())]);
        }
    };
    match wire::read_answer(
        &mut stream,
        &mut buf,
        spec.is_head(),
        &mut status,
        &mut sink,
    )
    .await
    {
        Ok(answer) => Got::Answer {
            status: answer.status,
            body: String::from_utf8_lossy(&body).trim().to_string(),
        },
        Err(ReadError::Silent) => Got::Nothing("closed without answering".into()),
        Err(ReadError::Cut(why)) => Got::Nothing(why.to_string()),
        Err(ReadError::Malformed(why)) => Got::Nothing(why.to_string()),
    }
}
