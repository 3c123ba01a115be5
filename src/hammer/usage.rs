//! The hammer's own cost, so a reader can see the instrument is not the limit: CPU time
//! (user + system, all threads) spent during the run, and the process's peak memory. Read
//! from `/proc/self` (Linux); absent elsewhere.

use std::time::Duration;

/// CPU time this process has used so far, all threads together.
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th, in clock ticks.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // Linux reports in USER_HZ, which is 100 on every architecture it supports.
    Some(Duration::from_millis((utime + stime) * 10))
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
