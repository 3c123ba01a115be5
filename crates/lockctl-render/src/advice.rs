//! What would fix a failure, in the words of the program that shows the report.
//!
//! `lockctl-core` names a fix as data ([`Hint`]); only a program knows its own flags and
//! commands. So a renderer never words a fix itself: it is handed an [`Advice`], and the
//! binary's implementation is the one place that speaks of `--redis` or `lockctl seed`.

use lockctl_core::{Finding, Hint};

/// The words for a fix, supplied by the program that shows a report.
pub trait Advice {
    /// What to do about `hint`, in the program's terms; empty when it has no words for it.
    fn words(&self, hint: &Hint) -> String;

    /// `text`, followed by what to do about `hint` when there is one and it has words.
    fn with_hint(&self, text: &str, hint: Option<&Hint>) -> String {
        match hint.map(|h| self.words(h)) {
            Some(w) if !w.is_empty() => format!("{text} ({w})"),
            _ => text.to_string(),
        }
    }

    /// A finding of `check` or `status`, with its fix.
    fn finding(&self, f: &Finding) -> String {
        self.with_hint(&f.text, f.hint.as_ref())
    }
}

/// An [`Advice`] with no words: the failure is said, its fix left out. For a program that
/// has no flags to name, and for tests of everything but the fixes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unworded;

impl Advice for Unworded {
    fn words(&self, _: &Hint) -> String {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Shout;
    impl Advice for Shout {
        fn words(&self, _: &Hint) -> String {
            "do this".into()
        }
    }

    #[test]
    fn a_fix_is_added_only_when_there_are_words_for_it() {
        let f = Finding::from("a lock is damaged").with_hint(Hint::LockNodes);
        assert_eq!(Shout.finding(&f), "a lock is damaged (do this)");
        assert_eq!(Unworded.finding(&f), "a lock is damaged");
        assert_eq!(Shout.with_hint("plain", None), "plain");
    }
}
