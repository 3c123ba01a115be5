//! The command line's words for what would fix a failure.
//!
//! `lockctl-core` says what went wrong and names the fix as data ([`Hint`]); this is the one
//! place that turns a fix into this program's flags and commands, for errors on stderr and in
//! `--json`, for `check`'s and `status`'s findings, and for the hammer's first error.
//! `lockctl-hammer`'s errors say which part of a request is at fault and what would fit a run
//! too large; the flags that set them are named here.

use lockctl_core::{Error, Hint};
use lockctl_hammer::Error as HammerError;
use lockctl_hammer::http::{Part, RequestError};
use lockctl_render::Advice;

/// `lockctl seed SKU <COUNT>` as one can type it: a SKU that starts with `-` needs `--` before
/// it, or it would be read as a flag.
pub fn seed_command(sku: &str) -> String {
    if sku.starts_with('-') {
        format!("lockctl seed -- {sku} <COUNT>")
    } else {
        format!("lockctl seed {sku} <COUNT>")
    }
}

/// `lockctl unlock NAME --force` as one can type it.
fn unlock_command(name: &str) -> String {
    if name.starts_with('-') {
        format!("lockctl unlock --force -- {name}")
    } else {
        format!("lockctl unlock {name} --force")
    }
}

/// `word` as a shell reads it back: bare when it is plain, in single quotes otherwise.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What to do about `hint`, in this program's terms.
pub fn words(hint: &Hint) -> String {
    match hint {
        Hint::RedisUrl { flag } => format!("see {}", flag.unwrap_or("--redis")),
        Hint::StartRedis => "is redis-server running? start one with: redis-server --daemonize yes (apt-get install redis-server), or point --redis at one".into(),
        Hint::RedisAddress => "check the host and port in --redis".into(),
        Hint::UnknownHost => "no such host: check the host name in --redis".into(),
        Hint::RedisHandshake => "see --redis".into(),
        Hint::Credentials => "check the user and password in --redis".into(),
        Hint::ConnectTimeout => "see --connect-timeout-ms".into(),
        Hint::CallTimeout => "see --timeout-ms".into(),
        Hint::MaxClients => "lower -c, or raise maxclients".into(),
        Hint::TlsFiles => "check --tls-ca, --tls-cert, --tls-key and the rediss:// URL".into(),
        Hint::EndpointCa => "if a private CA signed it, give that CA's PEM file with --tls-ca FILE".into(),
        Hint::EndpointCert => "renew the certificate (or fix the clock of the machine that checks it); a self-signed certificate is trusted when its own PEM file is given with --tls-ca FILE".into(),
        Hint::EndpointName => "use the host name the certificate was issued for in the URL, or give the endpoint a certificate for this one".into(),
        Hint::EndpointTls => "check the https URL, and --tls-ca, --tls-cert, --tls-key".into(),
        Hint::EndpointUrl => "see --url".into(),
        Hint::StartEndpoint => "is the endpoint running? see --url".into(),
        Hint::RequestTimeout => "see --request-timeout-ms".into(),
        Hint::Seed { sku } => format!("seed it first: {}", seed_command(sku)),
        Hint::Reseed { sku } => format!("reset it with: {}", seed_command(sku)),
        Hint::DeleteKey { key } => format!(
            "lockctl writes only a stream there: look at what it holds, then remove it with: redis-cli DEL {key}"
        ),
        Hint::JsonContentType => "the login's body is JSON but goes with no Content-Type, so the service may read it as empty: add --header 'Content-Type: application/json' (the --header values without {token} go with the login too)".into(),
        Hint::StockKey => "pass --stock N to set it before the run, or name the key your endpoint deducts with --stock-key (and its Redis with --redis); hammer --url reads stock in Redis only: for stock kept in a database, use lockctl hunt --stock-sql URL --stock-query SQL".into(),
        Hint::ForceUnlock { name } => format!("repair it with: {}", unlock_command(name)),
        Hint::LockNodes => "lockctl check --lock-node ... shows which are down".into(),
        Hint::ClusterNode => "add --cluster, and write each SKU with a hash tag, {sku_886}, so its keys share a slot".into(),
        Hint::ClusterDown => "see lockctl --cluster check".into(),
        Hint::Replica => "point --redis at the master".into(),
        Hint::AsyncReplicas => "use the fenced or atomic strategy, or Redlock with --lock-node".into(),
        Hint::DbUrl => "see --db or DATABASE_URL".into(),
        Hint::StartDatabase => "is it running? see --db, --connect-timeout-ms".into(),
        Hint::CreateDatabase { name } => format!(
            "create it first: createdb {} (or CREATE DATABASE in psql), or name another in --db",
            name.as_deref().map_or("NAME".into(), shell_word)
        ),
        Hint::InitSchema { url: Some(url) } => {
            format!("create it with: lockctl db init --db {}", shell_word(url))
        }
        Hint::InitSchema { url: None } => {
            "create it with: lockctl db init, given the same --db URL (or DATABASE_URL)".into()
        }
        Hint::RequeueDead { sku } => format!(
            "fix what it refused, then put them back with: lockctl worker --requeue-dead --sku {sku}"
        ),
        // A fix a newer lockctl-core names that this binary has no words for yet.
        _ => String::new(),
    }
}

/// This program's words for a fix, for the renderers (`lockctl-render`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CliAdvice;

impl Advice for CliAdvice {
    fn words(&self, hint: &Hint) -> String {
        words(hint)
    }
}

/// A library error as the command line says it: the failure and its fix.
pub fn explain(e: &Error) -> String {
    CliAdvice.with_hint(&e.to_string(), e.hint().as_ref())
}

/// The flag a part of `hammer --url`'s request comes from.
fn request_flag(part: Part) -> &'static str {
    match part {
        Part::Method => "--method",
        Part::Url => "--url",
        Part::Header => "--header",
    }
}

/// A request that cannot be built, as the command line says it: the flag, the value as
/// given, what is wrong with it.
pub fn request(e: &RequestError) -> String {
    format!("{} '{}'{}", request_flag(e.part), e.given, e.problem)
}

/// An error of the hammer as the command line says it: the failure, and its fix in this
/// program's flags.
pub fn hammer(e: &HammerError) -> String {
    match e {
        HammerError::Core(core) => explain(core),
        HammerError::Request(r) => request(r),
        HammerError::TooManyClients { fits: 0, .. } => format!(
            "{e}: not even -c 1 fits; close some of its clients or raise the server's maxclients"
        ),
        HammerError::TooManyClients { fits, .. } => {
            format!("{e}: lower -c to at most {fits}, or raise the server's maxclients")
        }
        HammerError::TooFewDescriptors {
            fits: 0, needed, ..
        } => format!("{e}: raise the limit (ulimit -n {needed}) and try again"),
        HammerError::TooFewDescriptors { fits, needed, .. } => {
            format!("{e}: lower -c to at most {fits}, or raise the limit (ulimit -n {needed})")
        }
        _ => CliAdvice.with_hint(&e.to_string(), e.hint().as_ref()),
    }
}

/// A failed command's error as the command line says it: the context it was given, the
/// failure, and (for a library's error) its fix in this program's flags.
pub fn error_message(err: &anyhow::Error) -> String {
    let full = format!("{err:#}");
    if let Some(h) = err.downcast_ref::<HammerError>() {
        // The hammer's own words end the chain: the binary's take their place.
        let own = h.to_string();
        return match full.strip_suffix(&own) {
            Some(context) => format!("{context}{}", hammer(h)),
            None => hammer(h),
        };
    }
    match err.downcast_ref::<Error>() {
        Some(lib) => CliAdvice.with_hint(&full, lib.hint().as_ref()),
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockctl_core::Finding;
    use std::path::{Path, PathBuf};

    #[test]
    fn an_error_is_said_with_its_fix_in_this_programs_words() {
        let e = Error::Unseeded { sku: "-odd".into() };
        assert_eq!(
            explain(&e),
            "'-odd' has no stock in Redis (seed it first: lockctl seed -- -odd <COUNT>)"
        );
        let f = Finding::from("a lock is damaged").with_hint(Hint::ForceUnlock {
            name: "-odd".into(),
        });
        assert_eq!(
            CliAdvice.finding(&f),
            "a lock is damaged (repair it with: lockctl unlock --force -- -odd)"
        );
        assert_eq!(CliAdvice.with_hint("plain", None), "plain");
        // A login that failed with a JSON body sent untyped says what to add (issue 50).
        let login = HammerError::Login {
            user: "u1".into(),
            reason: "POST http://h/login answered HTTP 400: 'bad request'".into(),
            answered: true,
            untyped_json: true,
        };
        assert!(
            hammer(&login).contains("add --header 'Content-Type: application/json'"),
            "{}",
            hammer(&login)
        );
        // A shop whose stock is in a database has no stock key: hammer --url cannot judge
        // it, and the error says where to go (issue 50).
        let e = Error::NoStockKey {
            key: "item:stock:sku_886".into(),
            addr: "127.0.0.1:6379".into(),
        };
        assert!(
            explain(&e).ends_with(
                "for stock kept in a database, use lockctl hunt --stock-sql URL --stock-query SQL)"
            ),
            "{}",
            explain(&e)
        );
    }

    /// Files of the library crates that may name flags or commands, and why: a redactor's
    /// tests feed it command lines; a server's own command line for doc examples. Each must
    /// exist, so that an entry left behind by a move fails here rather than hiding a new file.
    const MAY_NAME_FLAGS: [&str; 3] = [
        "lockctl-core/src/redact/tests.rs",
        // redis-server's own command line (its --port, --save), not lockctl's flags.
        "lockctl-hammer/src/redis_server.rs",
        // The renderer writes lockctl's own reports (an HTML title "lockctl hammer", a
        // buy's "wait longer with --wait-ms"): its words are this program's, as the binary's
        // are. Its fixes for a library's failures come through `Advice`, worded here.
        "lockctl-render/src",
    ];

    /// Every source file under `dir`.
    fn sources(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                match path.is_dir() {
                    true => dirs.push(path),
                    false => files.push(path),
                }
            }
        }
        files
    }

    /// A line of code (not a comment) that names a long flag, `-c`, or a `lockctl` command.
    fn names_a_flag(line: &str) -> bool {
        let code = line.trim_start();
        if code.starts_with("//") {
            return false;
        }
        let long = code.match_indices("--").any(|(i, _)| {
            code[i + 2..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase())
        });
        let short = code.contains(" -c ") || code.contains(" -c\"") || code.contains("-c 1");
        let command = [
            "seed", "unlock", "worker", "db init", "check", "hammer", "hunt",
        ]
        .iter()
        .any(|c| code.contains(&format!("lockctl {c}")));
        long || short || command
    }

    #[test]
    fn a_hammer_error_is_said_with_the_flag_that_fixes_it() {
        let bad = lockctl_hammer::http::RequestSpec::new("GE T", "http://x/", &[], None);
        let e = bad.unwrap_err();
        assert_eq!(
            e.to_string(),
            "the method 'GE T' is not an HTTP method (GET, POST, PUT, ...)"
        );
        assert_eq!(
            request(&e),
            "--method 'GE T' is not an HTTP method (GET, POST, PUT, ...)"
        );
        // Wrapped in context, the context stays and the hammer's words are replaced.
        let wrapped = anyhow::Error::from(HammerError::from(e)).context("the run");
        assert_eq!(
            error_message(&wrapped),
            "the run: --method 'GE T' is not an HTTP method (GET, POST, PUT, ...)"
        );
        let too_many = |fits| HammerError::TooManyClients {
            addr: "h:1".into(),
            needed: 40,
            maxclients: 30,
            in_use: 1,
            fits,
        };
        assert!(
            hammer(&too_many(0)).ends_with(
                ": not even -c 1 fits; close some of its clients or raise the server's maxclients"
            ),
            "{}",
            hammer(&too_many(0))
        );
        assert!(
            hammer(&too_many(22))
                .ends_with(": lower -c to at most 22, or raise the server's maxclients")
        );
        assert!(!too_many(22).to_string().contains("-c"));
        let negative = HammerError::NegativeStock {
            sku: "-odd".into(),
            key: "item:stock:-odd".into(),
            value: -5,
        };
        assert!(
            hammer(&negative).ends_with("(reset it with: lockctl seed -- -odd <COUNT>)"),
            "{}",
            hammer(&negative)
        );
    }

    #[test]
    fn the_guard_sees_a_flag_a_command_and_not_a_comment() {
        assert!(names_a_flag(r#"format!("(see --timeout-ms)")"#));
        assert!(names_a_flag(r#""lower -c to at most {fits}""#));
        assert!(names_a_flag(r#""run: lockctl seed sku 10""#));
        assert!(!names_a_flag("// see --timeout-ms"));
        assert!(!names_a_flag(r#""a -- b, or --5""#));
    }

    /// The libraries' words name no program's flags or commands: a fix is a [`Hint`] or a
    /// variant's data, and this module words it. Every library crate under `crates/` (a
    /// testkit, whose servers take command lines, aside) is read line by line.
    #[test]
    fn no_library_crate_names_a_flag_or_a_command() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
        let allowed: Vec<PathBuf> = MAY_NAME_FLAGS.iter().map(|p| crates.join(p)).collect();
        for a in &allowed {
            assert!(a.exists(), "{} is allowed flags but is gone", a.display());
        }
        let mut found = Vec::new();
        let mut read = 0;
        for krate in std::fs::read_dir(&crates).unwrap() {
            let krate = krate.unwrap().path();
            let name = krate.file_name().unwrap().to_string_lossy().into_owned();
            if name.contains("testkit") || !krate.join("src").is_dir() {
                continue;
            }
            for path in sources(&krate.join("src")) {
                if allowed.iter().any(|a| path.starts_with(a)) {
                    continue;
                }
                read += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    if names_a_flag(line) {
                        found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            read > 20,
            "only {read} library files read: is crates/ where it was?"
        );
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
}
