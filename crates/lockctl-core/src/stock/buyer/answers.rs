//! What the purchase scripts answer, turned into outcomes and errors.

use super::Buyer;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::stock::{Buy, Purchase};

impl Buyer {
    /// What the write script answered.
    pub(super) fn bought(&self, conn: &Conn, replies: &[redis::Value]) -> Result<Buy> {
        use redis::Value;
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        match replies.first() {
            Some(Value::Int(left)) => Ok(Buy::Bought { remaining: *left }),
            Some(Value::Array(a)) => match text(a.first()).as_str() {
                "unseeded" => Err(Error::Unseeded {
                    sku: self.sku.to_string(),
                }),
                "bad_stock" => Err(self.bad_stock(text(a.get(1)))),
                "bad_data" => Err(self.bad_data(text(a.get(1)))),
                other => Err(conn.unexpected(format!("the write script answered '{other}'"))),
            },
            Some(Value::ServerError(e)) => Err(conn.map_err(e.clone().into())),
            other => Err(conn.unexpected(format!("the write script answered {other:?}"))),
        }
    }

    /// What the deduct script's `{status, n, text}` reply means.
    pub(super) fn deduct_outcome(
        &self,
        conn: &Conn,
        (status, n, text): (String, i64, String),
        limit: u64,
        p: &mut Purchase,
    ) -> Result<Buy> {
        Ok(match status.as_str() {
            "bought" => Buy::Bought { remaining: n },
            "replayed" => {
                p.replayed = Some(n.max(0) as u64);
                Buy::Bought {
                    remaining: text.parse().unwrap_or(0),
                }
            }
            "sold_out" => Buy::SoldOut { remaining: n },
            "limit" => Buy::LimitReached {
                bought: n.max(0) as u64,
                limit,
            },
            "busy" => Buy::Busy,
            "lease_lost" => Buy::LeaseLost,
            "unseeded" => {
                return Err(Error::Unseeded {
                    sku: self.sku.to_string(),
                });
            }
            "bad_stock" => return Err(self.bad_stock(text)),
            "bad_data" => return Err(self.bad_data(text)),
            other => return Err(conn.unexpected(format!("the deduct script answered '{other}'"))),
        })
    }

    pub(super) fn bad_data(&self, reason: String) -> Error {
        Error::BadData {
            sku: self.sku.to_string(),
            reason,
        }
    }

    pub(super) fn bad_stock(&self, value: String) -> Error {
        Error::BadStock {
            sku: self.sku.to_string(),
            key: self.keys.stock.clone(),
            value,
        }
    }
}
