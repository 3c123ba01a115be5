//! The stock's scripts, each the text of its `lua/*.lua` files: the one deduction every
//! script-based strategy runs (fenced, atomic, and the batches of group commit), so each
//! decides a purchase the same way, and the tutorial's write. What each takes and answers is in
//! its file's header comment; [`super::calls`] is the one code that knows the positions.

use std::sync::LazyLock;

use redis::Script;

use crate::lock::releasing;

/// The deduct script's text: the books' functions (`lua/books.lua`), then `lua/deduct.lua`.
pub(super) const DEDUCT_LUA: &str = concat!(
    include_str!("lua/books.lua"),
    include_str!("lua/deduct.lua")
);
pub(super) static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(DEDUCT_LUA));

/// The write script's text, sent whole with EVAL inside the naive strategy's MULTI (the lock
/// strategy sends the same body with its release, as [`WRITE_RELEASE`]).
pub(super) const WRITE_LUA: &str =
    concat!(include_str!("lua/books.lua"), include_str!("lua/write.lua"));

/// The `lock` strategy's write, its release and the hand-off to the next waiter, as one script:
/// `lua/write.lua` with the lock's release after it (see [`releasing`]). Its reply is
/// `{the write's reply, release code, the waiter to notify}`.
pub(super) static WRITE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(releasing!(
        include_str!("lua/books.lua"),
        include_str!("lua/write.lua")
    ))
});

/// The `fenced` strategy's deduction (the deduct script with the holder's token, so it writes
/// only while the lease is this holder's), its release and the hand-off, as one script.
pub(super) static FENCED_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(releasing!(
        include_str!("lua/books.lua"),
        include_str!("lua/deduct.lua")
    ))
});

/// Forgets the fencing counter a purchase of an unseeded SKU made (`lua/forget_fence.lua`).
pub(super) static FORGET_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/forget_fence.lua")));

/// Group commit's script: the books' functions, then `lua/batch.lua`.
pub(super) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/books.lua"),
        include_str!("lua/batch.lua")
    ))
});
