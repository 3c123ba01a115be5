//! Every Redis key lockctl uses, built in one place.
//!
//! A key always contains its SKU (or lock name) verbatim, at the end, so that a SKU written
//! with a hash tag (`{sku_886}`) keeps all its keys in one Redis Cluster slot, and each prefix
//! differs from every other before the name starts, so no name's key of one kind can equal
//! another name's key of a different kind. Keys reach Redis only as arguments (and scripts
//! only as `KEYS`), never spliced into Lua.

use crate::sku::Sku;

/// The stock module's keys of one SKU. Each prefix differs from the others before the SKU
/// starts, so no SKU's key can equal another SKU's key of a different kind.
#[derive(Clone, Debug)]
pub struct StockKeys {
    /// `item:stock:<SKU>`: the counter, a string integer, as in the tutorial.
    pub stock: String,
    /// `item:orders:<SKU>`: hash of order id -> units deducted under that order id.
    pub ledger: String,
    /// `item:seeded:<SKU>`: the count last given to `seed`, for reconciliation.
    pub seeded: String,
    /// `item:buyers:<SKU>`: hash of user id -> units bought, for per-user limits.
    pub buyers: String,
    /// `item:sold:<SKU>`: units sold since the last seed, kept with every deduction so that
    /// `stock + sold == seeded` can be checked without reading the whole ledger.
    pub sold: String,
    /// `item:order_events:<SKU>`: with `--queue`, a stream entry per bought order, appended by
    /// the deduction itself; consumer group `lockctl`.
    pub events: String,
    /// `item:order_dead:<SKU>`: stream entries a worker set aside (not orders, or rows
    /// PostgreSQL refused), whole, with the reason.
    pub dead_letters: String,
    /// `item:buckets:<SKU>`: with `seed --buckets K`, the bucket map: `v1 <sale nonce>
    /// <tag>...` (see [`crate::stock::buckets`]).
    pub buckets: String,
    /// `item:moves:<SKU>`: of a bucketed SKU, a counter every move of units between its
    /// buckets increases before and after it delivers, so a sold-out check sees one pass
    /// happen without a move in it.
    pub moves: String,
    /// `item:bucket:<bucket>`: of one bucket, the nonce of the sale it belongs to.
    pub bucket_sale: String,
    /// `item:moving:<bucket>`: of one bucket, moves out of it not yet finished: transfer id
    /// -> `<units> <destination bucket>`.
    pub moving: String,
    /// `item:moved_out:<bucket>`: units ever moved out of this bucket in this sale.
    pub moved_out: String,
    /// `item:moved_in:<bucket>`: moves delivered into this bucket: transfer id -> units.
    pub moved_in: String,
    /// `item:drained:<bucket>`: the sale nonce once a check found every bucket empty.
    pub drained: String,
    /// `item:retired_buckets:<SKU>`: a set of buckets of earlier sales of the SKU whose orders
    /// streams still had entries when a seed retired them: the orders worker drains them too.
    pub retired: String,
    /// `item:origin:<SKU>`: the replication id of the master that served the SKU when it was
    /// seeded; another id there now means a failover (or a restart) since, which may have lost
    /// acknowledged purchases (`status` says so).
    pub origin: String,
    /// `item:seed_gen:<SKU>`: a hash of seed generations, `taken` (every seed takes the next)
    /// and `published` (the seed whose stock is on sale): a bucketed seed publishes its map only
    /// if no later seed published first, so two seeds racing leave one sale, not a mix.
    pub seed_gen: String,
    /// `item:sale:<SKU>`: the stream id the current sale starts after, written by `seed`, so
    /// that the books of a sale leave out the rows of earlier sales of the SKU.
    pub sale: String,
}

impl StockKeys {
    /// The keys of `sku`.
    pub fn new(sku: &Sku) -> StockKeys {
        let s = sku.as_str();
        StockKeys {
            stock: format!("item:stock:{s}"),
            ledger: format!("item:orders:{s}"),
            seeded: format!("item:seeded:{s}"),
            buyers: format!("item:buyers:{s}"),
            sold: format!("item:sold:{s}"),
            events: format!("item:order_events:{s}"),
            dead_letters: format!("item:order_dead:{s}"),
            sale: format!("item:sale:{s}"),
            buckets: format!("item:buckets:{s}"),
            moves: format!("item:moves:{s}"),
            bucket_sale: format!("item:bucket:{s}"),
            moving: format!("item:moving:{s}"),
            moved_out: format!("item:moved_out:{s}"),
            moved_in: format!("item:moved_in:{s}"),
            drained: format!("item:drained:{s}"),
            retired: format!("item:retired_buckets:{s}"),
            origin: format!("item:origin:{s}"),
            seed_gen: format!("item:seed_gen:{s}"),
        }
    }
}

/// The keys of one lock. Each prefix differs from the others before the name starts, so no
/// lock's key can equal another lock's key of a different kind.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// `dist_lock:<name>`: the lock itself, as in the tutorial.
    pub lock: String,
    /// `dist_lock_fence:<name>`: the fencing counter, one INCR per grant.
    pub fence: String,
    /// `dist_lock_queue:<name>`: waiters in arrival order.
    pub queue: String,
    /// `dist_lock_waiting:<name>`: each waiter's deadline on the server's clock.
    pub deadlines: String,
    /// `dist_lock_wake:<name>:`, followed by a waiter's token: the list it blocks on.
    pub wake_prefix: String,
    /// `dist_lock_wake:<name>:head`: the list the waiter at the head of an empty queue also
    /// blocks on, for a grant whose releaser could not know it (`<token>:<message>`).
    pub head_wake: String,
    /// `dist_lock_wake:<name>:listener`: the token of the waiter listening on `head_wake`.
    pub head_listener: String,
    /// `dist_lock_grant:<name>`: the last grant, `<token>:<fence>:<server ms>`, so `status`
    /// can say since when the holder has held the lock.
    pub grant: String,
}

impl LockKeys {
    /// The keys of the lock `name`.
    pub fn new(name: &str) -> LockKeys {
        LockKeys {
            lock: format!("dist_lock:{name}"),
            fence: format!("dist_lock_fence:{name}"),
            queue: format!("dist_lock_queue:{name}"),
            deadlines: format!("dist_lock_waiting:{name}"),
            wake_prefix: format!("dist_lock_wake:{name}:"),
            head_wake: format!("dist_lock_wake:{name}:head"),
            head_listener: format!("dist_lock_wake:{name}:listener"),
            grant: format!("dist_lock_grant:{name}"),
        }
    }
}

/// Every key lockctl uses for `sku` (a waiter's wake list stands in for all of them).
pub fn keys_of(sku: &Sku) -> Vec<String> {
    let s = StockKeys::new(sku);
    let l = LockKeys::new(sku.as_str());
    vec![
        s.stock,
        s.ledger,
        s.seeded,
        s.buyers,
        s.sold,
        s.events,
        s.dead_letters,
        s.sale,
        s.buckets,
        s.moves,
        s.bucket_sale,
        s.moving,
        s.moved_out,
        s.moved_in,
        s.drained,
        s.retired,
        s.origin,
        s.seed_gen,
        l.lock,
        l.fence,
        l.queue,
        l.deadlines,
        format!("{}{}", l.wake_prefix, "0".repeat(32)),
        l.head_wake,
        l.head_listener,
        l.grant,
    ]
}

/// In a Redis Cluster, a script or transaction can only touch keys of one slot: checks that
/// all of `sku`'s keys share one (and returns it); the error says how to make them.
pub fn check_one_slot(sku: &Sku) -> std::result::Result<u16, SlotsDiffer> {
    let keys = keys_of(sku);
    let first = key_slot(&keys[0]);
    match keys.iter().find(|k| key_slot(k) != first) {
        None => Ok(first),
        Some(other) => Err(SlotsDiffer {
            sku: sku.clone(),
            first_key: keys[0].clone(),
            first_slot: first,
            other_key: other.clone(),
            other_slot: key_slot(other),
        }),
    }
}

/// Two keys of one SKU in different Redis Cluster slots, so that no script can touch both:
/// the SKU needs a hash tag.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "in a Redis Cluster the keys of '{sku}' fall in different slots ('{first_key}' in slot {first_slot}, '{other_key}' in slot {other_slot}); write the SKU with a hash tag, '{{{sku}}}', so that all its keys share one slot"
)]
pub struct SlotsDiffer {
    /// The SKU.
    pub sku: Sku,
    /// Its first key.
    pub first_key: String,
    /// The slot of `first_key`.
    pub first_slot: u16,
    /// The first of its keys in another slot.
    pub other_key: String,
    /// The slot of `other_key`.
    pub other_slot: u16,
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the
/// text between the first `{` and the next `}`, when not empty), modulo 16384.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16(hashed) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("item:stock:{sku_886}"), key_slot("sku_886"));
        assert_eq!(key_slot("a{}b"), crc16(b"a{}b") % 16384);
    }

    #[test]
    fn lock_keys_follow_the_seed() {
        let k = LockKeys::new("sku_886");
        assert_eq!(k.lock, "dist_lock:sku_886");
        assert_eq!(k.fence, "dist_lock_fence:sku_886");
        for key in [&k.fence, &k.queue, &k.deadlines] {
            assert!(key.ends_with(":sku_886"), "{key}");
        }
        assert_eq!(k.wake_prefix, "dist_lock_wake:sku_886:");
    }

    #[test]
    fn every_key_contains_the_sku_verbatim() {
        let sku: Sku = "{t}".parse().unwrap();
        let k = StockKeys::new(&sku);
        for key in [
            &k.stock,
            &k.ledger,
            &k.seeded,
            &k.buyers,
            &k.sold,
            &k.events,
            &k.dead_letters,
        ] {
            assert!(key.ends_with(":{t}"), "{key}");
        }
        assert_eq!(k.stock, "item:stock:{t}");
    }

    #[test]
    fn an_untagged_sku_names_two_keys_in_different_slots() {
        let sku: Sku = "sku_886".parse().unwrap();
        let err = check_one_slot(&sku).unwrap_err();
        assert_eq!(err.sku, sku);
        assert_eq!(err.first_slot, key_slot(&err.first_key));
        assert_eq!(err.other_slot, key_slot(&err.other_key));
        assert_ne!(err.first_slot, err.other_slot);
        assert!(keys_of(&sku).contains(&err.other_key), "{err}");

        let tagged: Sku = "{sku_886}".parse().unwrap();
        assert_eq!(check_one_slot(&tagged), Ok(key_slot("sku_886")));
    }
}
