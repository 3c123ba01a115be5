use lockctl_core::aio::using;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::{Lock, LockOptions, Release};

/// An async body run under the lock, told when its lease is lost, at the Redis at `url`
/// ("redis://127.0.0.1:6379", say).
async fn under_the_lock(url: &str) -> Result<(), lockctl_core::Error> {
    let target = Target::open(url, ConnectOptions::default())?;
    let lock = Lock::new(&target, "nightly_report", LockOptions::default());
    let held = using(lock, |mut held| async move {
        tokio::select! {
            // Stop writing: the lease may be gone.
            _ = held.lost.lost() => None,
            // The work, its writes fenced with the grant's token.
            fence = async { held.fence } => Some(fence),
        }
    })
    .await?;
    let (fence, release) = held.expect("nobody else holds it");
    assert!(fence.is_some());
    assert_eq!(release, Release::Released);
    Ok(())
}
