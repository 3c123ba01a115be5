//! The lock on a real Redis: exclusion, ownership, expiry, fencing, the watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{RedisServer, eventually, lock_options, take};
use lockctl_core::conn::Conn;
use lockctl_core::lock::{Acquire, Guard, Lock, LockOptions, Release};
use redis::Commands;

/// Takes `name` with a 300 ms lease that the watchdog keeps alive; returns the guard and the
/// connection that took it.
fn take_watched(server: &RedisServer, name: &str) -> (Guard, Conn) {
    let options = LockOptions {
        watchdog: true,
        ..lock_options(300, 0)
    };
    let mut conn = server.conn();
    let guard = take(&Lock::new(&server.target(), name, options), &mut conn);
    (guard, conn)
}

#[test]
fn threads_racing_for_one_lock_are_never_two_holders() {
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "race", lock_options(5000, 10_000));
    let acquired = Arc::new(AtomicU64::new(0));
    thread::scope(|s| {
        for _ in 0..8 {
            let (lock, target, server, acquired) = (&lock, &target, &server, acquired.clone());
            s.spawn(move || {
                let mut conn = target.connect().unwrap();
                let mut raw = server.raw();
                for _ in 0..25 {
                    let guard = take(lock, &mut conn);
                    // Raw Redis state, not the library's word: we are the only one inside,
                    // and the lock key holds our token.
                    let inside: i64 = raw.incr("inside", 1).unwrap();
                    assert_eq!(inside, 1, "two holders at once");
                    let holder: String = raw.get("dist_lock:race").unwrap();
                    assert_eq!(holder, guard.token());
                    thread::sleep(Duration::from_micros(200));
                    let _: i64 = raw.decr("inside", 1).unwrap();
                    assert_eq!(guard.release(&mut conn).unwrap(), Release::Released);
                    acquired.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(acquired.load(Ordering::Relaxed), 200);
    let mut raw = server.raw();
    assert!(
        !raw.exists::<_, bool>("dist_lock:race").unwrap(),
        "lock left behind"
    );
}

#[test]
fn a_held_lock_makes_a_one_try_acquire_busy() {
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "busy", lock_options(5000, 0));
    let mut conn = server.conn();
    let _held = take(&lock, &mut conn);
    assert!(matches!(lock.acquire(&mut conn).unwrap(), Acquire::Busy));
}

#[test]
fn release_by_another_token_leaves_the_lock_in_place() {
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "owner", lock_options(100, 0));
    let mut conn = server.conn();
    let first = take(&lock, &mut conn);
    let mut raw = server.raw();
    assert!(
        eventually(Duration::from_secs(10), || !raw
            .exists::<_, bool>("dist_lock:owner")
            .unwrap()),
        "the first lease never ran out"
    );
    // The first lease ran out; a second buyer takes the lock.
    let second = take(&lock, &mut conn);
    assert_eq!(first.release(&mut conn).unwrap(), Release::NotOwner);
    let holder: String = raw.get("dist_lock:owner").unwrap();
    assert_eq!(
        holder,
        second.token(),
        "the late release deleted someone else's lock"
    );
    assert_eq!(second.release(&mut conn).unwrap(), Release::Released);
}

#[test]
fn a_lock_expires_after_its_ttl_and_its_release_says_so() {
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "ttl", lock_options(100, 0));
    let mut conn = server.conn();
    let guard = take(&lock, &mut conn);
    let mut raw = server.raw();
    let pttl: i64 = raw.pttl("dist_lock:ttl").unwrap();
    assert!(pttl > 0 && pttl <= 100, "PX not set: {pttl}");
    assert!(eventually(Duration::from_secs(30), || {
        !raw.exists::<_, bool>("dist_lock:ttl").unwrap()
    }));
    assert_eq!(guard.release(&mut conn).unwrap(), Release::Expired);
}

#[test]
fn fencing_tokens_grow_with_every_grant() {
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "fence", lock_options(5000, 0));
    let mut conn = server.conn();
    let mut last = 0;
    for _ in 0..5 {
        let g = take(&lock, &mut conn);
        assert!(g.fence() > last, "{} after {last}", g.fence());
        last = g.fence();
        assert_eq!(g.token().len(), 32);
        g.release(&mut conn).unwrap();
    }
}

#[test]
fn a_plain_set_nx_px_client_and_the_lock_exclude_each_other() {
    // The tutorial's PHP client does exactly this SET.
    let server = RedisServer::start();
    let target = server.target();
    let lock = Lock::new(&target, "php", lock_options(5000, 0));
    let mut conn = server.conn();
    let mut raw = server.raw();
    let set: Option<String> = redis::cmd("SET")
        .arg("dist_lock:php")
        .arg("phptoken0000000000000000000000ab")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query(&mut raw)
        .unwrap();
    assert!(set.is_some());
    assert!(matches!(lock.acquire(&mut conn).unwrap(), Acquire::Busy));
    let _: i64 = raw.del("dist_lock:php").unwrap();
    let g = take(&lock, &mut conn);
    let set: Option<String> = redis::cmd("SET")
        .arg("dist_lock:php")
        .arg("x")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query(&mut raw)
        .unwrap();
    assert!(set.is_none(), "the PHP client took a lock lockctl holds");
    g.release(&mut conn).unwrap();
}

#[test]
fn waiting_gets_the_lock_once_the_holder_releases() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let holder = take(
        &Lock::new(&target, "wait", lock_options(5000, 0)),
        &mut conn,
    );
    let waiter = thread::spawn({
        let target = target.clone();
        move || {
            let lock = Lock::new(&target, "wait", lock_options(5000, 3000));
            let mut conn = target.connect().unwrap();
            let t = Instant::now();
            let got = matches!(lock.acquire(&mut conn).unwrap(), Acquire::Acquired(_));
            (got, t.elapsed())
        }
    });
    thread::sleep(Duration::from_millis(200));
    holder.release(&mut conn).unwrap();
    let (got, waited) = waiter.join().unwrap();
    assert!(got, "the waiter never got the released lock");
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
}

#[test]
fn the_watchdog_keeps_the_lease_past_its_ttl_and_stops_at_release() {
    let server = RedisServer::start();
    let (guard, mut conn) = take_watched(&server, "dog");
    thread::sleep(Duration::from_millis(1000));
    let mut raw = server.raw();
    let holder: Option<String> = raw.get("dist_lock:dog").unwrap();
    assert_eq!(
        holder.as_deref(),
        Some(guard.token()),
        "the lease was not renewed"
    );
    assert!(guard.renewals() >= 2, "{} renewals", guard.renewals());
    assert!(!guard.lease_lost());
    assert_eq!(guard.release(&mut conn).unwrap(), Release::Released);
    // No renewal may follow the release (Redisson's bug: a watchdog reviving a freed lock).
    thread::sleep(Duration::from_millis(400));
    assert!(!raw.exists::<_, bool>("dist_lock:dog").unwrap());
}

#[test]
fn the_watchdog_marks_the_lease_lost_when_the_lock_is_taken_away() {
    let server = RedisServer::start();
    let (guard, mut conn) = take_watched(&server, "stolen");
    let mut raw = server.raw();
    let _: () = raw.set("dist_lock:stolen", "someone-else").unwrap();
    assert!(eventually(Duration::from_secs(30), || guard.lease_lost()));
    assert_eq!(guard.release(&mut conn).unwrap(), Release::NotOwner);
    let holder: String = raw.get("dist_lock:stolen").unwrap();
    assert_eq!(holder, "someone-else");
}
