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

use super::script::BOOKS_LUA;
use super::{MAX_STOCK, parse_stock, read_stock, seed};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::{StockKeys, key_slot};
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

    /// Makes room for a purchase of `qty` in bucket `home`, whose own stock is short: moves
    /// units into it from the other buckets. `Ok(Borrowed::Moved)`: buy at home again (units
    /// arrived, or another buyer moved some meanwhile). `Ok(Borrowed::SoldOut)`: one pass
    /// over every bucket found fewer than `qty` units at home and none anywhere else, and the
    /// move counter did not change from before the pass to after it, so no move was under
    /// way that the pass could have missed. `lock_for(d)` takes bucket `d`'s lock for the lock
    /// strategies (a donor locked by a holder who read its stock is not taken from).
    pub fn borrow(
        &self,
        conn: &mut Conn,
        home: usize,
        qty: u64,
        lock_for: &mut dyn FnMut(&mut Conn, usize) -> Result<Option<crate::lock::Guard>>,
    ) -> Result<Borrowed> {
        let keys: Vec<StockKeys> = self.skus.iter().map(StockKeys::new).collect();
        let parent = StockKeys::new(&self.sku);
        // The home first, in one call: its keys checked (so that no delivery into it fails
        // half way), its drained mark read, and the moves out of it that a stopped buyer left
        // unfinished listed: they are finished here, since nobody else looks at the home's
        // moves before answering sold out for it.
        let at = self.home_state(conn, &keys, home)?;
        if at.stale {
            return self.stale(conn, &keys[home].bucket_sale);
        }
        for (id, units, to) in &at.unfinished {
            if self.finish(conn, &keys, &parent, home, id, *units, *to)? == Finished::Stale {
                return self.stale(conn, &keys[*to].bucket_sale);
            }
        }
        // Marked drained: every bucket held fewer than some purchase's quantity. A purchase of
        // fewer units than were left looks again.
        if at.unfinished.is_empty()
            && let Some(units) = at.drained
            && units < qty as i64
        {
            return Ok(Borrowed::SoldOut { remaining: units });
        }
        let before = self.moves(conn, &parent)?;
        let mut locked = false;
        let mut moved = false;
        let mut total = 0i64;
        let k = self.skus.len();
        for d in (1..k).map(|i| (home + i) % k) {
            let mut took = self.take(conn, &keys, d, home, qty, "")?;
            if took.status == "locked"
                && let Some(guard) = lock_for(conn, d)?
            {
                let taken = self.take(conn, &keys, d, home, qty, guard.token());
                let _ = guard.release(conn);
                took = taken?;
            }
            for (id, units, to) in &took.unfinished {
                if self.finish(conn, &keys, &parent, d, id, *units, *to)? == Finished::Stale {
                    return self.stale(conn, &keys[*to].bucket_sale);
                }
            }
            match took.status.as_str() {
                "took" => {
                    if self.finish(conn, &keys, &parent, d, &took.id, took.units, home)?
                        == Finished::Stale
                    {
                        return self.stale(conn, &keys[home].bucket_sale);
                    }
                    moved = true;
                }
                "locked" => locked = true,
                "stale" => return self.stale(conn, &keys[d].bucket_sale),
                _ => total += took.left.max(0),
            }
        }
        if moved {
            return Ok(Borrowed::Moved);
        }
        // The home again, with the moves out of it: one taken during the pass by a buyer who
        // then stopped holds units that no bucket's stock shows.
        let end = self.home_state(conn, &keys, home)?;
        if end.stale {
            return self.stale(conn, &keys[home].bucket_sale);
        }
        if end.stock >= qty as i64 {
            return Ok(Borrowed::Moved);
        }
        if !end.unfinished.is_empty() {
            return Ok(Borrowed::Unsettled);
        }
        let at_home = end.stock;
        if locked {
            return Ok(Borrowed::Locked);
        }
        if self.moves(conn, &parent)? != before {
            return Ok(Borrowed::Unsettled);
        }
        total += at_home.max(0);
        let mark = format!("{}:{total}", self.nonce);
        for key in &keys {
            conn.query::<()>(redis::cmd("SET").arg(&key.drained).arg(&mark))?;
        }
        Ok(Borrowed::SoldOut { remaining: total })
    }

    /// The move counter of the SKU.
    /// Damaged books when the counter holds anything but an integer: checked before any
    /// units are taken, so that a move never stops half way on it.
    fn moves(&self, conn: &mut Conn, parent: &StockKeys) -> Result<i64> {
        let n: Option<String> = match conn.query(redis::cmd("GET").arg(&parent.moves)) {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                return Err(damaged(
                    &self.sku,
                    format!("{} is not a string", parent.moves),
                ));
            }
            other => other?,
        };
        match n.as_deref() {
            None => Ok(0),
            Some(v) => parse_stock(v).ok_or_else(|| {
                damaged(
                    &self.sku,
                    format!("{} holds '{}', not an integer", parent.moves, shown(v)),
                )
            }),
        }
    }

    /// The home bucket's state (see `HOME_BODY`): whether it is this sale's, its drained
    /// mark's units, and the moves out of it not finished.
    fn home_state(&self, conn: &mut Conn, keys: &[StockKeys], home: usize) -> Result<Home> {
        let k = &keys[home];
        let reply: (String, i64, Vec<String>, i64) = conn.script(
            HOME.key(&k.stock)
                .key(&k.moving)
                .key(&k.moved_in)
                .key(&k.moved_out)
                .key(&k.bucket_sale)
                .key(&k.drained)
                .arg(&self.nonce)
                .arg(self.skus.len()),
        )?;
        let (status, drained, pending, stock) = reply;
        if status == "bad" {
            return Err(damaged(&self.sku, pending.join(" ")));
        }
        Ok(Home {
            stale: status == "stale",
            drained: (status == "drained").then_some(drained),
            unfinished: self.unfinished(&pending, &k.moving)?,
            stock,
        })
    }

    /// A bucket was found to belong to another sale (its sale key, `key`, holds another id):
    /// the SKU was seeded again, and the map is read anew ([`Borrowed::Stale`]). When the map
    /// still names this sale, the key was damaged: an error, and every record of a move is
    /// kept, so no unit is dropped on the strength of a damaged key.
    fn stale(&self, conn: &mut Conn, key: &str) -> Result<Borrowed> {
        match Buckets::settled(conn, &self.sku, &self.nonce)? {
            Some(now) if now.nonce == self.nonce => {
                let held: Option<String> = conn
                    .query(redis::cmd("GET").arg(key))
                    .unwrap_or_else(|_| Some("a value that is not a string".into()));
                Err(damaged(
                    &self.sku,
                    format!(
                        "{key} holds '{}', not the id of this sale ('{}')",
                        shown(held.as_deref().unwrap_or("")),
                        self.nonce
                    ),
                ))
            }
            _ => Ok(Borrowed::Stale),
        }
    }

    /// Parses the unfinished moves a script listed (`id`, `'<units> <to>'`, ...); the
    /// scripts check the form before they write anything, so a bad one here is damage made
    /// since.
    fn unfinished(&self, pending: &[String], key: &str) -> Result<Vec<(String, i64, usize)>> {
        let mut out = Vec::new();
        for pair in pending.chunks(2) {
            let parsed = match pair {
                [id, what] => what.split_once(' ').and_then(|(u, to)| {
                    Some((id.clone(), parse_stock(u)?, to.parse::<usize>().ok()?))
                }),
                _ => None,
            };
            match parsed {
                Some((id, u, to)) if u > 0 && to < self.skus.len() => out.push((id, u, to)),
                _ => {
                    return Err(damaged(
                        &self.sku,
                        format!("{key} holds a move lockctl did not write"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Takes units for `home` from bucket `d` (see `TAKE_BODY`), and lists the moves out of
    /// `d` that are not finished.
    fn take(
        &self,
        conn: &mut Conn,
        keys: &[StockKeys],
        d: usize,
        home: usize,
        qty: u64,
        token: &str,
    ) -> Result<Take> {
        let id = hex::encode(rand::random::<[u8; 8]>());
        let lock = crate::keys::LockKeys::new(self.skus[d].as_str()).lock;
        let reply: (String, i64, i64, Vec<String>) = conn.script(
            TAKE.key(&keys[d].stock)
                .key(&keys[d].moving)
                .key(&keys[d].moved_out)
                .key(&keys[d].bucket_sale)
                .key(&lock)
                .arg(qty)
                .arg(&id)
                .arg(home)
                .arg(&self.nonce)
                .arg(token)
                .arg(self.skus.len()),
        )?;
        let (status, units, left, pending) = reply;
        if status == "bad" {
            return Err(damaged(&self.sku, pending.join(" ")));
        }
        let unfinished = self.unfinished(&pending, &keys[d].moving)?;
        Ok(Take {
            status,
            id,
            units,
            left,
            unfinished,
        })
    }

    /// Delivers move `id` (`units` out of bucket `from`) into bucket `to`, once, between two
    /// increments of the move counter, then forgets it at the donor.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        conn: &mut Conn,
        keys: &[StockKeys],
        parent: &StockKeys,
        from: usize,
        id: &str,
        units: i64,
        to: usize,
    ) -> Result<Finished> {
        conn.query::<i64>(redis::cmd("INCR").arg(&parent.moves))?;
        let delivered: String = conn.script(
            DELIVER
                .key(&keys[to].stock)
                .key(&keys[to].moved_in)
                .key(&keys[to].bucket_sale)
                .arg(id)
                .arg(units)
                .arg(&self.nonce),
        )?;
        if delivered.starts_with("bad") {
            return Err(damaged(&self.sku, delivered));
        }
        conn.query::<i64>(redis::cmd("INCR").arg(&parent.moves))?;
        if delivered == "stale" {
            // Not delivered: the record stays at the donor until someone who knows the
            // destination's sale decides (see `Buckets::stale`).
            return Ok(Finished::Stale);
        }
        conn.query::<i64>(redis::cmd("HDEL").arg(&keys[from].moving).arg(id))?;
        Ok(Finished::Delivered)
    }
}

/// What [`Buckets::borrow`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Borrowed {
    /// Buy at home again.
    Moved,
    /// A move happened during the pass (another buyer's): pause, then buy at home again.
    Unsettled,
    /// A donor's lock is held by a lock holder, who may have read its stock and be about to
    /// write it: nothing was taken from it. Pause and try again while the purchase's wait
    /// lasts; busy after that.
    Locked,
    /// Every bucket is short: sold out, with `remaining` units left over all of them.
    SoldOut {
        /// Units left over all buckets (fewer than the purchase's).
        remaining: i64,
    },
    /// A bucket belongs to another sale (the SKU was seeded again): read the map again.
    Stale,
}

/// Whether a move reached its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finished {
    /// Delivered (now or before), and forgotten at the donor.
    Delivered,
    /// The destination is another sale's: not delivered, the donor's record kept.
    Stale,
}

/// The home bucket as a borrowing purchase finds it (see `HOME_BODY`).
struct Home {
    stale: bool,
    drained: Option<i64>,
    unfinished: Vec<(String, i64, usize)>,
    stock: i64,
}

struct Take {
    status: String,
    id: String,
    units: i64,
    left: i64,
    unfinished: Vec<(String, i64, usize)>,
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

/// What it takes and answers: the header comment of `lua/bucket_well_formed.lua`.
const WELL_FORMED: &str = include_str!("lua/bucket_well_formed.lua");

/// What it takes and answers: the header comment of `lua/bucket_take.lua`.
const TAKE_BODY: &str = include_str!("lua/bucket_take.lua");

/// What it takes and answers: the header comment of `lua/bucket_home.lua`.
const HOME_BODY: &str = include_str!("lua/bucket_home.lua");

/// What it takes and answers: the header comment of `lua/bucket_deliver.lua`.
const DELIVER_BODY: &str = include_str!("lua/bucket_deliver.lua");

static TAKE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(&format!("{BOOKS_LUA}{WELL_FORMED}{TAKE_BODY}"))
});
static HOME: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(&format!("{BOOKS_LUA}{WELL_FORMED}{HOME_BODY}"))
});
static DELIVER: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(&format!("{BOOKS_LUA}{WELL_FORMED}{DELIVER_BODY}"))
});

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
    let masters = masters(conn)?;
    let owner = |slot: u16| master_of(&masters, slot);
    let old = Buckets::read(conn, sku).ok().flatten();
    let old_tags: Vec<String> = old.iter().flat_map(|b| b.skus.iter().map(tag_of)).collect();
    // Buckets no earlier sale used (the search for a tag on each master starts at a random
    // salt): a process still holding an old map finds its bucket ended, reads the map again
    // and buys in the new sale, rather than buying in a bucket of the new sale by the old
    // map's homes (a user in two buckets, its limit twice over). A tag the old map has is
    // passed over, whatever the chance.
    let start = rand::random::<u32>() % 1_000_000_000;
    let tags: Vec<String> = (0..k)
        .map(|i| {
            let want = &masters[i % masters.len()].0;
            (start..start + 100_000)
                .map(|salt| format!("b{i}.{salt}"))
                .find(|t| owner(key_slot(t)).as_ref() == Some(want) && !old_tags.contains(t))
                .ok_or_else(|| Error::internal(format!("no slot of master {want} found")))
        })
        .collect::<Result<_>>()?;
    let mut placed = Vec::with_capacity(k);
    for (i, tag) in tags.into_iter().enumerate() {
        let share = count / k as u64 + u64::from((i as u64) < count % k as u64);
        let bucket = sku.bucket(&tag);
        placed.push((
            tag.clone(),
            Placement {
                bucket: i,
                slot: key_slot(&tag),
                master: owner(key_slot(&tag)).unwrap_or_default(),
                sku: bucket.to_string(),
                units: share,
            },
        ));
    }
    let parent = StockKeys::new(sku);
    let generation: i64 = match conn.query(
        redis::cmd("HINCRBY")
            .arg(&parent.seed_gen)
            .arg("taken")
            .arg(1),
    ) {
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
            return Err(damaged(sku, format!("{} is not a hash", parent.seed_gen)));
        }
        other => other?,
    };
    let nonce = hex::encode(rand::random::<[u8; 8]>());
    for (tag, p) in &placed {
        let bucket = sku.bucket(tag);
        let keys = StockKeys::new(&bucket);
        // The bucket's sale record first: a move of the earlier sale still under way is then
        // not delivered into this one.
        conn.query::<()>(redis::cmd("SET").arg(&keys.bucket_sale).arg(&nonce))?;
        conn.query::<()>(
            redis::cmd("DEL")
                .arg(&keys.moving)
                .arg(&keys.moved_in)
                .arg(&keys.drained),
        )?;
        conn.query::<()>(redis::cmd("SET").arg(&keys.moved_out).arg(0))?;
        seed(conn, &bucket, p.units)?;
    }
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
    let ours: Vec<Sku> = placed.iter().map(|(t, _)| sku.bucket(t)).collect();
    match outcome.as_str() {
        "published" => {}
        "outrun" => {
            end_unpublished(conn, &ours, &nonce)?;
            return Err(Error::Outrun {
                sku: sku.to_string(),
                count,
            });
        }
        _ => return Err(damaged(sku, replaced)),
    }
    if let Ok(old) = Buckets::parse(sku, &replaced) {
        let kept: Vec<&str> = placed.iter().map(|(_, p)| p.sku.as_str()).collect();
        retire(conn, &old, &kept)?;
    }
    Ok(placed.into_iter().map(|(_, p)| p).collect())
}

/// What it takes and answers: the header comment of `lua/bucket_publish.lua`.
const PUBLISH_LUA: &str = include_str!("lua/bucket_publish.lua");

static PUBLISH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(PUBLISH_LUA));

/// What it takes and answers: the header comment of `lua/bucket_end_unpublished.lua`.
const END_UNPUBLISHED_LUA: &str = include_str!("lua/bucket_end_unpublished.lua");

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
