//! What the purchase scripts answer, turned into outcomes and errors.

use super::Buyer;
use crate::conn::Endpoint;
use crate::error::{Error, Result};
use crate::stock::calls::{Decided, UnknownAnswer, Written};
use crate::stock::{Buy, Purchase};

impl Buyer {
    /// What the write script answered.
    pub(super) fn bought(&self, conn: &Endpoint<'_>, replies: &[redis::Value]) -> Result<Buy> {
        let reply = match replies.first() {
            Some(redis::Value::ServerError(e)) => return Err(conn.map_err(e.clone().into())),
            Some(reply) => reply,
            None => return Err(conn.unexpected("the write script answered nothing".into())),
        };
        match Written::parse(reply).map_err(|e| unknown(conn, e))? {
            Written::Left(left) => Ok(Buy::Bought { remaining: left }),
            Written::Unseeded => Err(self.unseeded()),
            Written::BadStock(v) => Err(self.bad_stock(v)),
            Written::BadData(why) => Err(self.bad_data(why)),
        }
    }

    /// What the deduct script's `{status, n, text}` reply means.
    pub(super) fn deduct_outcome(
        &self,
        conn: &Endpoint<'_>,
        reply: (String, i64, String),
        limit: u64,
        p: &mut Purchase,
    ) -> Result<Buy> {
        let decided = Decided::parse(reply).map_err(|e| unknown(conn, e))?;
        self.outcome_of(decided, limit, p)
    }

    /// What one decision of the deduct or batch script means for the purchase `p`.
    pub(super) fn outcome_of(&self, decided: Decided, limit: u64, p: &mut Purchase) -> Result<Buy> {
        Ok(match decided {
            Decided::Bought { left } => Buy::Bought { remaining: left },
            Decided::Replayed { units, now } => {
                p.replayed = Some(units.max(0) as u64);
                Buy::Bought {
                    remaining: now.parse().unwrap_or(0),
                }
            }
            Decided::SoldOut { stock } => Buy::SoldOut { remaining: stock },
            Decided::Limit { had } => Buy::LimitReached {
                bought: had.max(0) as u64,
                limit,
            },
            Decided::Busy => Buy::Busy,
            Decided::LeaseLost => Buy::LeaseLost,
            Decided::Unseeded => return Err(self.unseeded()),
            Decided::BadStock(v) => return Err(self.bad_stock(v)),
            Decided::BadData(why) => return Err(self.bad_data(why)),
        })
    }

    pub(super) fn unseeded(&self) -> Error {
        Error::Unseeded {
            sku: self.sku.to_string(),
        }
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

/// A script's answer this code does not know, as the connection's protocol error.
pub(super) fn unknown(conn: &Endpoint<'_>, e: UnknownAnswer) -> Error {
    conn.unexpected(e.to_string())
}
