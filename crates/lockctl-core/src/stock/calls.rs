//! Each stock script's KEYS and ARGV by name: the one code that knows their positions (the
//! scripts' `lua/*.lua` files bind them to the same names in the same order), and each
//! script's answers parsed into enums, an answer no script gives being an error that names it.

use redis::{Cmd, ScriptInvocation};

use super::script::{BATCH, DEDUCT, WRITE_LUA};
use crate::conn::evalsha;
use crate::keys::StockKeys;

/// One purchase as the deduct script (`lua/deduct.lua`, also the fenced release's body) takes it.
pub(super) struct Deduct<'a> {
    /// The SKU's stock keys (STOCK, LEDGER, BUYERS, SOLD, EVENTS).
    pub keys: &'a StockKeys,
    /// LOCK: the SKU's lock key.
    pub lock: &'a str,
    /// HOLDER: the holder's token, '' when the buyer holds no lock (it then yields to one).
    pub holder: &'a str,
    /// QTY.
    pub qty: u64,
    /// ORDER: the order id.
    pub order: &'a str,
    /// USER and LIMIT: the per-user limit and whom it counts, when one applies.
    pub user_limit: Option<(&'a str, u64)>,
    /// QUEUE: append the order to the events stream.
    pub queue: bool,
    /// FENCE: the fencing token of the holder's grant.
    pub fence: Option<u64>,
    /// SKU.
    pub sku: &'a str,
}

impl Deduct<'_> {
    /// KEYS, in the script's order.
    pub fn keys(&self) -> [&str; 6] {
        let k = self.keys;
        [
            &k.stock, &k.ledger, self.lock, &k.buyers, &k.sold, &k.events,
        ]
    }

    /// ARGV, in the script's order.
    pub fn args(&self) -> [String; 8] {
        let (user, limit) = self.user_limit.unwrap_or(("", 0));
        [
            self.holder.to_string(),
            self.qty.to_string(),
            self.order.to_string(),
            user.to_string(),
            limit.to_string(),
            flag(self.queue),
            self.fence.map_or(String::new(), |f| f.to_string()),
            self.sku.to_string(),
        ]
    }

    /// The deduct script's call as one EVALSHA command (no fallback: load it first).
    pub fn command(&self) -> Cmd {
        let mut cmd = evalsha(&DEDUCT, &self.keys());
        cmd.arg(&self.args());
        cmd
    }
}

/// The tutorial's write (`lua/write.lua`), decided beforehand by a read.
pub(super) struct Write<'a> {
    /// The SKU's stock keys (STOCK, LEDGER, SOLD, BUYERS, EVENTS).
    pub keys: &'a StockKeys,
    /// QTY.
    pub qty: u64,
    /// ORDER: the order id.
    pub order: &'a str,
    /// USER: whom the per-user total counts, when a limit applies.
    pub user: Option<&'a str>,
    /// QUEUE: append the order to the events stream.
    pub queue: bool,
    /// FENCE: the fencing token of the holder's grant.
    pub fence: Option<u64>,
    /// SKU.
    pub sku: &'a str,
}

impl Write<'_> {
    /// KEYS, in the script's order.
    pub fn keys(&self) -> [&str; 5] {
        let k = self.keys;
        [&k.stock, &k.ledger, &k.sold, &k.buyers, &k.events]
    }

    /// ARGV, in the script's order.
    pub fn args(&self) -> [String; 6] {
        [
            self.qty.to_string(),
            self.order.to_string(),
            self.user.unwrap_or("").to_string(),
            flag(self.queue),
            self.fence.map_or(String::new(), |f| f.to_string()),
            self.sku.to_string(),
        ]
    }

    /// The write as a whole-text EVAL, for a MULTI (where EVALSHA's fallback cannot run).
    pub fn eval(&self) -> Cmd {
        let keys = self.keys();
        let mut eval = redis::cmd("EVAL");
        eval.arg(WRITE_LUA)
            .arg(keys.len())
            .arg(&keys)
            .arg(&self.args());
        eval
    }
}

/// A batch of purchases as group commit's script (`lua/batch.lua`) takes them.
pub(super) struct Batch<'a> {
    /// The SKU's stock keys (STOCK, LEDGER, BUYERS, SOLD, EVENTS).
    pub keys: &'a StockKeys,
    /// LOCK: the SKU's lock key.
    pub lock: &'a str,
    /// QTY.
    pub qty: u64,
    /// LIMIT: the per-user limit (0 when none).
    pub limit: u64,
    /// QUEUE: append bought orders to the events stream.
    pub queue: bool,
    /// SKU.
    pub sku: &'a str,
}

impl Batch<'_> {
    /// The call: KEYS as the deduct script's, then QTY, LIMIT, QUEUE, SKU, then each
    /// purchase's order id and user ('' when no limit counts it).
    pub fn invocation(&self, purchases: &[(&str, &str)]) -> ScriptInvocation<'static> {
        let k = self.keys;
        let mut inv = BATCH.prepare_invoke();
        inv.key(&[
            &k.stock, &k.ledger, self.lock, &k.buyers, &k.sold, &k.events,
        ])
        .arg(self.qty)
        .arg(self.limit)
        .arg(flag(self.queue))
        .arg(self.sku);
        for (order, user) in purchases {
            inv.arg(order).arg(user);
        }
        inv
    }
}

/// A script's '1' for yes, '' for no.
fn flag(on: bool) -> String {
    if on { "1" } else { "" }.to_string()
}

/// An answer no script of this version gives: the server runs another script under the same
/// name, or this code and its scripts disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {script} script answered '{answer}'")]
pub(super) struct UnknownAnswer {
    /// Which script.
    pub script: &'static str,
    /// What it answered.
    pub answer: String,
}

/// What the deduct script (and each purchase of a batch) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decided {
    /// `bought`: deducted; the stock left.
    Bought { left: i64 },
    /// `replayed`: the order id bought before: its units, and the stock now (as the key holds it).
    Replayed { units: i64, now: String },
    /// `sold_out`: the stock there was.
    SoldOut { stock: i64 },
    /// `limit`: the units this user already has.
    Limit { had: i64 },
    /// `busy`: another holds the lock (a lockless purchase).
    Busy,
    /// `lease_lost`: the lock no longer holds the holder's token.
    LeaseLost,
    /// `unseeded`: there is no stock key.
    Unseeded,
    /// `bad_stock`: what the stock key holds.
    BadStock(String),
    /// `bad_data`: which key holds what.
    BadData(String),
}

impl Decided {
    /// The deduct script's `{status, n, text}`.
    pub fn parse((status, n, text): (String, i64, String)) -> Result<Decided, UnknownAnswer> {
        Ok(match status.as_str() {
            "bought" => Decided::Bought { left: n },
            "replayed" => Decided::Replayed {
                units: n,
                now: text,
            },
            "sold_out" => Decided::SoldOut { stock: n },
            "limit" => Decided::Limit { had: n },
            "busy" => Decided::Busy,
            "lease_lost" => Decided::LeaseLost,
            "unseeded" => Decided::Unseeded,
            "bad_stock" => Decided::BadStock(text),
            "bad_data" => Decided::BadData(text),
            _ => return Err(unknown("deduct", status)),
        })
    }

    /// One answer of the batch script, `<code><n>:<text>`.
    pub fn parse_batch(answer: &str) -> Result<Decided, UnknownAnswer> {
        let parsed = answer.split_at_checked(1).and_then(|(code, rest)| {
            let (n, text) = rest.split_once(':')?;
            let n: i64 = n.parse().ok()?;
            let text = text.to_string();
            Some(match code {
                "b" => Decided::Bought { left: n },
                "r" => Decided::Replayed {
                    units: n,
                    now: text,
                },
                "s" => Decided::SoldOut { stock: n },
                "l" => Decided::Limit { had: n },
                "y" => Decided::Busy,
                "u" => Decided::Unseeded,
                "x" => Decided::BadStock(text),
                "d" => Decided::BadData(text),
                _ => return None,
            })
        });
        parsed.ok_or_else(|| unknown("batch", answer.to_string()))
    }
}

/// What the write script (`lua/write.lua`) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Written {
    /// Deducted: the stock left.
    Left(i64),
    /// `unseeded`.
    Unseeded,
    /// `bad_stock`: what the stock key holds.
    BadStock(String),
    /// `bad_data`: which key holds what.
    BadData(String),
}

impl Written {
    /// The write script's reply (an error reply is the caller's to map first).
    pub fn parse(reply: &redis::Value) -> Result<Written, UnknownAnswer> {
        use redis::Value;
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        match reply {
            Value::Int(left) => Ok(Written::Left(*left)),
            Value::Array(a) => match text(a.first()).as_str() {
                "unseeded" => Ok(Written::Unseeded),
                "bad_stock" => Ok(Written::BadStock(text(a.get(1)))),
                "bad_data" => Ok(Written::BadData(text(a.get(1)))),
                other => Err(unknown("write", other.to_string())),
            },
            other => Err(unknown("write", format!("{other:?}"))),
        }
    }
}

fn unknown(script: &'static str, answer: String) -> UnknownAnswer {
    UnknownAnswer { script, answer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_batch_code_reads_as_the_deduct_answer_it_stands_for() {
        let pairs = [
            ("b7:", ("bought", 7, "")),
            ("r2:5", ("replayed", 2, "5")),
            ("s1:", ("sold_out", 1, "")),
            ("l3:", ("limit", 3, "")),
            ("y0:", ("busy", 0, "")),
            ("u0:", ("unseeded", 0, "")),
            ("x0:'abc'", ("bad_stock", 0, "'abc'")),
            ("d0:k is a list", ("bad_data", 0, "k is a list")),
        ];
        for (batch, (status, n, text)) in pairs {
            let one = Decided::parse((status.into(), n, text.into()));
            assert_eq!(Decided::parse_batch(batch), one, "{batch}");
            assert!(one.is_ok(), "{status}");
        }
    }

    #[test]
    fn an_answer_no_script_gives_is_an_error_naming_it() {
        let e = Decided::parse(("bougth".into(), 1, String::new())).unwrap_err();
        assert_eq!(e.to_string(), "the deduct script answered 'bougth'");
        let e = Decided::parse_batch("q1:").unwrap_err();
        assert_eq!(e.to_string(), "the batch script answered 'q1:'");
        let e = Written::parse(&redis::Value::Array(vec![redis::Value::SimpleString(
            "sold".into(),
        )]))
        .unwrap_err();
        assert_eq!(e.answer, "sold");
    }
}
