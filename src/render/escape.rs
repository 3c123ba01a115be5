//! Text made safe to place in HTML and SVG, for the HTML report and its charts.

/// `s` with the characters HTML gives meaning to written as entities.
pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
