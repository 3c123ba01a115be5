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

    /// Bucket `tag` of this SKU (see [`crate::stock::buckets`]): `{tag}` then the SKU, so
    /// that every key of the bucket contains the SKU verbatim and falls in the slot of `tag`.
    /// Not held to [`MAX_SKU_BYTES`]: the tag is lockctl's, a few bytes.
    pub(crate) fn bucket(&self, tag: &str) -> Sku {
        Sku(format!("{{{tag}}}{}", self.0))
    }
}

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Sku {
    type Err = BadName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_name("a SKU", "sku_886", s).map(|()| Sku(s.to_string()))
    }
}

/// The rule for every name that ends up in a key or a hash field (SKUs, order ids, user ids):
/// 1 to [`MAX_SKU_BYTES`] bytes, no whitespace, no control characters, nothing invisible.
/// `what` and `example` make the message ("a SKU", "sku_886").
pub fn check_name(what: &str, example: &str, s: &str) -> Result<(), BadName> {
    let problem = if s.is_empty() {
        NameProblem::Empty
    } else if s.len() > MAX_SKU_BYTES {
        NameProblem::TooLong { bytes: s.len() }
    } else if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        NameProblem::Blank(c)
    } else if let Some(c) = s.chars().find(|&c| is_invisible(c)) {
        NameProblem::Invisible(c)
    } else {
        return Ok(());
    };
    Err(BadName {
        what: what.to_string(),
        example: example.to_string(),
        name: s.to_string(),
        problem,
    })
}

/// A name refused by [`check_name`]'s rule. Its message names the value (escaped) and says
/// why, in the words of `what` and `example`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.words())]
pub struct BadName {
    /// What the name is, as the message says it: "a SKU", "an order id".
    pub what: String,
    /// A name that would do, for the message: "sku_886".
    pub example: String,
    /// The name refused, as given.
    pub name: String,
    /// Why it was refused.
    pub problem: NameProblem,
}

/// Why [`check_name`] refused a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameProblem {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_SKU_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// It contains this whitespace or control character (the first one).
    Blank(char),
    /// It contains this invisible character (the first one; see [`is_invisible`]).
    Invisible(char),
}

impl BadName {
    /// The message: the value escaped, what is wrong with it, and an example that would do.
    fn words(&self) -> String {
        let BadName {
            what,
            example,
            name,
            problem,
        } = self;
        match *problem {
            NameProblem::Empty => format!("{what} cannot be empty (e.g. {example})"),
            NameProblem::TooLong { bytes } => {
                format!("{what} is at most {MAX_SKU_BYTES} bytes; this one has {bytes}")
            }
            NameProblem::Blank(c) => format!(
                "'{}' contains {c:?}; {what} has no spaces or control characters (e.g. {example})",
                name.escape_debug()
            ),
            NameProblem::Invisible(c) => format!(
                "'{}' contains the invisible character U+{:04X}, which would make it look like \
                 another name; {what} has only visible characters (e.g. {example})",
                name.escape_debug(),
                c as u32
            ),
        }
    }
}

/// The rule for an order id (the idempotency key), wherever one comes from: the command
/// line's order id, a shop's request. [`check_name`]'s rule, said of an order id.
pub fn check_order_id(s: &str) -> Result<(), BadName> {
    check_name("an order id", "order-42", s)
}

/// The rule for a user id, as [`check_order_id`] for order ids.
pub fn check_user_id(s: &str) -> Result<(), BadName> {
    check_name("a user id", "alice", s)
}

/// Characters that print as nothing or reorder the text around them: Unicode's format
/// characters (category Cf: zero-width spaces and joiners, bidirectional controls, the byte
/// order mark, the soft hyphen, tags) and the other blanks that are not whitespace (the
/// combining grapheme joiner, Hangul fillers, variation selectors). Two names that differ only
/// by these look the same on every screen.
pub fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x0600..=0x0605 | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x2800 | 0x3164
        | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x110BD | 0x110CD
        | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
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
    fn look_alike_skus_with_invisible_characters_are_refused() {
        for c in [
            '\u{200B}',
            '\u{202E}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{2066}',
            '\u{E0041}',
        ] {
            let name = format!("sku_886{c}");
            let err = name.parse::<Sku>().unwrap_err();
            assert_eq!(err.problem, NameProblem::Invisible(c), "{err}");
            assert!(err.to_string().contains("invisible"), "{err}");
        }
        assert!("商品-é-ß".parse::<Sku>().is_ok());
    }

    #[test]
    fn empty_blank_control_and_overlong_skus_are_refused() {
        let long = "x".repeat(MAX_SKU_BYTES + 1);
        for bad in ["", " ", "a b", "a\nb", "a\tb", "\u{7}", long.as_str()] {
            assert!(bad.parse::<Sku>().is_err(), "{bad:?} was accepted");
        }
        assert!("x".repeat(MAX_SKU_BYTES).parse::<Sku>().is_ok());
    }
}
