//! Rounding for reports: one rule, so every number a person or a script reads is rounded the
//! same way (milliseconds to the microsecond, rates to a tenth).

use std::time::Duration;

/// `x` rounded to `places` decimal places.
pub fn round_to(x: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (x * scale).round() / scale
}

/// `x` rounded to three decimal places (milliseconds to the microsecond, seconds to the
/// millisecond).
pub fn round3(x: f64) -> f64 {
    round_to(x, 3)
}

/// `d` in milliseconds, to the microsecond.
pub fn millis(d: Duration) -> f64 {
    round3(d.as_secs_f64() * 1000.0)
}

/// `n` and the noun that agrees with it: `1 unit`, `3 units`.
pub fn count(n: impl Into<i128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_keeps_the_stated_places() {
        assert_eq!(round3(1.23456), 1.235);
        assert_eq!(round_to(4550.3754, 1), 4550.4);
        assert_eq!(millis(Duration::from_micros(1500)), 1.5);
        assert_eq!(count(1u64, "unit", "units"), "1 unit");
        assert_eq!(count(0i64, "order", "orders"), "0 orders");
    }
}
