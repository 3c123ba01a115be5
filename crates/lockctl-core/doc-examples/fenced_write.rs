use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::{Acquire, Fenced, Lock, LockOptions};
use lockctl_core::redis;

/// A write of the caller's own, made only while the lock is still held, at the Redis at `url`
/// ("redis://127.0.0.1:6379", say).
fn fenced_write(url: &str) -> Result<(), lockctl_core::Error> {
    let target = Target::open(url, ConnectOptions::default())?;
    let mut conn = target.connect()?;
    let lock = Lock::new(&target, "{report}", LockOptions::default());
    let Acquire::Acquired(guard) = lock.acquire(&mut conn)? else { panic!("held") };
    let written = guard.fenced(&mut conn, redis::cmd("SET").arg("{report}:total").arg(42))?;
    assert_eq!(written, Fenced::Written(redis::Value::Okay));
    guard.release(&mut conn)?;
    Ok(())
}
