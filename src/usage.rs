//! The one error of the command line's own: a usage error found after parsing (exit 2), for
//! the commands and for what they use (exports, the metrics endpoint).

use std::fmt;

/// A usage error found after parsing (exit 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
