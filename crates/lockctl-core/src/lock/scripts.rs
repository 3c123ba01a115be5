//! The lock's Lua scripts, each with what it takes and what it returns.
//!
//! Every script that can hand the lock over shares [`QUEUE_LUA`]'s bookkeeping of waiters, so
//! a release, a forced unlock and an acquire that finds the lock free all grant it the same way.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

/// A lock script's text: the prelude naming the lock's keys (`lua/prelude.lua`: KEYS 1-9, 1
/// the lock, 2 the fencing counter, 3 the queue, 4 the deadlines, 5 the grant key, 6 the head
/// list, 7 the head listener, 8 the declared wake list, 9 the carried key if any; ARGV 5 the
/// wake prefix, as [`super::LockKeys`]'s `invocation` passes them), the queue's functions, the
/// carried key bound, then the script's own `lua/<name>.lua`.
macro_rules! with_queue {
    ($file:literal) => {
        concat!(
            include_str!("lua/prelude.lua"),
            include_str!("lua/queue.lua"),
            "CARRY = KEYS[9]\n",
            include_str!($file)
        )
    };
}

/// A script of another module's that ends by releasing the lock, as one step with its own work
/// (the write and the hand-off travel together): `lua/releasing.lua` names the lock's nine keys
/// as the *last* nine (the carried key always: the lock key stands in for none) and the
/// holder's token ('' to leave the lock held: under Redlock the quorum is given back first)
/// and the wake prefix as the last two arguments, so the script's own keys and arguments come
/// first, wherever the script's own file names them. `$body` is the script's own work, ending
/// in a `return`; the whole returns `{body's reply, release code, the waiter to notify or
/// ''}`, the code as `lua/release.lua`'s, 2 when not asked to release, -2 when the release
/// failed (a damaged fencing counter; the lock then stays with the holder, whose own release
/// reports why). The body's effects stand whatever the release does. [`crate::lock::Guard::release_inside`] passes the lock's part.
macro_rules! releasing {
    ($preamble:expr, $body:expr) => {
        concat!(
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/lock/lua/releasing.lua"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/lock/lua/queue.lua"
            )),
            $preamble,
            "\nlocal function work()\n",
            $body,
            "\nend\n",
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/lock/lua/release_tail.lua"
            ))
        )
    };
}
pub(crate) use releasing;

pub(super) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/acquire.lua")));
pub(super) static LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/leave.lua")));
pub(super) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/release.lua")));
pub(super) static NOTIFY: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/notify.lua")));
pub(super) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/renew.lua")));
pub(super) static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/fenced_write.lua")));
pub(super) static WAITERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/waiters.lua")));
pub(super) static FORCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/force.lua")));
pub(super) static HEALTH: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_queue!("lua/health.lua")));

/// How long a waiter's place lasts without a refresh, on the server's clock. A waiter that dies
/// leaves the queue at most this long after its last refresh.
pub const WAITER_LEASE: Duration = Duration::from_millis(1000);

/// How long a waiter blocks before refreshing its place: a third of the lease, so two refreshes
/// can be late before the place is lost.
pub(super) const WAITER_REFRESH: Duration = Duration::from_millis(333);
