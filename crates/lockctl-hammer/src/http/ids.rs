//! What `{sku}` and `{user}` are: text (`hunt-3fa2c1-7`, `u3`), integers (services that key
//! goods and users by number) or v4 UUIDs (services that key them by uuid).
//!
//! Integers are a random block of this run's own plus the number, below 2^31 so that an
//! `INT` column (PostgreSQL's int4, MySQL's INT) takes them: two runs meet only if they drew
//! the same block of a million. UUIDs are 16 random bytes of this run's with the number mixed
//! into the last six, the version and variant bits set: each distinct, none another run's.
//! Users may instead be a list given (`--users-file`): number `n` is the list's `n mod len`-th.

use std::sync::Arc;

/// The shape of an identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdFormat {
    /// Text, as lockctl names things (the default).
    #[default]
    Text,
    /// A whole number.
    Int,
    /// A v4 UUID, in its 36-character form.
    Uuid,
}

impl IdFormat {
    /// Its name: `text`, `int`, `uuid`.
    pub fn name(self) -> &'static str {
        match self {
            IdFormat::Text => "text",
            IdFormat::Int => "int",
            IdFormat::Uuid => "uuid",
        }
    }
}

/// The first integer id of every block.
const INT_FLOOR: u64 = 1_000_000_000;
/// Ids in one block (a run's numbers go past it only after a million rounds or users).
const INT_BLOCK: u64 = 1_000;
/// Blocks to draw from: the highest id stays below 2^31 for the first 147 million numbers.
const INT_BLOCKS: u64 = 1_000_000;

/// Identities of one run: number `n` in the run's format, distinct from every other number's
/// and, with near certainty, from every other run's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    format: IdFormat,
    /// The run's first integer id.
    base: u64,
    /// The run's UUID bytes.
    key: [u8; 16],
    /// Text ids: what precedes the number (`u` for users).
    prefix: &'static str,
    /// The names given, when they are given (users from a file): they stand in for the format.
    listed: Option<Arc<[String]>>,
}

impl Ids {
    /// Users as lockctl names them by default: `u0`, `u1`, ...
    pub fn text_users() -> Ids {
        Ids::new(IdFormat::Text, "u")
    }

    /// A run's identities in `format`, text ones `prefix` then the number.
    pub fn new(format: IdFormat, prefix: &'static str) -> Ids {
        use rand::RngExt;
        let mut rng = rand::rng();
        Ids {
            format,
            base: INT_FLOOR + rng.random_range(0..INT_BLOCKS) * INT_BLOCK,
            key: rng.random(),
            prefix,
            listed: None,
        }
    }

    /// The names given, in their order (never empty: the caller checks); number `n` is the
    /// `n mod len`-th, so that a run with more users than names reuses them.
    pub fn listed(names: Vec<String>) -> Ids {
        Ids {
            listed: Some(names.into()),
            ..Ids::new(IdFormat::Text, "")
        }
    }

    /// How many names were given, when they were.
    pub fn listed_len(&self) -> Option<usize> {
        self.listed.as_ref().map(|l| l.len())
    }

    /// The format.
    pub fn format(&self) -> IdFormat {
        self.format
    }

    /// Number `n`.
    pub fn name(&self, n: u64) -> String {
        if let Some(names) = self.listed.as_ref().filter(|l| !l.is_empty()) {
            return names[(n % names.len() as u64) as usize].clone();
        }
        match self.format {
            IdFormat::Text => format!("{}{n}", self.prefix),
            IdFormat::Int => (self.base + n).to_string(),
            IdFormat::Uuid => {
                let mut b = self.key;
                for (i, byte) in n.to_be_bytes()[2..].iter().enumerate() {
                    b[10 + i] ^= byte;
                }
                uuid_v4(b)
            }
        }
    }
}

/// `bytes` as a version 4 (random) UUID: `xxxxxxxx-xxxx-4xxx-Yxxx-xxxxxxxxxxxx`.
pub fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid_text(bytes)
}

/// 16 bytes in a UUID's 36-character form, as they are.
pub fn uuid_text(bytes: [u8; 16]) -> String {
    let h = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Whether `s` has a UUID's shape (36 characters, hex digits and four dashes in place).
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_in_their_format_and_fit_an_int_column() {
        let int = Ids::new(IdFormat::Int, "u");
        let a: i64 = int.name(0).parse().unwrap();
        let b: i64 = int.name(999_999).parse().unwrap();
        assert!(a >= 1_000_000_000 && b < i64::from(i32::MAX), "{a} {b}");
        let uuid = Ids::new(IdFormat::Uuid, "u");
        let (x, y) = (uuid.name(1), uuid.name(2));
        assert!(is_uuid(&x) && is_uuid(&y) && x != y, "{x} {y}");
        assert_eq!(&x[14..15], "4");
        assert!("89ab".contains(&x[19..20]), "{x}");
        assert_ne!(Ids::new(IdFormat::Uuid, "u").name(1), x);
        assert_eq!(Ids::text_users().name(3), "u3");
        assert!(!is_uuid("hunt-ab12cd-1"));
    }
}
