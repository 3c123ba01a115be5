//! Text made safe to show on a terminal: every string that comes from the system under test
//! or from a history. (HTML needs nothing here: the pages are written with maud, which escapes
//! every value spliced into them.)

use std::borrow::Cow;

/// `s` with every control character written as Rust writes it in a string literal (`\u{1b}`,
/// `\r`, `\n`, `\u{9b}`), so that text from outside (an endpoint's answer, a history) cannot
/// move the cursor, erase a line or start a line of its own; so is every character that prints
/// as nothing or reorders the line ([`lockctl_core::sku::is_invisible`]: a bidirectional
/// override, a zero-width space). Printable text, Chinese included, stays as it is.
pub fn terminal(s: &str) -> Cow<'_, str> {
    escape_controls(s, false)
}

/// [`terminal`], keeping line breaks: for messages of several lines (an error quoting a
/// system's output).
pub fn terminal_lines(s: &str) -> Cow<'_, str> {
    escape_controls(s, true)
}

fn escape_controls(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    // Controls, and the characters that print as nothing or reorder the text around them
    // (bidirectional overrides, zero-width spaces: the ones a name may not hold either).
    let shown = |c: char| {
        (!c.is_control() && !lockctl_core::sku::is_invisible(c)) || (keep_newlines && c == '\n')
    };
    if s.chars().all(shown) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match shown(c) {
            true => out.push(c),
            false => out.extend(c.escape_debug()),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        assert_eq!(
            terminal("\x1b[2K\x1b[1A\r verdict PASS\x07\u{9b}2J\n"),
            r"\u{1b}[2K\u{1b}[1A\r verdict PASS\u{7}\u{9b}2J\n"
        );
        assert_eq!(
            terminal("已售罄，拦截请求 \\ 'q'"),
            "已售罄，拦截请求 \\ 'q'"
        );
        assert!(matches!(terminal("plain"), Cow::Borrowed(_)));
        assert_eq!(terminal_lines("a\x1b[1A\nb\r"), "a\\u{1b}[1A\nb\\r");
    }

    /// A bidirectional override reorders the rest of the line on a terminal that does bidi
    /// (an answer "\u{202e}SSAP tciderev" shows as "verdict PASS"), and a zero-width space makes
    /// two ids look alike: both are shown escaped, as the CLI refuses them in names.
    #[test]
    fn characters_that_reorder_or_hide_text_are_escaped() {
        assert_eq!(
            terminal("\u{202e}SSAP tciderev\u{200b}-1\u{2066}x\u{feff}"),
            r"\u{202e}SSAP tciderev\u{200b}-1\u{2066}x\u{feff}"
        );
        assert_eq!(terminal_lines("a\u{202e}b\n"), "a\\u{202e}b\n");
        assert_eq!(terminal("扣减成功 | 剩余库存: 3"), "扣减成功 | 剩余库存: 3");
    }
}
