//! SKU names, checked once at the boundary.
//!
//! A SKU becomes part of several Redis keys, always verbatim, so that a SKU written with a hash
//! tag (`{sku_886}`) keeps every key in one Redis Cluster slot. Keys are always passed to Redis
//! as arguments (and to scripts as `KEYS`), never spliced into Lua, so the only reasons to refuse
//! a SKU are the operator's: invisible characters that make two SKUs look alike, and names too
//! long to be a product code.

use std::fmt;
use std::str::FromStr;

/// The longest SKU (or order id, or user id) accepted, in bytes.
pub const MAX_SKU_BYTES: usize = 200;

/// A validated SKU: 1 to [`MAX_SKU_BYTES`] bytes of UTF-8 with no whitespace and no control
/// characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sku(String);

impl Sku {
    /// The SKU as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Sku {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_name("a SKU", "sku_886", s).map(|()| Sku(s.to_string()))
    }
}

/// The rule for every name that ends up in a key or a hash field (SKUs, order ids, user ids):
/// 1 to [`MAX_SKU_BYTES`] bytes, no whitespace, no control characters. `what` and `example`
/// make the message ("a SKU", "sku_886").
pub fn check_name(what: &str, example: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} cannot be empty (e.g. {example})"));
    }
    if s.len() > MAX_SKU_BYTES {
        return Err(format!(
            "{what} is at most {MAX_SKU_BYTES} bytes; this one has {}",
            s.len()
        ));
    }
    if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "'{}' contains {:?}; {what} has no spaces or control characters (e.g. {example})",
            s.escape_debug(),
            c
        ));
    }
    Ok(())
}

/// The stock module's keys of one SKU. Each prefix differs from the others before the SKU
/// starts, so no SKU's key can equal another SKU's key of a different kind.
#[derive(Clone, Debug)]
pub struct StockKeys {
    /// `item:stock:<SKU>`: the counter, a string integer, as in the seed.
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
}

impl StockKeys {
    pub fn new(sku: &Sku) -> StockKeys {
        let s = sku.as_str();
        StockKeys {
            stock: format!("item:stock:{s}"),
            ledger: format!("item:orders:{s}"),
            seeded: format!("item:seeded:{s}"),
            buyers: format!("item:buyers:{s}"),
            sold: format!("item:sold:{s}"),
        }
    }
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
    fn ordinary_and_hash_tagged_skus_are_accepted() {
        for ok in ["sku_886", "{sku_886}", "a:b/c-d.e", "商品-1"] {
            assert_eq!(ok.parse::<Sku>().unwrap().as_str(), ok);
        }
    }

    #[test]
    fn empty_blank_control_and_overlong_skus_are_refused() {
        let long = "x".repeat(MAX_SKU_BYTES + 1);
        for bad in ["", " ", "a b", "a\nb", "a\tb", "\u{7}", long.as_str()] {
            assert!(bad.parse::<Sku>().is_err(), "{bad:?} was accepted");
        }
        assert!("x".repeat(MAX_SKU_BYTES).parse::<Sku>().is_ok());
    }

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("item:stock:{sku_886}"), key_slot("sku_886"));
        assert_eq!(key_slot("a{}b"), crc16(b"a{}b") % 16384);
    }

    #[test]
    fn every_key_contains_the_sku_verbatim() {
        let sku: Sku = "{t}".parse().unwrap();
        let k = StockKeys::new(&sku);
        for key in [&k.stock, &k.ledger, &k.seeded, &k.buyers, &k.sold] {
            assert!(key.ends_with(":{t}"), "{key}");
        }
        assert_eq!(k.stock, "item:stock:{t}");
    }
}
