//! The command line's own errors: a usage error found after parsing (exit 2), for the commands
//! and for what they use (exports, the metrics endpoint); and a program this machine lacks.

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

/// Something this machine lacks (a program that is not installed, or a file that cannot be
/// executed): error kind `environment`, and the exit code a shell would give (`run`: 127 for
/// a command not found, 126 for one that cannot be executed; 1 elsewhere).
#[derive(Debug)]
pub struct Missing {
    message: String,
    code: u8,
}

impl Missing {
    pub fn new(message: String, code: u8) -> Missing {
        Missing { message, code }
    }

    /// The exit code a shell would give.
    pub fn code(&self) -> u8 {
        self.code
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Missing {}
