//! Bucketed stock: one hot SKU's stock split over K buckets on different cluster masters.
//!
//! A SKU's keys all live in one slot, so one SKU is served by one master's one core whatever
//! the cluster's size. `seed SKU N --buckets K` splits N over K buckets; bucket `i` is itself a
//! SKU, `{<tag>}<SKU>`, whose hash tag is chosen so that its slot is served by the `i`-th
//! master (round robin when K exceeds the masters). Each bucket keeps the books of an
//! ordinary SKU (stock, sold counter, ledger, per-user totals, events), so every strategy buys
//! from a bucket exactly as it buys an unbucketed SKU; the SKU's own keys keep only the bucket
//! map (`item:buckets:<SKU>`), the count seeded, and a move counter.
//!
//! The rules that keep the sale honest:
//! - **One user, one bucket.** A purchase's home bucket is a hash of its user (of its order id
//!   when it names none), so a user's purchases, per-user total and order ids are all in one
//!   bucket and the per-user limit and idempotency stay as atomic as one script.
//! - **Never sold out while units remain.** A purchase that finds its home bucket short
//!   borrows: it moves units from the other buckets into its home (half of what a donor has,
//!   at least what it needs: remainders follow demand), then buys at home. It answers sold out
//!   only after a pass over every bucket found none to move and saw no move happen meanwhile
//!   (see [`Buckets::borrow`]); then it marks every bucket drained, so later purchases learn
//!   it in one call.
//! - **Units are never created or lost in a move.** A move takes units from the donor and
//!   records it (`item:moving:<bucket>`, one script), then delivers them to the home, once
//!   only (`item:moved_in:<bucket>` remembers the move's id), then forgets it at the donor.
//!   Whoever finds a move unfinished (its mover crashed) finishes it. In every bucket
//!   `seeded + moved in == stock + sold + moved out`, and over all buckets the moved-out units
//!   not yet moved in are in transit: `status` counts them.

use super::{parse_stock, read_stock};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::sku::Sku;

/// The most buckets `seed --buckets` makes: each purchase that borrows may visit all of them.
pub const MAX_BUCKETS: usize = 64;

/// A bucketed SKU's map, as `item:buckets:<SKU>` holds it: `v1 <nonce> <tag> <tag> ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// The SKU the buckets split.
    pub sku: Sku,
    /// This sale's nonce: a move carries it, and is not delivered into another sale.
    pub nonce: String,
    /// Each bucket as a SKU of its own (`{tag}<SKU>`), in order.
    pub skus: Vec<Sku>,
}

/// Where `seed --buckets` put a bucket.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// The bucket's index.
    pub bucket: usize,
    /// The bucket's own SKU, `{tag}<SKU>`.
    pub sku: String,
    /// The cluster slot of its keys.
    pub slot: u16,
    /// The master serving that slot (`host:port`), as the cluster said when seeding.
    pub master: String,
    /// Units seeded into it.
    pub units: u64,
}

impl Buckets {
    /// The map of `sku`, or `None` when it is not bucketed. A map lockctl did not write is
    /// damaged books ([`Error::BadData`]).
    pub fn read(conn: &mut Conn, sku: &Sku) -> Result<Option<Buckets>> {
        let key = StockKeys::new(sku).buckets;
        let raw: Option<String> = match conn.query(redis::cmd("GET").arg(&key)) {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                return Err(damaged(sku, format!("{key} is not a string")));
            }
            other => other?,
        };
        let Some(raw) = raw else { return Ok(None) };
        Buckets::parse(sku, &raw).map(Some)
    }

    /// The map `raw` of `sku`, as `item:buckets:<SKU>` holds it; one lockctl did not write is
    /// damaged books ([`Error::BadData`]).
    pub fn parse(sku: &Sku, raw: &str) -> Result<Buckets> {
        let key = StockKeys::new(sku).buckets;
        let mut words = raw.split(' ');
        let (Some("v1"), Some(nonce)) = (words.next(), words.next()) else {
            return Err(damaged(sku, bad_map(&key, raw)));
        };
        let tags: Vec<&str> = words.collect();
        let fine = |t: &&str| {
            !t.is_empty()
                && t.len() <= 16
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
        };
        if tags.is_empty() || tags.len() > MAX_BUCKETS || !tags.iter().all(fine) || nonce.is_empty()
        {
            return Err(damaged(sku, bad_map(&key, raw)));
        }
        Ok(Buckets {
            sku: sku.clone(),
            nonce: nonce.to_string(),
            skus: tags.iter().map(|t| sku.bucket(t)).collect(),
        })
    }

    /// The map of `sku` once it no longer names the sale `nonce`, or as it is after about a
    /// second: a bucketed seed publishes its map and then ends the old sale's buckets, but an
    /// operator (or a seed of another version) may end them first, so a buyer who finds its
    /// bucket ended waits that long for the new map before it calls the bucket damaged.
    pub fn settled(conn: &mut Conn, sku: &Sku, nonce: &str) -> Result<Option<Buckets>> {
        for _ in 0..20 {
            match Buckets::read(conn, sku)? {
                Some(b) if b.nonce == nonce => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                other => return Ok(other),
            }
        }
        Buckets::read(conn, sku)
    }

    /// How many buckets.
    pub fn len(&self) -> usize {
        self.skus.len()
    }

    /// Never: a map has at least one bucket.
    pub fn is_empty(&self) -> bool {
        self.skus.is_empty()
    }

    /// The home bucket of a purchase: by its user when it names one (so all of a user's
    /// purchases, and its per-user total, are in one bucket), by its order id otherwise.
    /// FNV-1a, so every process and every version agrees.
    pub fn home(&self, user: Option<&str>, order_id: &str) -> usize {
        let name = user.unwrap_or(order_id);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h % self.skus.len() as u64) as usize
    }
}

fn damaged(sku: &Sku, reason: String) -> Error {
    Error::BadData {
        sku: sku.to_string(),
        reason,
    }
}

/// A value as an error shows it: at most 60 characters, escaped.
fn shown(raw: &str) -> String {
    raw.chars()
        .take(60)
        .collect::<String>()
        .escape_debug()
        .to_string()
}

fn bad_map(key: &str, raw: &str) -> String {
    let shown: String = raw.chars().take(60).collect();
    format!(
        "{key} holds '{}', not a bucket map lockctl wrote",
        shown.escape_debug()
    )
}

mod borrow;
mod seed;

pub use borrow::Borrowed;
use borrow::Finished;
pub use seed::{Master, master_of, masters, retire, seed_buckets};

/// One bucket's books, as `status` and the hammer add them up.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BucketBooks {
    /// The bucket's own SKU.
    pub sku: String,
    /// Its stock.
    pub stock: i64,
    /// Units seeded into it.
    pub seeded: i64,
    /// Units sold from it.
    pub sold: i64,
    /// Units moved out of it.
    pub moved_out: i64,
    /// Units moved into it.
    pub moved_in: i64,
}

impl BucketBooks {
    /// Reads one bucket's counters. A counter that is missing reads as 0; one that is not an
    /// integer is damaged books.
    pub fn read(conn: &mut Conn, bucket: &Sku) -> Result<BucketBooks> {
        let keys = StockKeys::new(bucket);
        let vals: Vec<Option<String>> = conn.query(
            redis::cmd("MGET")
                .arg(&keys.stock)
                .arg(&keys.seeded)
                .arg(&keys.sold)
                .arg(&keys.moved_out),
        )?;
        let names = [&keys.stock, &keys.seeded, &keys.sold, &keys.moved_out];
        let mut n = [0i64; 4];
        for (i, v) in vals.iter().enumerate().take(4) {
            n[i] = match v.as_deref() {
                None => 0,
                Some(s) => parse_stock(s).ok_or_else(|| {
                    damaged(
                        bucket,
                        format!("{} holds '{}', not an integer", names[i], s.escape_debug()),
                    )
                })?,
            };
        }
        let delivered: Vec<String> = match conn.query(redis::cmd("HVALS").arg(&keys.moved_in)) {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                return Err(damaged(bucket, format!("{} is not a hash", keys.moved_in)));
            }
            other => other?,
        };
        let mut moved_in = 0;
        for v in &delivered {
            moved_in += parse_stock(v).filter(|&n| n > 0).ok_or_else(|| {
                damaged(
                    bucket,
                    format!(
                        "{} holds '{}', not a count of units moved",
                        keys.moved_in,
                        shown(v)
                    ),
                )
            })?;
        }
        Ok(BucketBooks {
            sku: bucket.to_string(),
            stock: n[0],
            seeded: n[1],
            sold: n[2],
            moved_out: n[3],
            moved_in,
        })
    }
}

/// The books of every bucket of `b`, and the units in transit (moved out, not yet moved in).
pub fn books(conn: &mut Conn, b: &Buckets) -> Result<(Vec<BucketBooks>, i64)> {
    // Damage in a bucket is the SKU's (a bucket is not seeded on its own).
    let each = b
        .skus
        .iter()
        .map(|s| BucketBooks::read(conn, s))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| match e {
            Error::BadData { reason, .. } => damaged(&b.sku, reason),
            other => other,
        })?;
    let transit = each.iter().map(|x| x.moved_out - x.moved_in).sum();
    Ok((each, transit))
}

/// Finishes every move of `b` left unfinished (its mover stopped between taking and
/// delivering), so that the stock is where buyers look: what the hammer does before it reads
/// the books, and what every borrowing purchase does on its way.
pub fn finish_moves(conn: &mut Conn, b: &Buckets) -> Result<u64> {
    let keys: Vec<StockKeys> = b.skus.iter().map(StockKeys::new).collect();
    let parent = StockKeys::new(&b.sku);
    let mut finished = 0;
    for d in 0..b.len() {
        let pending: Vec<(String, String)> =
            conn.query(redis::cmd("HGETALL").arg(&keys[d].moving))?;
        for (id, what) in pending {
            let Some((u, to)) = what.split_once(' ') else {
                continue;
            };
            let (Some(u), Ok(to)) = (parse_stock(u), to.parse::<usize>()) else {
                continue;
            };
            if to < b.len() && b.finish(conn, &keys, &parent, d, &id, u, to)? == Finished::Delivered
            {
                finished += 1;
            }
        }
    }
    Ok(finished)
}

/// `sku` and, of a bucketed SKU, each of its buckets: the SKUs whose streams, dead letters and
/// rows hold its orders (a bucket's orders name the bucket). The SKU's own comes first, and
/// stays: a sale before the buckets may have left orders in its stream.
pub fn with_buckets(conn: &mut Conn, sku: &Sku) -> Result<Vec<Sku>> {
    let mut out = vec![sku.clone()];
    if let Some(b) = Buckets::read(conn, sku)? {
        out.extend(b.skus);
    }
    let retired: Vec<String> =
        match conn.query(redis::cmd("SMEMBERS").arg(StockKeys::new(sku).retired)) {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => Vec::new(),
            other => other?,
        };
    for r in retired {
        // Only buckets of this SKU (`{tag}<SKU>`): a hostile member names no other SKU.
        if let Ok(b) = r.parse::<Sku>()
            && b.as_str().ends_with(&format!("}}{sku}"))
            && !out.contains(&b)
        {
            out.push(b);
        }
    }
    Ok(out)
}

/// The stock of `sku` as a run's books count it: of a bucketed SKU, the stock of every bucket
/// plus the units in transit between them (moved out, not yet in: not sold, and not lost
/// unless a failover lost the delivery), or, when a bucket is below zero, the sum of the
/// buckets below zero (an oversale that a fuller bucket must not hide). `None` when neither
/// the SKU nor a bucket map exists.
pub fn stock_of(conn: &mut Conn, sku: &Sku) -> Result<Option<i64>> {
    let Some(b) = Buckets::read(conn, sku)? else {
        return read_stock(conn, sku, &StockKeys::new(sku));
    };
    let (each, transit) = books(conn, &b)?;
    let below: i64 = each.iter().map(|x| x.stock.min(0)).sum();
    if below < 0 {
        return Ok(Some(below));
    }
    Ok(Some(each.iter().map(|x| x.stock).sum::<i64>() + transit))
}
