//! Seeding a bucketed SKU: where each bucket goes (one per master), the map's publication,
//! and the end of a replaced sale's buckets.

use super::{Buckets, MAX_BUCKETS, Placement, damaged};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::{StockKeys, key_slot};
use crate::sku::Sku;
use crate::stock::{MAX_STOCK, seed};

/// A master's `host:port` and the slot ranges it serves.
pub type Master = (String, Vec<(u16, u16)>);

/// The masters of the server `conn` talks to and the slots each serves: on a cluster, from
/// `CLUSTER SLOTS`; on one server, that server for every slot.
pub fn masters(conn: &mut Conn) -> Result<Vec<Master>> {
    if !conn.is_cluster() {
        return Ok(vec![(conn.addr().to_string(), vec![(0, 16383)])]);
    }
    let mut out: Vec<Master> = Vec::new();
    for r in conn.cluster_slots()? {
        let (host, port) = &r.nodes[0];
        let addr = format!("{host}:{port}");
        let range = (r.start, r.end);
        match out.iter_mut().find(|(m, _)| *m == addr) {
            Some((_, ranges)) => ranges.push(range),
            None => out.push((addr, vec![range])),
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(conn.unexpected("CLUSTER SLOTS named no master".into()));
    }
    Ok(out)
}

/// The master of `masters` serving `slot`.
pub fn master_of(masters: &[Master], slot: u16) -> Option<String> {
    masters
        .iter()
        .find(|(_, r)| r.iter().any(|&(a, b)| a <= slot && slot <= b))
        .map(|(m, _)| m.clone())
}

/// Splits `count` over `k` buckets of `sku`, bucket `i` on master `i mod M` (see the module
/// documentation), and starts a new sale in each. Returns where each bucket went. A bucket
/// of the SKU's earlier map that the new one does not reuse is emptied (its stock deleted),
/// so no units are left where nobody looks.
///
/// Atomic with respect to every other seed of the SKU, although the buckets live on several
/// masters and no one script can write them all: the seed takes the next seed generation
/// first, writes its buckets where nobody looks yet (their tags are new), then publishes its
/// map, its count and its move counter in one script on the SKU's own slot, only if no seed
/// of a later generation published first. A seed that finds one did ends its own buckets and
/// fails with [`Error::Outrun`]; two seeds one after the other in that script's order are
/// two seeds, the later one's sale replacing the earlier's.
pub fn seed_buckets(conn: &mut Conn, sku: &Sku, count: u64, k: usize) -> Result<Vec<Placement>> {
    if k == 0 || k > MAX_BUCKETS {
        return Err(Error::internal(format!(
            "{k} buckets: a SKU has 1 to {MAX_BUCKETS} buckets"
        )));
    }
    if count > MAX_STOCK {
        return Err(Error::internal(format!("a stock of at most {MAX_STOCK}")));
    }
    let placed = place(conn, sku, count, k)?;
    let generation = take_generation(conn, sku)?;
    let nonce = hex::encode(rand::random::<[u8; 8]>());
    for (tag, p) in &placed {
        start_sale(conn, &sku.bucket(tag), &nonce, p.units)?;
    }
    let replaced = publish(conn, sku, count, generation, &nonce, &placed)?;
    if let Ok(old) = Buckets::parse(sku, &replaced) {
        let kept: Vec<&str> = placed.iter().map(|(_, p)| p.sku.as_str()).collect();
        retire(conn, &old, &kept)?;
    }
    Ok(placed.into_iter().map(|(_, p)| p).collect())
}

/// Where each of `k` buckets of `sku` goes, with its tag and its share of `count`: bucket `i`
/// on master `i mod M`, under a tag the SKU's map does not have now.
fn place(conn: &mut Conn, sku: &Sku, count: u64, k: usize) -> Result<Vec<(String, Placement)>> {
    let masters = masters(conn)?;
    let old = Buckets::read(conn, sku).ok().flatten();
    let old_tags: Vec<String> = old.iter().flat_map(|b| b.skus.iter().map(tag_of)).collect();
    let tags = fresh_tags(&masters, k, &old_tags)?;
    let placed = tags.into_iter().enumerate().map(|(i, tag)| {
        let share = count / k as u64 + u64::from((i as u64) < count % k as u64);
        let placement = Placement {
            bucket: i,
            slot: key_slot(&tag),
            master: master_of(&masters, key_slot(&tag)).unwrap_or_default(),
            sku: sku.bucket(&tag).to_string(),
            units: share,
        };
        (tag, placement)
    });
    Ok(placed.collect())
}

/// A tag for each of `k` buckets, bucket `i`'s on master `i mod M`, none of them in
/// `old_tags`.
///
/// Buckets no earlier sale used (the search for a tag on each master starts at a random
/// salt): a process still holding an old map finds its bucket ended, reads the map again and
/// buys in the new sale, rather than buying in a bucket of the new sale by the old map's
/// homes (a user in two buckets, its limit twice over). A tag the old map has is passed over,
/// whatever the chance.
fn fresh_tags(masters: &[Master], k: usize, old_tags: &[String]) -> Result<Vec<String>> {
    let start = rand::random::<u32>() % 1_000_000_000;
    (0..k)
        .map(|i| {
            let want = &masters[i % masters.len()].0;
            (start..start + 100_000)
                .map(|salt| format!("b{i}.{salt}"))
                .find(|t| {
                    master_of(masters, key_slot(t)).as_ref() == Some(want) && !old_tags.contains(t)
                })
                .ok_or_else(|| Error::internal(format!("no slot of master {want} found")))
        })
        .collect()
}

/// Takes the next seed generation of `sku`: the map is published only if no seed of a later
/// one published first.
fn take_generation(conn: &mut Conn, sku: &Sku) -> Result<i64> {
    let parent = StockKeys::new(sku);
    match conn.query(
        redis::cmd("HINCRBY")
            .arg(&parent.seed_gen)
            .arg("taken")
            .arg(1),
    ) {
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
            Err(damaged(sku, format!("{} is not a hash", parent.seed_gen)))
        }
        other => other,
    }
}

/// Starts sale `nonce` in `bucket` with `units`: moves of any earlier sale forgotten, its
/// books seeded afresh.
fn start_sale(conn: &mut Conn, bucket: &Sku, nonce: &str, units: u64) -> Result<()> {
    let keys = StockKeys::new(bucket);
    // The bucket's sale record first: a move of the earlier sale still under way is then not
    // delivered into this one.
    conn.query::<()>(redis::cmd("SET").arg(&keys.bucket_sale).arg(nonce))?;
    conn.query::<()>(
        redis::cmd("DEL")
            .arg(&keys.moving)
            .arg(&keys.moved_in)
            .arg(&keys.drained),
    )?;
    conn.query::<()>(redis::cmd("SET").arg(&keys.moved_out).arg(0))?;
    seed(conn, bucket, units)
}

/// Publishes the map of the buckets `placed` (sale `nonce`, seed `generation`, `count` units)
/// on the SKU's own slot, and returns the map it replaced. Outrun by a later seed, it ends its
/// own buckets and fails with [`Error::Outrun`].
fn publish(
    conn: &mut Conn,
    sku: &Sku,
    count: u64,
    generation: i64,
    nonce: &str,
    placed: &[(String, Placement)],
) -> Result<String> {
    let parent = StockKeys::new(sku);
    let tags: Vec<&str> = placed.iter().map(|(t, _)| t.as_str()).collect();
    let map = format!("v1 {nonce} {}", tags.join(" "));
    let (outcome, replaced): (String, String) = conn.script(
        PUBLISH
            .key(&parent.seed_gen)
            .key(&parent.buckets)
            .key(&parent.seeded)
            .key(&parent.moves)
            .key(&parent.stock)
            .arg(generation)
            .arg(&map)
            .arg(count),
    )?;
    match outcome.as_str() {
        "published" => Ok(replaced),
        "outrun" => {
            let ours: Vec<Sku> = placed.iter().map(|(t, _)| sku.bucket(t)).collect();
            end_unpublished(conn, &ours, nonce)?;
            Err(Error::Outrun {
                sku: sku.to_string(),
                count,
            })
        }
        _ => Err(damaged(sku, replaced)),
    }
}

/// What it takes and answers: the header comment of `lua/publish.lua`.
const PUBLISH_LUA: &str = include_str!("lua/publish.lua");

static PUBLISH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(PUBLISH_LUA));

/// What it takes and answers: the header comment of `lua/end_unpublished.lua`.
const END_UNPUBLISHED_LUA: &str = include_str!("lua/end_unpublished.lua");

static END_UNPUBLISHED: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(END_UNPUBLISHED_LUA));

/// Ends the buckets of a seed outrun by another (see [`seed_buckets`]): nobody can buy there
/// (no map names them), and nothing is left behind that looks like stock.
fn end_unpublished(conn: &mut Conn, buckets: &[Sku], nonce: &str) -> Result<()> {
    for b in buckets {
        let k = StockKeys::new(b);
        conn.script::<i64>(
            END_UNPUBLISHED
                .key(&k.bucket_sale)
                .key(&k.stock)
                .key(&k.seeded)
                .key(&k.sold)
                .key(&k.ledger)
                .key(&k.buyers)
                .key(&k.sale)
                .key(&k.moving)
                .key(&k.moved_in)
                .key(&k.moved_out)
                .key(&k.drained)
                .key(&k.origin)
                .key(&k.seed_gen)
                .arg(nonce),
        )?;
    }
    Ok(())
}

/// The bucket a bucket SKU (`{tag}<SKU>`) is: its tag.
fn tag_of(bucket: &Sku) -> String {
    let s = bucket.as_str();
    s.strip_prefix('{')
        .and_then(|r| r.split_once('}'))
        .map(|(t, _)| t.to_string())
        .unwrap_or_default()
}

/// Ends the buckets of an earlier sale of a SKU (`old`) that the new sale does not reuse
/// (`kept`): their stock and books go, so a process still buying by the old map finds them
/// unseeded and reads the map again, and no unit is left where nobody looks. A bucket
/// whose orders stream still has entries is listed in the SKU's retired set, where the orders
/// worker finds it (a paid order is never left behind in a stream nobody drains).
pub fn retire(conn: &mut Conn, old: &Buckets, kept: &[&str]) -> Result<()> {
    let parent = StockKeys::new(&old.sku);
    for b in old.skus.iter().filter(|b| !kept.contains(&b.as_str())) {
        let keys = StockKeys::new(b);
        // The stock first: from then on nothing more is sold there. Then the rest of its books
        // (no sale uses the bucket again); its orders stream and dead letters stay.
        conn.query::<()>(redis::cmd("DEL").arg(&keys.stock).arg(&keys.bucket_sale))?;
        conn.query::<()>(
            redis::cmd("DEL")
                .arg(&keys.ledger)
                .arg(&keys.sold)
                .arg(&keys.seeded)
                .arg(&keys.buyers)
                .arg(&keys.moving)
                .arg(&keys.moved_in)
                .arg(&keys.moved_out)
                .arg(&keys.drained)
                .arg(&keys.origin)
                .arg(&keys.seed_gen),
        )?;
        let orders: bool = conn.query(redis::cmd("EXISTS").arg(&keys.events))?;
        if orders {
            conn.query::<()>(redis::cmd("SADD").arg(&parent.retired).arg(b.as_str()))?;
        }
    }
    Ok(())
}
