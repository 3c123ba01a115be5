//! The command line of a `--mode procs` child: `lockctl buy --json ...` written from the very
//! option structs the parent hammer runs with (each destructured, so a field added to them and
//! not passed on does not compile), the URLs in the environment. The hammer's child-process
//! driver is given [`children`], so that the instrument knows nothing of lockctl's flags.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lockctl_core::conn::{ConnectOptions, TlsFiles};
use lockctl_core::lock::LockOptions;
use lockctl_core::stock::BuyOptions;
use lockctl_hammer::{ChildBuy, Children};

/// Children started as `exe buy --json ...`.
pub fn children(exe: PathBuf) -> Children {
    Children::new(move |child| command(&exe, child))
}

/// `[global flags] buy SKU [purchase flags]`, in the flags of lockctl's command line. URLs
/// are not among them: they travel in the environment (see [`command`]), so no
/// password shows in `ps`.
pub fn args(child: &ChildBuy<'_>) -> Vec<OsString> {
    let ConnectOptions {
        connect_timeout,
        call_timeout,
        tls: TlsFiles { ca, cert, key },
    } = child.target.options();
    let BuyOptions {
        strategy,
        qty,
        lock: LockOptions {
            ttl,
            wait,
            watchdog,
        },
        limit,
        queue,
        batch,
        require_replicas,
    } = child.buy;
    let ms = |d: &Duration| d.as_millis().to_string();
    let mut a: Vec<OsString> = vec!["--json".into()];
    push(&mut a, "--timeout-ms", ms(call_timeout));
    push(&mut a, "--connect-timeout-ms", ms(connect_timeout));
    for (name, path) in [("--tls-ca", ca), ("--tls-cert", cert), ("--tls-key", key)] {
        if let Some(p) = path {
            push(&mut a, name, p);
        }
    }
    if child.target.is_cluster() {
        a.push("--cluster".into());
    }
    a.extend(["buy".into(), child.sku.as_str().into()]);
    push(&mut a, "--strategy", strategy.name());
    push(&mut a, "--qty", qty.to_string());
    push(&mut a, "--ttl-ms", ms(ttl));
    push(&mut a, "--wait-ms", ms(wait));
    push(&mut a, "--work-ms", ms(&child.work));
    push(&mut a, "--order-id", child.order_id);
    push(&mut a, "--batch-ms", ms(&batch.window));
    push(&mut a, "--batch-max", batch.max.to_string());
    if *require_replicas > 0 {
        push(&mut a, "--require-replicas", require_replicas.to_string());
    }
    if let Some(l) = limit {
        push(&mut a, "--limit", l.to_string());
        if let Some(u) = child.user {
            push(&mut a, "--user", u);
        }
    }
    if *watchdog {
        a.push("--watchdog".into());
    }
    if *queue {
        a.push("--queue".into());
    }
    a
}

/// The child process: [`args`], the URLs in `REDIS_URL` and
/// `LOCKCTL_LOCK_NODES`, in its own process group (so a Ctrl-C at the terminal stops the
/// hammer from starting new buyers but lets the running ones finish and release their
/// locks), stdout and stderr piped.
pub fn command(exe: &Path, child: &ChildBuy<'_>) -> Command {
    let mut cmd = Command::new(exe);
    cmd.process_group(0)
        .args(args(child))
        .env("REDIS_URL", child.target.secret_url())
        .env_remove("LOCKCTL_LOCK_NODES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(nodes) = child.lock_nodes {
        cmd.env("LOCKCTL_LOCK_NODES", nodes);
    }
    cmd
}

fn push(args: &mut Vec<OsString>, flag: &str, value: impl Into<OsString>) {
    args.push(flag.into());
    args.push(value.into());
}
