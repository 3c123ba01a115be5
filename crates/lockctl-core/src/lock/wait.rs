//! Waiting for the lock: the acquire loop (FIFO queue, wake on grant, expiry poker), Redlock's
//! rounds on top of it, and what a grant tells its new holder.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::Script;

use super::scripts::{ACQUIRE, LEAVE, WAITER_REFRESH};
use super::watchdog::ExpiryPoker;
use super::{Lock, Token, notify_grantee, release_token};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::redlock::{Quorum, Round};

/// What a grant carried to its new holder: the value of the key the lock was asked to carry
/// ([`Lock::carrying`]), read by the script that made the grant, at that moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Carried {
    /// The key held this string.
    Value(String),
    /// There was no such key.
    Missing,
    /// The key held something other than a string.
    WrongType,
}

impl Carried {
    /// The scripts' form (see `QUEUE_LUA`): `v<value>`, `n`, `w`, or empty for nothing.
    fn parse(tag: &str) -> Option<Carried> {
        match tag.as_bytes().first() {
            Some(b'v') => Some(Carried::Value(tag[1..].to_string())),
            Some(b'n') => Some(Carried::Missing),
            Some(b'w') => Some(Carried::WrongType),
            _ => None,
        }
    }
}

/// A grant: its fencing token, the earliest local instant its lease could have begun, and
/// what it carried.
#[derive(Clone, Debug)]
pub(super) struct Grant {
    pub(super) fence: u64,
    pub(super) lease_from: Instant,
    pub(super) carried: Option<Carried>,
    /// The waiter at the head of the queue after this grant, if any.
    pub(super) next: Option<String>,
}

/// One answer of the ACQUIRE or LEAVE script, with the local instant the call was sent.
#[derive(Clone, Debug)]
pub(super) struct Reply {
    pub(super) granted: bool,
    /// The fencing token when granted, the holder's PTTL when not.
    pub(super) n: i64,
    /// The server's clock (ms) when the script ran.
    pub(super) server_now: i64,
    /// The server's clock (ms) when the grant was made; -1 when it is not known.
    pub(super) grant_at: i64,
    /// What the grant carried (the scripts' tag; empty when not granted or nothing asked).
    pub(super) carried: String,
    /// When granted: the waiter now at the head of the queue ('' for none).
    pub(super) next: String,
    /// When not granted: the waiter this call granted the free lock to, to be woken ('' none).
    pub(super) notify: String,
    /// When not granted: this waiter is at the head of the queue and listens on its head list.
    pub(super) at_head: bool,
    pub(super) sent: Instant,
}

/// The ACQUIRE and LEAVE scripts' answer, as sent: granted, n, the server's clock, the
/// grant's, what it carried, the next waiter, whom to notify, at the head.
pub(super) type RawReply = (i64, i64, i64, i64, String, String, String, i64);

/// What a waiter's BLPOP woke to.
pub(super) enum Woke {
    /// A grant to this waiter: its message.
    Granted(String),
    /// A head-list message for another waiter (one that joined the head after this one's last
    /// refresh): to be passed on to its own list, and this waiter goes on waiting.
    PassOn(String),
    /// Nothing (the block ran out, or a message that is nobody's).
    Nothing,
}

impl Reply {
    /// The script's answer `raw` to a call sent at `sent`.
    pub(super) fn of(raw: RawReply, sent: Instant) -> Reply {
        let (granted, n, server_now, grant_at, carried, next, notify, at_head) = raw;
        Reply {
            granted: granted == 1,
            n,
            server_now,
            grant_at,
            carried,
            next,
            notify,
            at_head: at_head == 1,
            sent,
        }
    }

    /// A stand-in for "no answer yet", sent at `at`.
    pub(super) fn before(at: Instant) -> Reply {
        Reply {
            granted: false,
            n: -1,
            server_now: 0,
            grant_at: -1,
            carried: String::new(),
            next: String::new(),
            notify: String::new(),
            at_head: false,
            sent: at,
        }
    }

    /// The grant this reply reports. The grant was made after `not_yet` (the last "not yet")
    /// was sent, and `server_now - grant_at` ms before the server read its clock for this reply,
    /// which it did after this call was sent: the later of the two bounds is when the lease
    /// may have begun at the earliest.
    pub(super) fn grant(&self, not_yet: &Reply) -> Grant {
        let mut from = not_yet.sent;
        if self.grant_at >= 0 {
            let back = Duration::from_millis((self.server_now - self.grant_at).max(0) as u64);
            if let Some(t) = self.sent.checked_sub(back) {
                from = from.max(t);
            }
        }
        Grant {
            fence: self.n.max(0) as u64,
            lease_from: from,
            carried: Carried::parse(&self.carried),
            next: (!self.next.is_empty()).then(|| self.next.clone()),
        }
    }

    /// The grant a wake message (`<fence>:<server ms of the grant>:<next>:<carried>`)
    /// reports, this being the last "not yet": the grant came `grant_at - server_now` ms after
    /// this reply's clock reading, which came after this call was sent.
    pub(super) fn woken(&self, payload: &str) -> Grant {
        let mut parts = payload.splitn(4, ':');
        let (fence, at) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let next = parts.next().filter(|t| !t.is_empty()).map(str::to_string);
        let carried = parts.next().and_then(Carried::parse);
        let mut from = self.sent;
        if let (Ok(at), true) = (at.parse::<i64>(), self.server_now > 0) {
            let ahead = Duration::from_millis((at - self.server_now).max(0) as u64);
            from = self.sent + ahead;
        }
        Grant {
            fence: fence.parse().unwrap_or(0),
            lease_from: from,
            carried,
            next,
        }
    }
}

/// Whether the holder's lease (the PTTL in a "not yet" reply) ends within `block`.
fn r_pttl_below(r: &Reply, block: Duration) -> bool {
    r.n >= 0 && (r.n as u128) < block.as_millis()
}

impl Lock {
    /// Redlock's acquire loop. The lock key on the data node comes first, through its FIFO
    /// queue: it keeps single-node clients such as the tutorial's PHP code excluded, gives the
    /// fenced write a token to check where the stock lives, and lets lockctl's buyers take
    /// turns instead of splitting the votes (simultaneous Redlock rounds that each win a
    /// minority, release, and retry are Redlock's known livelock). Then a majority of the lock
    /// nodes, which keeps the lock even if the data node fails over and forgets its key. A
    /// round that misses the majority gives the data-node lock back and tries again after a
    /// random pause, until the wait runs out.
    pub(super) fn wait_for_quorum(
        &self,
        conn: &mut Conn,
        q: &Quorum,
        token: &Token,
        started: Instant,
        give_up: &AtomicBool,
    ) -> Result<Option<(Grant, Option<Instant>)>> {
        let ttl = self.options.ttl;
        loop {
            let Some(grant) = self.wait_for_grant(conn, token, started, give_up)? else {
                return Ok(None);
            };
            let round = Instant::now();
            let answered = match q.try_acquire(&self.keys.lock, token.as_str(), ttl) {
                Round::Won(validity) => return Ok(Some((grant, Some(round + validity)))),
                Round::Lost { answered } => answered,
            };
            release_token(conn, &self.keys, token)?;
            // The next round waits with the same token: a wake message pushed late for this
            // round's grant (a releaser's second call) must not be taken for the next one's.
            // Nothing can be granted to this token before it queues again.
            let _: Result<i64> =
                conn.query(redis::cmd("DEL").arg(self.keys.wake_of(token.as_str())));
            let left = self.left(started, give_up);
            if left.is_zero() {
                // Not a held lock: the nodes that could vote were too few.
                if answered < q.majority() {
                    return Err(Error::NoQuorum {
                        answered,
                        total: q.addrs().len(),
                        needed: q.majority(),
                    });
                }
                return Ok(None);
            }
            thread::sleep(Duration::from_micros(rand::random_range(1_000..20_000)).min(left));
        }
    }

    /// The acquire loop: the grant, or `None` when the wait ran out.
    ///
    /// On an error the waiter leaves the queue and releases the lock by token, best effort.
    pub(super) fn wait_for_grant(
        &self,
        conn: &mut Conn,
        token: &Token,
        started: Instant,
        give_up: &AtomicBool,
    ) -> Result<Option<Grant>> {
        let mut queued = false;
        let outcome = self.wait_in_queue(conn, token, started, give_up, &mut queued);
        if outcome.is_err() {
            let _ = self.call(conn, &LEAVE, token, false);
            let _ = release_token(conn, &self.keys, token);
        }
        outcome
    }

    fn wait_in_queue(
        &self,
        conn: &mut Conn,
        token: &Token,
        started: Instant,
        give_up: &AtomicBool,
        queued: &mut bool,
    ) -> Result<Option<Grant>> {
        let call_timeout = conn.call_timeout();
        // The last answer that said "not yet": any grant came after it was sent.
        let mut not_yet = Reply::before(started);
        loop {
            let left = self.left(started, give_up);
            let r = self.call(conn, &ACQUIRE, token, !left.is_zero())?;
            if r.granted {
                return Ok(Some(r.grant(&not_yet)));
            }
            notify_grantee(conn, &self.keys, &r.notify, self.carry.as_deref());
            not_yet = r;
            if left.is_zero() {
                if !*queued {
                    return Ok(None);
                }
                // Leaving may find the lock granted to us a moment ago: then it is ours.
                let r = self.call(conn, &LEAVE, token, false)?;
                return Ok(r.granted.then(|| r.grant(&not_yet)));
            }
            *queued = true;
            // Block until woken or until our place needs refreshing. When the holder's lease
            // (n is its PTTL; negative when it has none) runs out before that, ask the expiry
            // poker to hand the lock over the moment it does: a BLPOP timeout would fire only
            // on the server's next clock tick (1/hz, 100 ms by default), late.
            let block = self.block_for(left, call_timeout);
            self.poke_at_if_due(&not_yet, block);
            match self.block(conn, token, block, not_yet.at_head) {
                Ok(Some(payload)) => return Ok(Some(not_yet.woken(&payload))),
                Ok(None) => {}
                // Stopped and continued (Ctrl-Z, fg) while blocked: the wake, if any, is not
                // lost; the next ACQUIRE finds the lock ours and claims it.
                Err(e) if e.is_interrupted() => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// What is left of the wait that began at `started`: nothing once the caller has given up
    /// (an async purchase or scope that was dropped), so a waiter leaves the queue at its next
    /// wake-up (within `WAITER_REFRESH`) instead of taking a lock nobody will use.
    pub(super) fn left(&self, started: Instant, give_up: &AtomicBool) -> Duration {
        if give_up.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        self.options.wait.saturating_sub(started.elapsed())
    }

    /// How long one BLPOP may block: until our place needs refreshing, at most what is left
    /// of the wait, and at most half the per-call limit, so the socket's timeout (the per-call
    /// limit) covers the block with room to spare and never has to be changed for it.
    pub(super) fn block_for(&self, left: Duration, call_timeout: Duration) -> Duration {
        left.min(WAITER_REFRESH)
            .min(call_timeout / 2)
            .max(Duration::from_millis(1))
    }

    /// BLPOP on our wake list (and, at the head of the queue, on its head list) for up to
    /// `block`: the grant's payload, or `None` on timeout. A head-list message for another
    /// waiter (one that joined the head after this one's last refresh) is passed on to its own
    /// list, and this waiter goes on waiting.
    fn block(
        &self,
        conn: &mut Conn,
        token: &Token,
        block: Duration,
        at_head: bool,
    ) -> Result<Option<String>> {
        let woken: Option<(String, String)> = conn.query(&self.blpop(token, block, at_head))?;
        match self.woke(token, woken) {
            Woke::Granted(payload) => Ok(Some(payload)),
            Woke::PassOn(whose) => {
                notify_grantee(conn, &self.keys, &whose, self.carry.as_deref());
                Ok(None)
            }
            Woke::Nothing => Ok(None),
        }
    }

    /// The BLPOP of [`Lock::block`]: on our wake list, and at the head of the queue on its
    /// head list too, for up to `block`.
    pub(super) fn blpop(&self, token: &Token, block: Duration, at_head: bool) -> redis::Cmd {
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(self.keys.wake_of(token.as_str()));
        if at_head {
            cmd.arg(&self.keys.head_wake);
        }
        cmd.arg(format!("{:.3}", block.as_secs_f64().max(0.001)));
        cmd
    }

    /// What the BLPOP's answer `woken` (the list and the message) means for the waiter
    /// holding `token`.
    pub(super) fn woke(&self, token: &Token, woken: Option<(String, String)>) -> Woke {
        let Some((key, payload)) = woken else {
            return Woke::Nothing;
        };
        if key != self.keys.head_wake {
            return Woke::Granted(payload);
        }
        match payload.split_once(':') {
            Some((whose, message)) if whose == token.as_str() => Woke::Granted(message.to_string()),
            Some((whose, _)) => Woke::PassOn(whose.to_string()),
            None => Woke::Nothing,
        }
    }

    /// Runs a queue-aware script (ACQUIRE or LEAVE) with this lock's keys and the standard
    /// arguments.
    fn call(&self, conn: &mut Conn, script: &Script, token: &Token, queue: bool) -> Result<Reply> {
        let sent = Instant::now();
        let raw: RawReply = conn.script(&self.queue_call(script, token, queue))?;
        Ok(Reply::of(raw, sent))
    }

    /// The call of a queue-aware script (ACQUIRE or LEAVE) by the waiter holding `token`.
    pub(super) fn queue_call<'a>(
        &'a self,
        script: &'a Script,
        token: &Token,
        queue: bool,
    ) -> redis::ScriptInvocation<'a> {
        let ttl_ms = self.options.ttl.as_millis() as u64;
        self.keys.invocation(
            script,
            token.as_str(),
            ttl_ms,
            queue,
            &self.keys.wake_of(token.as_str()),
            self.carry.as_deref(),
        )
    }

    pub(super) fn poke_at_if_due(&self, not_yet: &Reply, block: Duration) {
        if r_pttl_below(not_yet, block) {
            self.poke_at(Instant::now() + Duration::from_millis(not_yet.n as u64 + 1));
        }
    }

    fn poke_at(&self, due: Instant) {
        let poker = self
            .expiry_poker
            .get_or_init(|| ExpiryPoker::start(&self.target, self.keys.clone()).ok());
        if let Some(p) = poker {
            p.poke_at(due);
        }
    }
}
