//! Borrowing between buckets: a purchase whose home bucket is short moves units into it from
//! the others, and answers sold out only after a pass that found none (see the module
//! documentation of [`super`]).

use super::{Buckets, damaged, shown};
use std::sync::LazyLock;

use redis::Script;

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::stock::parse_stock;

impl Buckets {
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
        if let Some(answer) = self.home_first(conn, &keys, &parent, home, qty)? {
            return Ok(answer);
        }
        let before = self.moves(conn, &parent)?;
        let mut locked = false;
        let mut moved = false;
        let mut total = 0i64;
        let k = self.skus.len();
        for d in (1..k).map(|i| (home + i) % k) {
            let mut took = self.take(conn, &keys, d, home, qty, "")?;
            if took.status == Took::Locked
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
            match took.status {
                Took::Moved => {
                    if self.finish(conn, &keys, &parent, d, &took.id, took.units, home)?
                        == Finished::Stale
                    {
                        return self.stale(conn, &keys[home].bucket_sale);
                    }
                    moved = true;
                }
                Took::Locked => locked = true,
                Took::Stale => return self.stale(conn, &keys[d].bucket_sale),
                Took::Empty => total += took.left.max(0),
            }
        }
        if moved {
            return Ok(Borrowed::Moved);
        }
        self.home_again(conn, &keys, &parent, home, qty, locked, before, total)
    }

    /// The home first, in one call: its keys checked (so that no delivery into it fails half
    /// way), its drained mark read, and the moves out of it that a stopped buyer left
    /// unfinished listed: they are finished here, since nobody else looks at the home's moves
    /// before answering sold out for it. `Some` when that already answers the borrow.
    fn home_first(
        &self,
        conn: &mut Conn,
        keys: &[StockKeys],
        parent: &StockKeys,
        home: usize,
        qty: u64,
    ) -> Result<Option<Borrowed>> {
        let at = self.home_state(conn, keys, home)?;
        if at.stale {
            return self.stale(conn, &keys[home].bucket_sale).map(Some);
        }
        for (id, units, to) in &at.unfinished {
            if self.finish(conn, keys, parent, home, id, *units, *to)? == Finished::Stale {
                return self.stale(conn, &keys[*to].bucket_sale).map(Some);
            }
        }
        // Marked drained: every bucket held fewer than some purchase's quantity. A purchase of
        // fewer units than were left looks again.
        if at.unfinished.is_empty()
            && let Some(units) = at.drained
            && units < qty as i64
        {
            return Ok(Some(Borrowed::SoldOut { remaining: units }));
        }
        Ok(None)
    }

    /// After a pass over the donors that moved nothing: the home again, with the moves out of
    /// it (one taken during the pass by a buyer who then stopped holds units that no bucket's
    /// stock shows); sold out, marked drained, only when nothing moved or is moving.
    #[allow(clippy::too_many_arguments)]
    fn home_again(
        &self,
        conn: &mut Conn,
        keys: &[StockKeys],
        parent: &StockKeys,
        home: usize,
        qty: u64,
        locked: bool,
        before: i64,
        mut total: i64,
    ) -> Result<Borrowed> {
        let end = self.home_state(conn, keys, home)?;
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
        if self.moves(conn, parent)? != before {
            return Ok(Borrowed::Unsettled);
        }
        total += at_home.max(0);
        let mark = format!("{}:{total}", self.nonce);
        for key in keys {
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
        let known = [
            ("ok", AtHome::Open),
            ("drained", AtHome::Drained),
            ("stale", AtHome::Stale),
        ];
        let Some(status) = self::status(conn, "home", &status, &known)? else {
            return Err(damaged(&self.sku, pending.join(" ")));
        };
        Ok(Home {
            stale: status == AtHome::Stale,
            drained: (status == AtHome::Drained).then_some(drained),
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
        let known = [
            ("took", Took::Moved),
            ("empty", Took::Empty),
            ("locked", Took::Locked),
            ("stale", Took::Stale),
        ];
        let Some(status) = self::status(conn, "take", &status, &known)? else {
            return Err(damaged(&self.sku, pending.join(" ")));
        };
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
    pub(super) fn finish(
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
        let known = [
            ("done", Delivered::Done),
            ("again", Delivered::Done),
            ("stale", Delivered::Stale),
        ];
        let Some(delivered) = status(conn, "deliver", &delivered, &known)? else {
            return Err(damaged(&self.sku, delivered));
        };
        conn.query::<i64>(redis::cmd("INCR").arg(&parent.moves))?;
        if delivered == Delivered::Stale {
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
pub(super) enum Finished {
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
    status: Took,
    id: String,
    units: i64,
    left: i64,
    unfinished: Vec<(String, i64, usize)>,
}

/// A bucket script's text: the books' functions, `lua/well_formed.lua`'s, then its own file.
macro_rules! bucket_script {
    ($file:literal) => {
        concat!(
            include_str!("../lua/books.lua"),
            include_str!("lua/well_formed.lua"),
            include_str!($file)
        )
    };
}

static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(bucket_script!("lua/take.lua")));
static HOME: LazyLock<Script> = LazyLock::new(|| Script::new(bucket_script!("lua/home.lua")));
static DELIVER: LazyLock<Script> = LazyLock::new(|| Script::new(bucket_script!("lua/deliver.lua")));

/// What the take script (`lua/take.lua`) found at the donor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Took {
    /// `took`: units moved out, to be delivered.
    Moved,
    /// `empty`: nothing to take.
    Empty,
    /// `locked`: another holds the donor's lock (a holder may have read its stock).
    Locked,
    /// `stale`: the donor is another sale's.
    Stale,
}

/// What the home script (`lua/home.lua`) found at the home bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AtHome {
    /// `ok`.
    Open,
    /// `drained`: marked sold out.
    Drained,
    /// `stale`: another sale's.
    Stale,
}

/// What the deliver script (`lua/deliver.lua`) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivered {
    /// `done`, or `again` (delivered before).
    Done,
    /// `stale`: the destination is another sale's; not delivered.
    Stale,
}

/// A bucket script's `status`: `Ok(None)` for `bad` (the caller reports the damage), an error
/// naming any answer the script does not give.
fn status<T>(conn: &Conn, script: &str, status: &str, known: &[(&str, T)]) -> Result<Option<T>>
where
    T: Copy,
{
    if status == "bad" || status.starts_with("bad:") {
        return Ok(None);
    }
    known
        .iter()
        .find(|(name, _)| *name == status)
        .map(|(_, t)| Some(*t))
        .ok_or_else(|| conn.unexpected(format!("the {script} script answered '{status}'")))
}
