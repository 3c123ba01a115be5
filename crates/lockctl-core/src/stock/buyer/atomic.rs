//! The atomic strategy's purchase, sans I/O: [`Buyer::atomic_command`] builds the one script
//! call, and [`Buyer::atomic_next`] reads its reply into what happens next (decided, send
//! again after a pause, load the script first). No transport decides anything: the blocking
//! one (`Buyer::buy` on a [`Conn`]), the pipelined ones (the hammer's driver, the batcher's
//! committers) and the native async one ([`crate::aio`]) send what the first gives and do what
//! the second says, so each outcome is decided in one place for all of them.

use std::time::{Duration, Instant};

use super::super::script::{DEDUCT, DEDUCT_LUA};
use super::{Buyer, lockless::busy_pause};
use crate::conn::{Conn, unexpected};
use crate::error::{Error, Result};
use crate::stock::calls::Decided;
use crate::stock::{Buy, Purchase};

/// How many times one purchase loads the script after the server said it had lost it, before
/// the `NOSCRIPT` is its answer: a cache flushed again between each load and its use is a
/// server being reset in a loop, not a purchase to retry for ever.
const MAX_LOADS: u32 = 4;

/// One atomic purchase under way: what [`Buyer::atomic_next`] knows of it between replies.
#[derive(Clone, Debug)]
pub struct AtomicAttempt {
    order_id: String,
    user: Option<String>,
    /// Until when a purchase that found the lock held may try again (the lock's wait,
    /// `LockOptions::wait`, counted from the purchase's start).
    wait_until: Instant,
    /// Scripts loaded for it so far.
    loads: u32,
}

impl AtomicAttempt {
    /// The order id.
    pub fn order_id(&self) -> &str {
        &self.order_id
    }

    /// The user, when the per-user limit counts one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
}

/// What an atomic purchase does next, as [`Buyer::atomic_next`] reads its last reply.
#[derive(Debug)]
pub enum AtomicNext {
    /// Decided: the purchase, or why it failed. Not yet counted in the metrics: the caller
    /// that answers it counts it once.
    Done(Result<Purchase>),
    /// Another client holds the lock and this purchase's wait lasts: send
    /// [`Buyer::atomic_command`] again after this pause.
    Again(Duration),
    /// The server does not know the script (a flush, a restart, a failover): send
    /// [`Buyer::load_command`], then the purchase again. Nothing was deducted.
    Load,
}

impl Buyer {
    /// The atomic strategy's purchase as one command, EVALSHA of the deduct script, for any
    /// transport: send it, and give its reply to [`Buyer::atomic_next`]. A bucketed SKU's
    /// purchase goes to the buyer's home bucket.
    pub fn atomic_command(&self, order_id: &str, user: Option<&str>) -> redis::Cmd {
        if let Some(b) = self.bucketed() {
            return b.buyers[b.map.home(user, order_id)].atomic_command(order_id, user);
        }
        self.deduct_call("", order_id, user, None).command()
    }

    /// `SCRIPT LOAD` of the deduct script, for a transport told [`AtomicNext::Load`].
    pub fn load_command() -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(DEDUCT_LUA);
        cmd
    }

    /// Makes sure the server knows the atomic strategy's script.
    pub fn load_scripts(&self, conn: &mut Conn) -> Result<()> {
        let sha: String = conn.query(&Buyer::load_command())?;
        debug_assert_eq!(sha, DEDUCT.get_hash());
        Ok(())
    }

    /// A new atomic purchase of `order_id` (by `user`, when the per-user limit applies),
    /// begun at `started`: a lock held by another client is waited for until the lock's wait,
    /// counted from then, is spent.
    pub fn atomic_attempt(
        &self,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> AtomicAttempt {
        AtomicAttempt {
            order_id: order_id.to_string(),
            user: user.map(str::to_string),
            wait_until: started + self.options.lock.wait,
            loads: 0,
        }
    }

    /// What the reply to [`Buyer::atomic_command`] means for `attempt`: the one decision of
    /// every transport. `reply` is the transport's own: the script's `{status, n, text}`, or
    /// the call's failure already in the library's terms (a `NOSCRIPT` among them).
    pub fn atomic_next(
        &self,
        attempt: &mut AtomicAttempt,
        reply: Result<redis::Value>,
    ) -> AtomicNext {
        let reply = match reply {
            Err(Error::Redis { code: Some(c), .. })
                if c == "NOSCRIPT" && attempt.loads < MAX_LOADS =>
            {
                attempt.loads += 1;
                return AtomicNext::Load;
            }
            Err(e) => return AtomicNext::Done(Err(e)),
            Ok(v) => v,
        };
        let mut p = self.new_purchase(&attempt.order_id);
        let limit = attempt.user.as_ref().and(self.options.limit).unwrap_or(0);
        let decided = match self.decided_reply(reply) {
            Ok(d) => d,
            Err(e) => return AtomicNext::Done(Err(e)),
        };
        match self.outcome_of(decided, limit, &mut p) {
            Ok(Buy::Busy) => {
                let left = attempt.wait_until.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    return AtomicNext::Again(busy_pause().min(left));
                }
                p.outcome = Buy::Busy;
                AtomicNext::Done(Ok(p))
            }
            Ok(outcome) => {
                p.outcome = outcome;
                AtomicNext::Done(Ok(p))
            }
            Err(e) => AtomicNext::Done(Err(e)),
        }
    }

    /// The deduct script's reply as a decision; a reply of another shape is the server's
    /// protocol error, naming it.
    fn decided_reply(&self, reply: redis::Value) -> Result<Decided> {
        let addr = self.lock.target().addr();
        let shown = format!("{reply:?}");
        let triple: (String, i64, String) = redis::FromRedisValue::from_redis_value(reply)
            .map_err(|_| unexpected(addr, format!("the deduct script answered {shown}")))?;
        Decided::parse(triple).map_err(|e| unexpected(addr, e.to_string()))
    }

    /// Whether a purchase a native transport decided (the atomic one of
    /// [`Buyer::atomic_next`], or a lock strategy's on the async lock) must be made again the
    /// whole way ([`Buyer::buy_since`]): that way finds the SKU's buckets (its own stock key is
    /// missing), borrows for a bucket that is short, and waits for the replicas asked for,
    /// none of which the native transport does. Only answers that wrote nothing are made
    /// again (unseeded, sold out at a SKU found bucketed since), and a bought one when
    /// replicas are asked for, which only `atomic` sends this way (it is idempotent by its
    /// order id, so making it again never deducts twice).
    pub fn needs_whole_path(&self, answer: &Result<Purchase>) -> bool {
        let bucketed = !self.in_bucket && self.bucketed().is_some();
        match answer {
            Err(Error::Unseeded { .. }) => !self.in_bucket,
            Ok(p) => match p.outcome {
                Buy::SoldOut { .. } => bucketed && p.replayed.is_none(),
                Buy::Bought { .. } => self.options.require_replicas > 0,
                _ => false,
            },
            Err(_) => false,
        }
    }

    /// The blocking transport of an atomic purchase: the command on `conn`, again while
    /// [`Buyer::atomic_next`] says so.
    pub(super) fn atomic_on(
        &self,
        conn: &mut Conn,
        mut attempt: AtomicAttempt,
    ) -> Result<Purchase> {
        let cmd = self.atomic_command(&attempt.order_id, attempt.user.as_deref());
        loop {
            let reply = conn.query::<redis::Value>(&cmd);
            match self.atomic_next(&mut attempt, reply) {
                AtomicNext::Done(answer) => return answer,
                AtomicNext::Again(pause) => std::thread::sleep(pause),
                AtomicNext::Load => self.load_scripts(conn)?,
            }
        }
    }

    /// The purchase an [`Buyer::atomic_command`] reply (sent on `conn`, pipelined) stands for,
    /// counted in the metrics like [`Buyer::buy`]. `Ok(None)` when the purchase must be made
    /// again the ordinary way: the server had lost the script (a flush or a restart), the lock
    /// was held and this buyer has a wait to spend, or [`Buyer::needs_whole_path`].
    pub fn atomic_reply(
        &self,
        _conn: &Conn,
        reply: Result<(String, i64, String)>,
        order_id: &str,
        user: Option<&str>,
    ) -> Result<Option<Purchase>> {
        self.atomic_answer(reply, order_id, user, true)
    }

    /// [`Buyer::atomic_reply`], with a busy answer given back as `Ok(None)` only when
    /// `busy_again` (the caller tries busy purchases again itself otherwise).
    pub(in crate::stock) fn atomic_answer(
        &self,
        reply: Result<(String, i64, String)>,
        order_id: &str,
        user: Option<&str>,
        busy_again: bool,
    ) -> Result<Option<Purchase>> {
        let mut attempt = self.atomic_attempt(order_id, user, Instant::now());
        if !busy_again {
            attempt.wait_until = Instant::now();
        }
        let reply = reply.map(|(status, n, text)| {
            redis::Value::Array(vec![
                redis::Value::BulkString(status.into_bytes()),
                redis::Value::Int(n),
                redis::Value::BulkString(text.into_bytes()),
            ])
        });
        let answer = match self.atomic_next(&mut attempt, reply) {
            AtomicNext::Done(answer) => answer,
            AtomicNext::Again(_) | AtomicNext::Load => return Ok(None),
        };
        if self.needs_whole_path(&answer) {
            return Ok(None);
        }
        self.meter(answer.as_ref().map(|p| &p.outcome).map_err(|_| ()));
        answer.map(Some)
    }

    /// Whether the caller gave work to run inside each purchase ([`Buyer::with_work`]): a
    /// blocking call, which an async transport must not run on its task.
    #[cfg(feature = "tokio")]
    pub(crate) fn has_work(&self) -> bool {
        self.work.is_some()
    }

    /// Counts one answer in the target's metrics, for a transport that answers on its own.
    #[cfg(feature = "tokio")]
    pub(crate) fn metered(&self, answer: &Result<Purchase>) {
        self.meter(answer.as_ref().map(|p| &p.outcome).map_err(|_| ()));
    }
}

#[cfg(test)]
mod tests {
    //! The sans-IO purchase without a server: commands built and replies read, as values.

    use std::time::{Duration, Instant};

    use redis::Value;

    use super::*;
    use crate::conn::{ConnectOptions, Target};
    use crate::lock::LockOptions;
    use crate::stock::{BuyOptions, Strategy};

    /// A buyer of `sku_1` at an address nothing is asked of: building and reading need no
    /// server.
    fn buyer(options: BuyOptions) -> Buyer {
        let target = Target::open("redis://127.0.0.1:1", ConnectOptions::default()).unwrap();
        Buyer::new(&target, &"sku_1".parse().unwrap(), options)
    }

    fn atomic(wait_ms: u64, limit: Option<u64>) -> BuyOptions {
        BuyOptions {
            strategy: Strategy::Atomic,
            lock: LockOptions {
                wait: Duration::from_millis(wait_ms),
                ..LockOptions::default()
            },
            limit,
            ..BuyOptions::default()
        }
    }

    fn reply(status: &str, n: i64, text: &str) -> Result<Value> {
        Ok(Value::Array(vec![
            Value::BulkString(status.into()),
            Value::Int(n),
            Value::BulkString(text.into()),
        ]))
    }

    fn done(next: AtomicNext) -> Result<Purchase> {
        match next {
            AtomicNext::Done(answer) => answer,
            other => panic!("not decided: {other:?}"),
        }
    }

    fn noscript() -> Error {
        Error::Redis {
            addr: "127.0.0.1:1".into(),
            reason: "NOSCRIPT No matching script".into(),
            code: Some("NOSCRIPT".into()),
            indeterminate: false,
            hint: None,
        }
    }

    /// The command's arguments as text, after EVALSHA.
    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn the_command_is_evalsha_of_the_deduct_script_with_the_skus_keys_and_the_order() {
        let b = buyer(atomic(0, Some(2)));
        let a = args(&b.atomic_command("o-1", Some("u7")));
        assert_eq!(a[0], "EVALSHA");
        assert_eq!(a[1], DEDUCT.get_hash());
        assert_eq!(a[2], "6");
        assert_eq!(a[3], "item:stock:sku_1");
        assert_eq!(a[5], "dist_lock:sku_1");
        // HOLDER '' (no lock held), QTY, ORDER, USER, LIMIT, QUEUE, FENCE, SKU.
        assert_eq!(&a[9..], ["", "1", "o-1", "u7", "2", "", "", "sku_1"]);
        // Without a limit, no user is counted.
        let a = args(&buyer(atomic(0, None)).atomic_command("o-1", Some("u7")));
        assert_eq!(&a[9..], ["", "1", "o-1", "", "0", "", "", "sku_1"]);
    }

    #[test]
    fn each_answer_of_the_script_is_read_into_its_outcome() {
        let b = buyer(atomic(0, Some(3)));
        let mut at = b.atomic_attempt("o-1", Some("u1"), Instant::now());
        let p = done(b.atomic_next(&mut at, reply("bought", 9, ""))).unwrap();
        assert_eq!(
            (p.outcome, p.replayed),
            (Buy::Bought { remaining: 9 }, None)
        );
        assert_eq!(p.order_id, "o-1");
        let p = done(b.atomic_next(&mut at, reply("replayed", 1, "4"))).unwrap();
        assert_eq!(
            (p.outcome, p.replayed),
            (Buy::Bought { remaining: 4 }, Some(1))
        );
        let p = done(b.atomic_next(&mut at, reply("sold_out", 0, ""))).unwrap();
        assert_eq!(p.outcome, Buy::SoldOut { remaining: 0 });
        let p = done(b.atomic_next(&mut at, reply("limit", 3, ""))).unwrap();
        assert_eq!(
            p.outcome,
            Buy::LimitReached {
                bought: 3,
                limit: 3
            }
        );
        let e = done(b.atomic_next(&mut at, reply("unseeded", 0, ""))).unwrap_err();
        assert!(
            matches!(e, Error::Unseeded { ref sku } if sku == "sku_1"),
            "{e:?}"
        );
        let e = done(b.atomic_next(&mut at, reply("bad_stock", 0, "'abc'"))).unwrap_err();
        assert!(
            matches!(e, Error::BadStock { ref value, .. } if value == "'abc'"),
            "{e:?}"
        );
    }

    #[test]
    fn an_answer_no_script_gives_is_the_servers_error_naming_it() {
        let b = buyer(atomic(0, None));
        let mut at = b.atomic_attempt("o-1", None, Instant::now());
        let e = done(b.atomic_next(&mut at, reply("bougth", 1, ""))).unwrap_err();
        assert!(e.to_string().contains("answered 'bougth'"), "{e}");
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
        let e = done(b.atomic_next(&mut at, Ok(Value::Int(1)))).unwrap_err();
        assert!(e.to_string().contains("the deduct script answered"), "{e}");
    }

    #[test]
    fn busy_is_tried_again_while_the_wait_lasts_and_answered_once_it_is_spent() {
        let b = buyer(atomic(60_000, None));
        let mut at = b.atomic_attempt("o-1", None, Instant::now());
        match b.atomic_next(&mut at, reply("busy", 0, "")) {
            AtomicNext::Again(pause) => assert!(pause <= Duration::from_millis(5), "{pause:?}"),
            other => panic!("{other:?}"),
        }
        let b = buyer(atomic(0, None));
        let mut at = b.atomic_attempt("o-1", None, Instant::now());
        assert_eq!(
            done(b.atomic_next(&mut at, reply("busy", 0, "")))
                .unwrap()
                .outcome,
            Buy::Busy
        );
    }

    #[test]
    fn a_lost_script_is_loaded_a_few_times_then_the_noscript_is_the_answer() {
        let b = buyer(atomic(0, None));
        let mut at = b.atomic_attempt("o-1", None, Instant::now());
        for _ in 0..MAX_LOADS {
            assert!(matches!(
                b.atomic_next(&mut at, Err(noscript())),
                AtomicNext::Load
            ));
        }
        let e = done(b.atomic_next(&mut at, Err(noscript()))).unwrap_err();
        assert!(matches!(e, Error::Redis { code: Some(ref c), .. } if c == "NOSCRIPT"));
        let args = args(&Buyer::load_command());
        assert_eq!(&args[..2], ["SCRIPT", "LOAD"]);
    }

    #[test]
    fn what_one_command_cannot_finish_is_sent_the_whole_way() {
        let b = buyer(atomic(0, None));
        let mut at = b.atomic_attempt("o-1", None, Instant::now());
        let unseeded = done(b.atomic_next(&mut at, reply("unseeded", 0, "")));
        assert!(b.needs_whole_path(&unseeded));
        let bought = done(b.atomic_next(&mut at, reply("bought", 1, "")));
        assert!(!b.needs_whole_path(&bought));
        let replicated = buyer(BuyOptions {
            require_replicas: 1,
            ..atomic(0, None)
        });
        assert!(replicated.needs_whole_path(&bought));
    }
}
