//! The hunt library's errors in this program's words: the library says what failed and with
//! which value; this names the flag that fixes it (`--serve`, `--proxy`, `--nemesis`).

use lockctl_hunt::error::{FaultCheckError, HuntError, ProxyError, ServeError};

/// A hunt that ended without a report. The library's own errors (Redis, the system's answers,
/// a login) pass through as they are, so that their hints, `--json` kinds and exit codes
/// stay; a system that could not be restarted is named by its flag.
pub fn hunt(e: HuntError) -> anyhow::Error {
    match e {
        HuntError::Run(e) => e.into(),
        HuntError::Restart(e) => anyhow::anyhow!(
            "the hunt cannot go on: could not restart --serve after a kill: {}",
            serve(&e)
        ),
    }
}

/// A system under test that could not be started or never became ready.
pub fn serve(e: &ServeError) -> String {
    match e {
        ServeError::Spawn { command, source } => {
            format!("could not start --serve '{command}': {source}")
        }
        ServeError::Interrupted { command } => {
            format!("interrupted while --serve '{command}' was starting")
        }
        // The library's words open with the command, quoted.
        ServeError::Exited { .. } | ServeError::NeverAnswered { .. } => format!("--serve {e}"),
        ServeError::NotReady {
            command,
            within_s,
            ready,
            last,
            tail,
        } => format!(
            "--serve '{command}' was not ready within {within_s} s: --ready '{ready}' was never answered 2xx (the last: {last}); its output ends:\n{tail}"
        ),
        ServeError::ReadyRefused {
            ready,
            message,
            hint,
        } => format!(
            "--ready '{ready}': {message} ({}); --serve was stopped",
            lockctl::advice::words(hint)
        ),
        ServeError::TempDir(_) | ServeError::Log(_) => e.to_string(),
    }
}

/// A proxy that could not start.
pub fn proxy(e: &ProxyError) -> String {
    match e {
        ProxyError::Listen { .. } => format!("--proxy {e}"),
        ProxyError::Socket(_) | ProxyError::Thread(_) => e.to_string(),
    }
}

/// A fault the hunt's Redis does not allow: the fix is to leave it out of `--nemesis`.
pub fn fault_check(e: &FaultCheckError) -> String {
    match e {
        FaultCheckError::Connect { .. } => e.to_string(),
        FaultCheckError::Unsupported { .. } => format!("{e}; or drop it from --nemesis"),
        FaultCheckError::Refused { .. } => format!("{e}: drop it from --nemesis"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// The words are today's: the flag where the library names only the value.
    #[test]
    fn each_error_names_the_flag_that_fixes_it() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let e = ServeError::NeverAnswered {
            command: "php -S x".into(),
            addr,
            within_s: 15,
            tail: "t".into(),
        };
        assert_eq!(
            serve(&e),
            "--serve 'php -S x' never answered at 127.0.0.1:9 within 15 s; its output ends:\nt"
        );
        let e = ServeError::NotReady {
            command: "c".into(),
            within_s: 15,
            ready: "http://h/ready".into(),
            last: "no answer".into(),
            tail: String::new(),
        };
        assert!(serve(&e).contains("--ready 'http://h/ready' was never answered 2xx"));
        let e = HuntError::Restart(ServeError::Interrupted {
            command: "c".into(),
        });
        assert_eq!(
            hunt(e).to_string(),
            "the hunt cannot go on: could not restart --serve after a kill: interrupted while --serve 'c' was starting"
        );
        let e = ProxyError::Listen {
            listen: "a:1".into(),
            source: std::io::Error::other("in use"),
        };
        assert_eq!(proxy(&e), "--proxy cannot listen on 'a:1': in use");
    }
}
