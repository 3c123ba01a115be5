//! The hammer's own cost, so a reader can see the instrument is not the limit: CPU time
//! (user + system, all threads, from the scheduler's clock) spent during the run, and the
//! process's peak memory (from `/proc/self`, Linux; absent elsewhere).

use std::time::Duration;

/// CPU time this process has used so far, all threads together.
pub fn cpu_time() -> Option<Duration> {
    // The scheduler's own count of this process's CPU time (all threads), in nanoseconds:
    // /proc/self/stat counts in 10 ms ticks, which reads as zero for a short run.
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The most resident memory this process has held (VmHWM), in MB.
pub fn max_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_memory() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(cpu_time().is_some_and(|t| t > Duration::ZERO));
        assert!(max_rss_mb().is_some_and(|m| m > 0.0));
    }
}
