//! The atomic strategy's purchase as one command, for a caller that drives many connections
//! from one thread (the hammer's pipelined driver, the async core).

use super::super::script::{DEDUCT, DEDUCT_LUA};
use super::Buyer;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::stock::{Buy, Purchase};

impl Buyer {
    /// The atomic strategy's purchase as one command, for a caller that drives many connections
    /// from one thread (send on each, then read each reply with [`Buyer::atomic_reply`]). Uses
    /// EVALSHA without loading: call [`Buyer::load_scripts`] first.
    pub fn atomic_command(&self, order_id: &str, user: Option<&str>) -> redis::Cmd {
        if let Some(b) = self.bucketed() {
            return b.buyers[b.map.home(user, order_id)].atomic_command(order_id, user);
        }
        self.deduct_call("", order_id, user, None).command()
    }

    /// Makes sure the server knows the atomic strategy's script.
    pub fn load_scripts(&self, conn: &mut Conn) -> Result<()> {
        let sha: String = conn.query(redis::cmd("SCRIPT").arg("LOAD").arg(DEDUCT_LUA))?;
        debug_assert_eq!(sha, DEDUCT.get_hash());
        Ok(())
    }

    /// The purchase an [`Buyer::atomic_command`] reply stands for, counted in the metrics like
    /// [`Buyer::buy`]. `Ok(None)` when the purchase must be made again the ordinary way: the
    /// server had lost the script (a flush or a restart), or the lock was held and this buyer
    /// has a wait to spend.
    pub fn atomic_reply(
        &self,
        conn: &Conn,
        reply: Result<(String, i64, String)>,
        order_id: &str,
        user: Option<&str>,
    ) -> Result<Option<Purchase>> {
        let wait = !self.options.lock.wait.is_zero();
        self.atomic_answer(conn, reply, order_id, user, wait)
    }

    /// [`Buyer::atomic_reply`], with a busy answer given back as `Ok(None)` only when
    /// `busy_again` (the caller tries busy purchases again itself otherwise).
    pub(in crate::stock) fn atomic_answer(
        &self,
        conn: &Conn,
        reply: Result<(String, i64, String)>,
        order_id: &str,
        user: Option<&str>,
        busy_again: bool,
    ) -> Result<Option<Purchase>> {
        let mut p = self.new_purchase(order_id);
        let limit = user.zip(self.options.limit).map_or(0, |(_, l)| l);
        let result = match reply {
            Err(Error::Redis { code: Some(c), .. }) if c == "NOSCRIPT" => return Ok(None),
            Err(e) => Err(e),
            Ok(r) => self.deduct_outcome(conn, r, limit, &mut p),
        };
        // The ordinary way finds the SKU's buckets, borrows for a bucket that is short, and
        // waits for the replicas asked for: none of which one command could do.
        let bucketed = !self.in_bucket && self.bucketed().is_some();
        match (&result, bucketed) {
            (Err(Error::Unseeded { .. }), _) if !self.in_bucket => return Ok(None),
            (Ok(Buy::SoldOut { .. }), true) if p.replayed.is_none() => return Ok(None),
            (Ok(Buy::Bought { .. }), _) if self.options.require_replicas > 0 => return Ok(None),
            _ => {}
        }
        match result {
            Ok(Buy::Busy) if busy_again => Ok(None),
            Ok(outcome) => {
                p.outcome = outcome;
                self.meter(Ok(&outcome));
                Ok(Some(p))
            }
            Err(e) => {
                self.meter(Err(()));
                Err(e)
            }
        }
    }
}
