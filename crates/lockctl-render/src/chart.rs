//! Line charts as inline SVG for the HTML report: axes with round tick values (1, 2 and 5 times
//! a power of ten), and series that stay apart when they overlap (each its own colour, dash
//! pattern and marker shape).

use std::fmt::Write as _;

/// One line.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// Colour, dash pattern and marker per series, in order: told apart even in black and white.
const STYLES: [(&str, &str, Marker); 6] = [
    ("#1f77b4", "", Marker::Circle),
    ("#d62728", "8 4", Marker::Square),
    ("#2ca02c", "2 3", Marker::Triangle),
    ("#ff7f0e", "12 4 2 4", Marker::Diamond),
    ("#9467bd", "4 4", Marker::Circle),
    ("#8c564b", "1 2", Marker::Square),
];

#[derive(Clone, Copy, Debug)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
}

const W: f64 = 900.0;
const H: f64 = 360.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
/// Room above the plot for the legend, which then never covers a line.
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Round values from `lo` to `hi`: steps of 1, 2 or 5 times a power of ten, about `want` of them.
pub fn nice_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater)
        || !lo.is_finite()
        || !hi.is_finite()
    {
        return vec![lo];
    }
    let raw = (hi - lo) / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .take(50)
        .collect()
}

/// Round values on a log axis from `lo` to `hi` (both > 0): 1, 2 and 5 times each power of ten,
/// or only the powers of ten when that would be too many.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.max(1e-6), hi.max(lo.max(1e-6)));
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mults: &[f64] = if k1 - k0 > 4 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    (k0..=k1)
        .flat_map(|k| mults.iter().map(move |m| m * 10f64.powi(k)))
        .filter(|v| *v >= lo * 0.999 && *v <= hi * 1.001)
        .collect()
}

/// A tick's label: as short as the value allows.
fn label(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The chart, or a line of text when there is nothing to draw.
pub fn line_chart(series: &[Series], scale: Scale, x_label: &str, y_label: &str) -> String {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    if all.is_empty() {
        return "<p><em>nothing to draw</em></p>".into();
    }
    let fx = |x: f64| match scale {
        Scale::Log => x.max(1e-6).log10(),
        Scale::Linear => x,
    };
    let (mut x0, mut x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().fold(f64::MIN, |b, p| b.max(p.1)).max(1e-9);
    let y0 = all.iter().fold(0.0_f64, |a, p| a.min(p.1));
    if x1 <= x0 {
        x1 = x0 + 1.0;
        if scale == Scale::Log {
            x0 /= 2.0;
            x1 = x1.max(x0 * 4.0);
        }
    }
    let yt = nice_ticks(y0, y1, 5);
    let y1 = yt.last().copied().unwrap_or(y1).max(y1);
    let xt = match scale {
        Scale::Log => log_ticks(x0, x1),
        Scale::Linear => nice_ticks(x0, x1, 6),
    };
    let px = |x: f64| LEFT + (fx(x) - fx(x0)) / (fx(x1) - fx(x0)).max(1e-12) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0).max(1e-12) * (H - TOP - BOTTOM);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">"#
    );
    let (b, r) = (H - BOTTOM, W - RIGHT);
    for &x in &xt {
        let _ = write!(
            s,
            r##"<line x1="{p:.1}" y1="{TOP}" x2="{p:.1}" y2="{b}" stroke="#eee"/><text x="{p:.1}" y="{ty}" text-anchor="middle" font-size="12">{l}</text>"##,
            p = px(x),
            ty = b + 16.0,
            l = label(x)
        );
    }
    for &y in &yt {
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{p:.1}" x2="{r}" y2="{p:.1}" stroke="#eee"/><text x="{tx}" y="{p:.1}" text-anchor="end" font-size="12" dy="4">{l}</text>"##,
            p = py(y),
            tx = LEFT - 6.0,
            l = label(y)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}" stroke="#444"/><text x="{cx}" y="{by}" text-anchor="middle" font-size="13">{x_label}</text><text x="18" y="{cy}" text-anchor="middle" font-size="12" transform="rotate(-90 18 {cy})">{y_label}</text>"##,
        cx = (LEFT + W - RIGHT) / 2.0,
        by = H - 8.0,
        cy = (TOP + H - BOTTOM) / 2.0
    );
    for (i, se) in series.iter().enumerate() {
        draw_series(&mut s, i, se, &px, &py);
    }
    s.push_str("</svg>");
    s
}

fn draw_series(
    s: &mut String,
    i: usize,
    se: &Series,
    px: &dyn Fn(f64) -> f64,
    py: &dyn Fn(f64) -> f64,
) {
    let (color, dash, marker) = STYLES[i % STYLES.len()];
    let pts: Vec<String> = se
        .points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
        .collect();
    let _ = write!(
        s,
        r#"<polyline fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}" points="{}"/>"#,
        pts.join(" ")
    );
    // A dozen markers per line, each series starting at its own offset, so that lines on top
    // of each other still show every marker shape.
    let n = se.points.len();
    let every = (n / 12).max(1);
    for (x, y) in se.points.iter().skip(i % every).step_by(every) {
        mark(s, marker, color, px(*x), py(*y));
    }
    let (lx, ly) = (LEFT + 160.0 * i as f64, 18.0);
    let _ = write!(
        s,
        r#"<line x1="{lx}" y1="{ly}" x2="{l2}" y2="{ly}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
        l2 = lx + 28.0
    );
    mark(s, marker, color, lx + 14.0, ly);
    let _ = write!(
        s,
        r#"<text x="{tx}" y="{ty}" font-size="13">{n}</text>"#,
        tx = lx + 34.0,
        ty = ly + 4.0,
        n = crate::escape::escape(&se.name)
    );
}

fn mark(s: &mut String, marker: Marker, color: &str, x: f64, y: f64) {
    let _ = match marker {
        Marker::Circle => write!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"/>"#
        ),
        Marker::Square => write!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{color}"/>"#,
            x - 3.5,
            y - 3.5
        ),
        Marker::Triangle => write!(
            s,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/>"#,
            x,
            y - 4.5,
            x - 4.0,
            y + 3.5,
            x + 4.0,
            y + 3.5
        ),
        Marker::Diamond => write!(
            s,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/>"#,
            x,
            y - 4.5,
            x + 4.5,
            y,
            x,
            y + 4.5,
            x - 4.5,
            y
        ),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(
            nice_ticks(0.0, 0.9, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8]
        );
        assert_eq!(log_ticks(0.05, 3.0), vec![0.05, 0.1, 0.2, 0.5, 1.0, 2.0]);
        assert_eq!(log_ticks(0.001, 1000.0).len(), 7);
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(0.05), "0.05");
        assert_eq!(label(1500.0), "1500");
    }
}
