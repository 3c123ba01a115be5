//! The command line's words for what would fix a failure.
//!
//! `lockctl-core` says what went wrong and names the fix as data ([`Hint`]); this is the one
//! place that turns a fix into this program's flags and commands, for errors on stderr and in
//! `--json`, for `check`'s and `status`'s findings, and for the hammer's first error.
//! `lockctl-hammer`'s errors say which part of a request is at fault and what would fit a run
//! too large; the flags that set them are named here.

use lockctl_core::{Error, Finding, Hint};
use lockctl_hammer::Error as HammerError;
use lockctl_hammer::http::{Part, RequestError};

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
        Hint::StockKey => "pass --stock N to set it before the run, or name the key your endpoint deducts with --stock-key (and its Redis with --redis)".into(),
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

/// `text`, followed by what to do about `hint` when there is one.
pub fn with_hint(text: &str, hint: Option<&Hint>) -> String {
    match hint.map(words) {
        Some(w) if !w.is_empty() => format!("{text} ({w})"),
        _ => text.to_string(),
    }
}

/// A library error as the command line says it: the failure and its fix.
pub fn explain(e: &Error) -> String {
    with_hint(&e.to_string(), e.hint().as_ref())
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
        _ => with_hint(&e.to_string(), e.hint().as_ref()),
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
        Some(lib) => with_hint(&full, lib.hint().as_ref()),
        None => full,
    }
}

/// A finding of `check` or `status` as the command line says it.
pub fn finding(f: &Finding) -> String {
    with_hint(&f.text, f.hint.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            finding(&f),
            "a lock is damaged (repair it with: lockctl unlock --force -- -odd)"
        );
        assert_eq!(with_hint("plain", None), "plain");
    }
}
