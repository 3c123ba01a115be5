//! The hunt's facts, checked before any request is sent: the system's answers, its stock and
//! orders in SQL (tried on a probe SKU), the faults the facts allow, the proxy's and the
//! system's addresses; and, at the end, what the hunt created in the system's stores removed.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use super::words;
use crate::cli::HuntArgs;
use crate::cmd::{Ctx, UsageError};
use lockctl_core::sku::Sku;
use lockctl_hammer::http::HttpOptions;
use lockctl_hammer::http::Store;
use lockctl_hammer::http::ids::{IdFormat, Ids};
use lockctl_hunt::clean::{self, Cleaned};
use lockctl_hunt::error::SqlError;
use lockctl_hunt::nemesis::FaultKind;
use lockctl_hunt::proxy::Proxy;
use lockctl_hunt::sql::SkuParam;
use lockctl_hunt::sql::SqlDb;
use lockctl_hunt::{OrdersSql, SqlStock};

/// A per-user limit needs the users it applies to (`--users`, or those of `--users-file`),
/// and a request's units must be within it. A `--stock` above what the users may buy is
/// allowed (refusals past the limit are what some hunts are after): the units no given user
/// may buy are never counted as a stall (the liveness probe stops when every user is
/// refused), and drawn stocks stay within it.
fn users_may_buy(args: &HuntArgs, users: Option<u64>) -> anyhow::Result<()> {
    let Some(limit) = args.limit else {
        return Ok(());
    };
    if users.is_none() {
        return Err(UsageError(format!(
            "--limit {limit} needs the users it applies to: give --users K or --users-file FILE"
        ))
        .into());
    }
    if limit < args.qty {
        return Err(UsageError(format!(
            "--limit {limit} is less than --qty {}: no user may buy one request's units (give a --limit of at least --qty)",
            args.qty
        ))
        .into());
    }
    Ok(())
}

/// Where the stock rows the hunt creates are, and how to delete one.
pub(super) struct StockRows {
    pub(super) db: Arc<SqlDb>,
    /// The delete (`--stock-clean`, or derived from `--stock-query`); `None`: none is known.
    clean: Option<String>,
    /// The facts check's probe SKU, when its row is still there.
    probe: Option<String>,
}

/// The system's answers, stock and orders, each checked before any request is sent; and where
/// the stock rows the hunt creates are.
pub(super) fn system_facts(
    ctx: &Ctx,
    args: &HuntArgs,
    probe: &str,
) -> anyhow::Result<(HttpOptions, Option<OrdersSql>, Option<StockRows>)> {
    let mut http = crate::cmd::hammer_http::http_options(ctx, &args.http_args(), args.qty)?;
    if !http.classifier.judges() {
        return Err(UsageError(
            "a hunt judges the system's answers: say what they mean with --bought-if, --sold-out-if, --busy-if, --refused-if, --failed-if or --preset tutorial".into(),
        )
        .into());
    }
    if !http.request.uses_sku() {
        eprintln!(
            "lockctl: warning: neither --url, --header nor --body carries {{sku}}: each round has a SKU of its own, and a service that is never told it deducts some other stock than the one the hunt seeds and reads; put {{sku}} where the service reads its SKU"
        );
    }
    http.stock_key = args.stock_key.clone();
    if http.users.listed_len().is_none() {
        http.users = Ids::new(args.user_format.into(), "u");
    }
    let users = crate::cmd::hammer_http::users_in_file(&http, args.users)?;
    users_may_buy(args, users)?;
    if let Some(pattern) = &args.order_from {
        http.classifier = http
            .classifier
            .with_order_from(pattern)
            .map_err(|e| UsageError(crate::cmd::hammer_http::bad_pattern(&e)))?;
    }
    let mut rows = None;
    if let Some(url) = &args.stock_sql {
        let (store, stock) = stock_store(ctx, args, url, probe)?;
        http.store = Some(store);
        rows = Some(stock);
    }
    let orders = match (&args.orders_sql, &args.orders_query) {
        (Some(url), Some(query)) => Some(orders_sql(ctx, url, query, probe, args)?),
        _ => None,
    };
    Ok((http, orders, rows))
}

/// The facts check's probe: a SKU in the rounds' format that no round uses, nor any row or key
/// that was there before: a random tag of its own, as the rounds' SKUs have (a fixed
/// `<sku>-probe` seeded over a row of that name and deleted it at the end).
pub(super) fn probe_sku(args: &HuntArgs) -> String {
    match args.sku_format.into() {
        IdFormat::Text => format!(
            "{}-probe-{}",
            args.sku,
            hex::encode(rand::random::<[u8; 3]>())
        ),
        format => Ids::new(format, "").name(0),
    }
}

/// The faults `--nemesis` names, checked against the facts. A fault on the Redis server
/// itself (`client-kill`, `redis-pause`) needs that Redis named (`redis_named`: `--redis` or
/// `REDIS_URL`): `auto` leaves them out otherwise, and naming one is a usage error, so that
/// nothing faults whatever happens to answer at the default address.
pub(super) fn faults(args: &HuntArgs, redis_named: bool) -> anyhow::Result<Vec<FaultKind>> {
    let mut list = named_faults(args)?;
    if !redis_named {
        if let Some(k) = list.iter().find(|k| k.faults_redis())
            && args.nemesis != "auto"
        {
            return Err(UsageError(format!(
                "--nemesis {} acts on a Redis server (every client of it), and no Redis was named: lockctl never faults a Redis by default; name the system's with --redis URL (or REDIS_URL)",
                k.name()
            ))
            .into());
        }
        list.retain(|k| !k.faults_redis());
    }
    Ok(list)
}

pub(super) fn named_faults(args: &HuntArgs) -> anyhow::Result<Vec<FaultKind>> {
    let serve = args.serve.is_some();
    let own = !args.strategy.is_empty();
    let sql = args.stock_sql.is_some() || args.orders_sql.is_some();
    let list = match args.nemesis.as_str() {
        "none" => return Ok(Vec::new()),
        "auto" if own => vec![
            FaultKind::RedisPause,
            FaultKind::ClientKill,
            FaultKind::PauseHolder,
        ],
        // Every fault the facts allow: the Redis faults whenever a Redis is named (`faults`
        // leaves them out otherwise), SQL stock or not; the database faults with SQL facts.
        "auto" => FaultKind::ALL
            .into_iter()
            .filter(|k| (serve || !k.needs_serve()) && !k.own_only())
            .filter(|k| args.proxy.is_some() || !k.needs_proxy())
            .filter(|k| *k != FaultKind::DbLock || args.stock_sql.is_some())
            .filter(|k| *k != FaultKind::DbKill || sql)
            .collect(),
        list => {
            let mut kinds = Vec::new();
            for name in list.split(',').map(str::trim) {
                let kind = FaultKind::from_name(name).ok_or_else(|| {
                    UsageError(format!(
                        "--nemesis: '{name}' is not a fault; give client-kill, redis-pause, stall, pause-worker, kill-worker, db-lock, db-kill, pause-holder (comma-separated), auto or none"
                    ))
                })?;
                if kind.own_only() && !own {
                    return Err(UsageError(format!(
                        "--nemesis {name} stalls lockctl's own buyers: it is for hunt --strategy; against an endpoint, pause-worker stalls the system's processes"
                    ))
                    .into());
                }
                if kind.needs_serve() && own {
                    return Err(UsageError(format!(
                        "--nemesis {name} signals a system's processes, and hunt --strategy runs lockctl's own buyers: use pause-holder for them"
                    ))
                    .into());
                }
                if kind.needs_sql() && own {
                    return Err(UsageError(format!(
                        "--nemesis {name} acts on a system's SQL database, and hunt --strategy runs lockctl's own buyers on Redis: drop {name}"
                    ))
                    .into());
                }
                if kind == FaultKind::DbLock && args.stock_sql.is_none() {
                    return Err(UsageError(format!(
                        "--nemesis {name} holds the round's stock row, and no --stock-sql says where the stock is: add --stock-sql URL and --stock-query, or drop {name}"
                    ))
                    .into());
                }
                if kind == FaultKind::DbKill && !sql {
                    return Err(UsageError(format!(
                        "--nemesis {name} ends the system's database sessions, and no --stock-sql or --orders-sql names the database: add one, or drop {name}"
                    ))
                    .into());
                }
                if kind.needs_proxy() && args.proxy.is_none() {
                    return Err(UsageError(format!(
                        "--nemesis {name} stalls the system's connections to Redis in lockctl's proxy, and there is none: add --proxy LISTEN and point the system's Redis at it, or drop {name}"
                    ))
                    .into());
                }
                if kind.needs_serve() && !serve {
                    return Err(UsageError(format!(
                        "--nemesis {name} signals the system's processes, and no --serve says which they are: add --serve 'CMD' (the command that starts the system), or drop {name}"
                    ))
                    .into());
                }
                kinds.push(kind);
            }
            kinds
        }
    };
    Ok(list)
}

/// The SQL stock, checked before any request: the seed and the query must work on a probe SKU
/// and read back what was set; then the probe's row is deleted (unless --keep), which checks the
/// delete the hunt ends with.
pub(super) fn stock_store(
    ctx: &Ctx,
    args: &HuntArgs,
    url: &str,
    probe: &str,
) -> anyhow::Result<(Store, StockRows)> {
    let db = SqlDb::connect(url, ctx.options.connect_timeout)
        .map_err(|e| UsageError(format!("--stock-sql: {e}")))?;
    let (query, seed) = (
        args.stock_query.clone().unwrap_or_default(),
        args.stock_seed.clone().unwrap_or_default(),
    );
    let param = SkuParam {
        text: probe,
        format: args.sku_format.into(),
    };
    db.execute(&seed, param, 7).map_err(|e| {
        UsageError(format!(
            "--stock-seed '{seed}' failed on a probe SKU '{probe}' with 7: {e}{}",
            sku_type_hint(&e, args)
        ))
    })?;
    // The probe's row is there from here on: a check that fails takes it away before it
    // answers, as a hunt that ends removes what it created, whatever it came to.
    let checked = db
        .check_columns(&query, 1, 0)
        .map_err(|e| format!("--stock-query '{query}': {e}"))
        .and_then(|()| match db.integer(&query, param) {
            Ok(7) => Ok(()),
            Ok(n) => Err(format!(
                "--stock-query '{query}' read {n} for the probe SKU '{probe}' that --stock-seed had just set to 7: the two do not name the same stock"
            )),
            Err(e) => Err(format!(
                "--stock-query '{query}': {e}{}",
                sku_type_hint(&e, args)
            )),
        });
    if let Err(why) = checked {
        let left = match args.keep {
            true => format!(" (the probe row of '{probe}' is kept: --keep)"),
            false => remove_probe(&db, args, param, probe, &query),
        };
        return Err(UsageError(format!("{why}{left}")).into());
    }
    let db = Arc::new(db);
    let mut rows = StockRows {
        db: db.clone(),
        clean: None,
        probe: Some(probe.to_string()),
    };
    clean_probe(&db, args, param, probe, &query, &mut rows)?;
    let store = Store(Arc::new(SqlStock {
        db,
        query,
        seed,
        format: args.sku_format.into(),
    }));
    Ok((store, rows))
}

/// The usual slip behind a refusal of the SKU parameter: a text SKU (the default
/// `--sku-format`) bound to an integer or uuid column. lockctl's own binding says so by its
/// kind; a database that took the text and then refused it says so in its words. Empty
/// otherwise.
fn sku_type_hint(error: &SqlError, args: &HuntArgs) -> &'static str {
    let refused = match error {
        SqlError::SkuNotNumber { .. } | SqlError::SkuNotUuid { .. } => true,
        SqlError::Database(words) => {
            let e = words.to_ascii_lowercase();
            [
                "invalid input syntax for type",
                "operator does not exist",
                "incorrect integer value",
                "truncated incorrect",
            ]
            .iter()
            .any(|w| e.contains(w))
        }
        _ => false,
    };
    match (refused, IdFormat::from(args.sku_format)) {
        (true, IdFormat::Text) => {
            " (the SKU is bound as text: for an integer or uuid column give --sku-format int or --sku-format uuid)"
        }
        _ => "",
    }
}

/// Takes the probe SKU's row away after a failed check, by `--stock-clean` or the delete
/// derived from `--stock-query`: nothing, or what is left and how to remove it.
fn remove_probe(db: &SqlDb, args: &HuntArgs, param: SkuParam, probe: &str, query: &str) -> String {
    let clean = args
        .stock_clean
        .clone()
        .or_else(|| clean::delete_for(query));
    match clean.map(|c| db.delete(&c, param)) {
        Some(Ok(n)) if n > 0 => String::new(),
        _ => format!(
            "; the probe row that --stock-seed wrote for '{probe}' could not be removed: delete it by hand (or give --stock-clean)"
        ),
    }
}

/// The delete the hunt ends with, tried on the probe SKU's row (unless --keep): given
/// (`--stock-clean`), it must delete that row; derived from `--stock-query`, it is used only
/// once it deleted that row, and only that.
fn clean_probe(
    db: &SqlDb,
    args: &HuntArgs,
    param: SkuParam,
    probe: &str,
    query: &str,
    rows: &mut StockRows,
) -> anyhow::Result<()> {
    match (&args.stock_clean, args.keep) {
        (Some(clean), true) => rows.clean = Some(clean.clone()),
        (Some(clean), false) => match db.delete(clean, param) {
            Ok(n) if n > 0 => {
                rows.clean = Some(clean.clone());
                rows.probe = None;
            }
            Ok(_) => {
                return Err(UsageError(format!(
                    "--stock-clean '{clean}' deleted no row of the probe SKU '{probe}' that --stock-seed had just set: it must delete the SKU's stock row, the SKU its one parameter"
                ))
                .into());
            }
            Err(e) => {
                return Err(UsageError(format!(
                    "--stock-clean '{clean}' failed on the probe SKU '{probe}': {e}"
                ))
                .into());
            }
        },
        // Derived, it is used only once it deleted the probe's row, and only that.
        (None, keep) => {
            if let Some(clean) = clean::delete_for(query) {
                match keep {
                    true => rows.clean = Some(clean),
                    false => {
                        if db.delete(&clean, param).is_ok_and(|n| n == 1) {
                            rows.clean = Some(clean);
                            rows.probe = None;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The orders database, its query tried on the probe SKU before any request.
pub(super) fn orders_sql(
    ctx: &Ctx,
    url: &str,
    query: &str,
    probe: &str,
    args: &HuntArgs,
) -> anyhow::Result<OrdersSql> {
    let db = SqlDb::connect(url, ctx.options.connect_timeout)
        .map_err(|e| UsageError(format!("--orders-sql: {e}")))?;
    let param = SkuParam {
        text: probe,
        format: args.sku_format.into(),
    };
    db.check_columns(query, 2, 1)
        .and_then(|()| db.orders(query, param).map(|_| ()))
        .map_err(|e| {
            let hint = sku_type_hint(&e, args);
            UsageError(format!("--orders-query '{query}': {e}{hint}"))
        })?;
    Ok(OrdersSql {
        db: Arc::new(db),
        query: query.to_string(),
    })
}

/// The address `--serve`'s system is awaited at: the `--url`'s host and port (443 for
/// https:// when it names none).
pub(super) fn address_of(
    request: &lockctl_hammer::http::RequestSpec,
) -> anyhow::Result<SocketAddr> {
    request.resolve().map_err(|e| {
        UsageError(format!(
            "--serve: {e}, so the system's readiness cannot be awaited"
        ))
        .into()
    })
}

/// The proxy on `listen`, forwarding to the Redis of --redis (a TCP address).
pub(super) fn start_proxy(ctx: &Ctx, listen: &str) -> anyhow::Result<Proxy> {
    let upstream: Vec<_> = ctx
        .target
        .addr()
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    if upstream.is_empty() {
        return Err(UsageError(format!(
            "--proxy forwards to --redis over TCP, and '{}' is not a TCP address",
            ctx.target.addr()
        ))
        .into());
    }
    Ok(Proxy::start(listen, upstream).map_err(|e| UsageError(words::proxy(&e)))?)
}

/// Removes what the hunt created: the keys on --redis that contain one of its rounds' SKUs,
/// and the stock rows of its SKUs in --stock-sql (when a delete is known); what is left is
/// said, with how to remove it.
pub(super) fn remove_created(
    target: &lockctl_core::conn::Target,
    args: &HuntArgs,
    stock: Option<&StockRows>,
    skus: &[Sku],
) -> Cleaned {
    let mut cleaned = Cleaned::default();
    match clean::remove_keys(target, skus, args.stock_key.as_deref()) {
        Ok(n) => cleaned.keys = n,
        // With the stock in SQL, --redis may be nobody's: nothing of the hunt's is there.
        Err(_) if stock.is_some() => {}
        Err(e) => cleaned.left.push(format!(
            "the keys of the hunt's SKUs on --redis could not be removed: {e}"
        )),
    }
    let Some(stock) = stock else {
        return cleaned;
    };
    let mut names: Vec<String> = stock.probe.iter().cloned().collect();
    names.extend(skus.iter().map(|s| s.to_string()));
    match &stock.clean {
        Some(statement) => clean::delete_rows(
            &stock.db,
            statement,
            &names,
            args.sku_format.into(),
            &mut cleaned,
        ),
        None if names.is_empty() => {}
        None => cleaned.left.push(format!(
            "the stock rows of the hunt's SKUs ({}) are left in --stock-sql: --stock-query is not of the form SELECT ... FROM table WHERE column = $1, so which rows are the hunt's cannot be told; give --stock-clean 'DELETE FROM ... WHERE ... = $1' to have them removed",
            clean::skus_in_words(&names)
        )),
    }
    cleaned
}
