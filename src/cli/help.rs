//! What `--help` ends with: examples for each command (as redis-cli and hyperfine do), and the
//! exit codes for the whole tool.

/// The version, with the git commit it was built from when built from a checkout.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("LOCKCTL_GIT_COMMIT"),
    ")"
);

pub const TOP: &str = "\
Exit codes:
  0    success: bought, check passed, hammer verified nothing was oversold
  1    error: Redis unreachable, wrong password, bad data in Redis, internal failure
  2    usage: bad arguments
  3    buy: sold out · hammer: an invariant was violated · check: not fit for locking
  4    buy, run: busy (the lock was not acquired within --wait-ms)
  5    buy: lease lost, nothing deducted · run: lease lost, the job was stopped
  128+n  ended by signal n after cleaning up (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)

Examples:
  lockctl seed sku_886 10
  lockctl buy sku_886
  lockctl hammer -n 100 -c 10 --stock 10
  lockctl --redis redis://:password@10.0.0.5:6379 status sku_886";

pub const CHECK: &str = "\
Examples:
  lockctl check
  lockctl --redis rediss://cache.internal:6380 --tls-ca ca.pem check
  lockctl --lock-node redis://a:6379 --lock-node redis://b:6379 --lock-node redis://c:6379 check";

pub const SEED: &str = "\
Examples:
  lockctl seed sku_886 10
  lockctl --cluster --redis redis://127.0.0.1:7000 seed '{sku_886}' 500
  lockctl seed -- -odd-sku 3        # a SKU that starts with '-'";

pub const BUY: &str = "\
Examples:
  lockctl buy sku_886                          # the tutorial: one try at the lock
  lockctl buy sku_886 --wait-ms 2000           # wait up to 2 s in line for the lock
  lockctl buy sku_886 --strategy fenced --order-id order-42
  lockctl --json buy sku_886 --user alice --limit 2";

pub const HAMMER: &str = "\
Examples:
  lockctl hammer -n 100 -c 10 --stock 10                       # the tutorial's ab test, judged
  lockctl hammer -n 40 -c 8 --stock 10 --ttl-ms 100 --work-ms 150   # the homework: oversells
  lockctl hammer -n 20000 -c 50 --stock 5000 --strategy lock,fenced,atomic,batch
  lockctl hammer --redis auto --export-html report.html        # on a private redis-server
  lockctl hammer -n 1000 -c 20 --stock 100 --history run.jsonl # every request, for lockctl judge";

pub const HUNT: &str = "\
Examples:
  lockctl hunt --url 'http://127.0.0.1:8080/run_demo.php?sku={sku}' --preset tutorial --budget 30s
  lockctl hunt --url 'http://127.0.0.1:8080/buy.php?sku={sku}&user={user}' --preset tutorial \\
      --users 4 --limit 1 --serve 'php -S 127.0.0.1:8080' --seed 7
  lockctl hunt --url 'http://127.0.0.1:8080/pg.php?sku={sku}' --preset tutorial \\
      --stock-sql postgres://postgres@127.0.0.1/shop \\
      --stock-query 'select qty from stock where sku = $1' \\
      --stock-seed 'insert into stock values ($1, $2) on conflict (sku) do update set qty = $2'
Exit: 0 nothing broke within the budget, 3 a violation (replay it with the printed --seed),
1 nothing could be judged, 2 bad arguments.";

pub const JUDGE: &str = "\
Examples:
  lockctl hammer -n 1000 -c 20 --stock 100 --history run.jsonl
  lockctl judge run.jsonl                 # the same verdict, offline; exit 0, 3 or 1
  lockctl --json judge run.jsonl | jq .violations";

pub const STATUS: &str = "\
Examples:
  lockctl status sku_886
  lockctl --json status sku_886 | jq .problems";

pub const UNLOCK: &str = "\
Examples:
  lockctl unlock sku_886                       # show the holder; change nothing
  lockctl unlock sku_886 --token 5f0c...e21a   # release only if that holder still has it
  lockctl unlock sku_886 --force               # remove it whoever holds it";

pub const RUN: &str = "\
Examples:
  lockctl run --name nightly-reconcile -- ./reconcile.sh
  lockctl run --name price-import --wait-ms 600000 -- python3 import.py
  lockctl run --name sku_886 --ttl-ms 10000 -- sh -c 'echo fence $LOCKCTL_FENCE'";

pub const EXPORTER: &str = "\
Examples:
  lockctl exporter --sku sku_886
  lockctl exporter --sku sku_886 --sku sku_887 --listen 0.0.0.0:9464";

pub const COMPLETIONS: &str = "\
Examples:
  lockctl completions bash > /etc/bash_completion.d/lockctl
  lockctl completions zsh > \"${fpath[1]}/_lockctl\"
  lockctl completions fish > ~/.config/fish/completions/lockctl.fish

The global options (--redis and the connection block, --json, ...): lockctl --help.";

pub const MAN: &str = "\
Examples:
  lockctl man | man -l -
  lockctl man hammer | man -l -
  sudo lockctl man --out-dir /usr/local/share/man/man1 && man lockctl-hammer

The global options (--redis and the connection block, --json, ...): lockctl --help.";

/// Help for the commands that never open Redis (man, completions, db): the global options
/// (the connection block among them) are left out; they are in `lockctl --help` and
/// lockctl(1). clap's templates cannot leave out a heading, so each command's own options are
/// written here (`tests/it/cli.rs` checks every one of them is).
pub const MAN_HELP: &str = "\
{about-with-newline}
{usage-heading} {usage}

Arguments:
{positionals}

Options:
      --out-dir <DIR>  Write every page (lockctl.1, lockctl-hammer.1, ...) into DIR instead
  -h, --help           Print help{after-help}
";

/// See [`MAN_HELP`].
pub const COMPLETIONS_HELP: &str = "\
{about-with-newline}
{usage-heading} {usage}

Arguments:
{positionals}

Options:
  -h, --help  Print help{after-help}
";

/// See [`MAN_HELP`].
pub const DB_HELP: &str = "\
{about-with-newline}
{usage-heading} {usage}

Commands:
{subcommands}

Options:
  -h, --help  Print help

The global options are in lockctl --help; db init takes --db URL (or DATABASE_URL).
";

/// See [`MAN_HELP`].
pub const DB_INIT_HELP: &str = "\
{about-with-newline}
{usage-heading} {usage}

Options:
      --db <URL>  PostgreSQL URL: postgres://user[:password]@host[:port]/database [env: DATABASE_URL]
  -h, --help      Print help{after-help}
";

/// The line every page but lockctl(1) ends with, instead of repeating the global options.
pub const GLOBAL_OPTIONS_ELSEWHERE: &str = "\
Global options (--redis and the rest of the connection block, --json, --quiet, --color): see \
lockctl --help, or lockctl(1).";

pub const WORKER: &str = "\
Examples:
  lockctl worker --db postgres://postgres@127.0.0.1/shop --sku sku_886
  DATABASE_URL=postgres://postgres@127.0.0.1/shop lockctl worker --sku a --sku b --batch 500
  lockctl worker --db postgres://postgres@127.0.0.1/shop --sku sku_886 --once   # drain and exit
  lockctl worker --sku sku_886 --requeue-dead   # after a fix: dead-lettered orders back on the queue";

pub const DB_INIT: &str = "\
Examples:
  lockctl db init --db postgres://postgres@127.0.0.1:5432/shop";
