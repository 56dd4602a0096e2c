//! The soak's chart: one panel per sampled series over the run's minutes,
//! each scaled from zero to its own maximum, so a leak shows as a line that
//! climbs and a steady service as a flat one. Plain SVG, no dependency.

use std::fmt::Write as _;

use super::samples::{SERIES, Sample};

const WIDTH: f64 = 760.0;
const PANEL: f64 = 96.0;
const GAP: f64 = 34.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;

/// The SVG of `samples`, titled `title`.
pub fn svg(title: &str, samples: &[Sample]) -> String {
    let height = TOP + SERIES.len() as f64 * (PANEL + GAP) + 8.0;
    let last = samples.last().map_or(1.0, |s| s.at_secs).max(1.0);
    let plot = WIDTH - LEFT - RIGHT;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(out, r#"<text x="{LEFT}" y="18" font-size="13">{}</text>"#, escape(title));
    for (n, (name, unit, value)) in SERIES.iter().enumerate() {
        let top = TOP + n as f64 * (PANEL + GAP) + 14.0;
        let bottom = top + PANEL;
        let max = samples.iter().map(value).fold(0.0, f64::max);
        let scale = if max > 0.0 { max * 1.1 } else { 1.0 };
        let unit = if unit.is_empty() { String::new() } else { format!(" ({unit})") };
        let _ = writeln!(out, r#"<text x="{LEFT}" y="{}">{}{unit}</text>"#, top - 4.0, escape(name));
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{plot}" height="{PANEL}" fill="none" stroke="#cccccc"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 4.0,
            top + 10.0,
            number(scale)
        );
        let _ = writeln!(out, r#"<text x="{}" y="{bottom}" text-anchor="end">0</text>"#, LEFT - 4.0);
        let points: Vec<String> = samples
            .iter()
            .map(|s| {
                let x = LEFT + plot * s.at_secs / last;
                let y = bottom - PANEL * value(s) / scale;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="#1f5fa8" stroke-width="1.5" points="{}"/>"##,
            points.join(" ")
        );
        if n + 1 == SERIES.len() {
            for minute in axis_minutes(last / 60.0) {
                let x = LEFT + plot * minute * 60.0 / last;
                let _ = writeln!(
                    out,
                    r#"<text x="{x:.1}" y="{}" text-anchor="middle">{minute} min</text>"#,
                    bottom + 14.0
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Where the time axis is labelled: about six marks, on round minutes.
fn axis_minutes(minutes: f64) -> Vec<f64> {
    let step =
        [1.0, 2.0, 5.0, 10.0, 15.0, 30.0].into_iter().find(|step| minutes / step <= 6.0).unwrap_or(60.0);
    (0..).map(|n| n as f64 * step).take_while(|m| *m <= minutes).collect()
}

/// A short label: no decimals above 10, one below.
pub fn number(value: f64) -> String {
    if value >= 10.0 { format!("{value:.0}") } else { format!("{value:.1}") }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
