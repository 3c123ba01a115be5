//! Line charts as inline SVG for the HTML report: axes with round tick values (1, 2 and 5 times
//! a power of ten), and series that stay apart when they overlap (each its own colour, dash
//! pattern and marker shape).

use maud::{Markup, html};

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

/// Where the points of a chart go: the data's bounds and scale mapped onto the plot area.
struct Plot {
    scale: Scale,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Plot {
    fn fx(&self, x: f64) -> f64 {
        match self.scale {
            Scale::Log => x.max(1e-6).log10(),
            Scale::Linear => x,
        }
    }

    fn px(&self, x: f64) -> f64 {
        LEFT + (self.fx(x) - self.fx(self.x0)) / (self.fx(self.x1) - self.fx(self.x0)).max(1e-12)
            * (W - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - (y - self.y0) / (self.y1 - self.y0).max(1e-12) * (H - TOP - BOTTOM)
    }
}

/// `v` to a tenth of a pixel, as every computed coordinate is written.
fn d1(v: f64) -> String {
    format!("{v:.1}")
}

/// The chart, or a line of text when there is nothing to draw.
///
/// Built with maud like the page around it: the coordinates and the `points` lists are numbers
/// formatted here, and the only text from outside (a series' name) is escaped like any other.
pub fn line_chart(series: &[Series], scale: Scale, x_label: &str, y_label: &str) -> Markup {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    if all.is_empty() {
        return html! { p { em { "nothing to draw" } } };
    }
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
    let plot = Plot {
        scale,
        x0,
        x1,
        y0,
        y1,
    };
    let (b, r) = (H - BOTTOM, W - RIGHT);
    let cy = (TOP + H - BOTTOM) / 2.0;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(W) height=(H)
            viewBox={ "0 0 " (W) " " (H) } role="img" {
            @for &x in &xt {
                line x1=(d1(plot.px(x))) y1=(TOP) x2=(d1(plot.px(x))) y2=(b) stroke="#eee" {}
                text x=(d1(plot.px(x))) y=(b + 16.0) text-anchor="middle" font-size="12" {
                    (label(x))
                }
            }
            @for &y in &yt {
                line x1=(LEFT) y1=(d1(plot.py(y))) x2=(r) y2=(d1(plot.py(y))) stroke="#eee" {}
                text x=(LEFT - 6.0) y=(d1(plot.py(y))) text-anchor="end" font-size="12" dy="4" {
                    (label(y))
                }
            }
            line x1=(LEFT) y1=(b) x2=(r) y2=(b) stroke="#444" {}
            line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(b) stroke="#444" {}
            text x=((LEFT + W - RIGHT) / 2.0) y=(H - 8.0) text-anchor="middle" font-size="13" {
                (x_label)
            }
            text x="18" y=(cy) text-anchor="middle" font-size="12"
                transform={ "rotate(-90 18 " (cy) ")" } { (y_label) }
            @for (i, se) in series.iter().enumerate() {
                (draw_series(i, se, &plot))
            }
        }
    }
}

fn draw_series(i: usize, se: &Series, plot: &Plot) -> Markup {
    let (color, dash, marker) = STYLES[i % STYLES.len()];
    let pts: Vec<String> = se
        .points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", plot.px(x), plot.py(y)))
        .collect();
    // A dozen markers per line, each series starting at its own offset, so that lines on top
    // of each other still show every marker shape.
    let every = (se.points.len() / 12).max(1);
    let (lx, ly) = (LEFT + 160.0 * i as f64, 18.0);
    html! {
        polyline fill="none" stroke=(color) stroke-width="2" stroke-dasharray=(dash)
            points=(pts.join(" ")) {}
        @for (x, y) in se.points.iter().skip(i % every).step_by(every) {
            (mark(marker, color, plot.px(*x), plot.py(*y)))
        }
        line x1=(lx) y1=(ly) x2=(lx + 28.0) y2=(ly) stroke=(color) stroke-width="2"
            stroke-dasharray=(dash) {}
        (mark(marker, color, lx + 14.0, ly))
        text x=(lx + 34.0) y=(ly + 4.0) font-size="13" { (se.name) }
    }
}

/// A marker's shape at (`x`, `y`): `points` of a polygon as the SVG attribute wants them.
fn polygon(corners: &[(f64, f64)]) -> String {
    corners
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn mark(marker: Marker, color: &str, x: f64, y: f64) -> Markup {
    match marker {
        Marker::Circle => html! { circle cx=(d1(x)) cy=(d1(y)) r="3.5" fill=(color) {} },
        Marker::Square => {
            html! { rect x=(d1(x - 3.5)) y=(d1(y - 3.5)) width="7" height="7" fill=(color) {} }
        }
        Marker::Triangle => {
            let points = polygon(&[(x, y - 4.5), (x - 4.0, y + 3.5), (x + 4.0, y + 3.5)]);
            html! { polygon points=(points) fill=(color) {} }
        }
        Marker::Diamond => {
            let points = polygon(&[(x, y - 4.5), (x + 4.5, y), (x, y + 4.5), (x - 4.5, y)]);
            html! { polygon points=(points) fill=(color) {} }
        }
    }
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
