use lockctl_core::aio::AsyncLock;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::{Lock, LockOptions, Release};

/// The lock from async code, at the Redis at `url` ("redis://127.0.0.1:6379", say).
async fn nightly_report(url: &str) -> Result<(), lockctl_core::Error> {
    let target = Target::open(url, ConnectOptions::default())?;
    let lock = AsyncLock::new(Lock::new(&target, "nightly_report", LockOptions::default()));
    let guard = lock.acquire().await?.expect("nobody else holds it");
    // A second try finds it held (the default wait is one try).
    assert!(lock.acquire().await?.is_none());
    println!("fencing token {}", guard.fence());
    assert_eq!(lock.release(guard).await?, Release::Released);
    Ok(())
}
