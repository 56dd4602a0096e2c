//! The overview's chart, drawn on the server as SVG: one strip per outcome,
//! deliveries per minute over the last 24 hours, each strip on its own
//! scale (failures are few beside the processed ones, and must still show).
//!
//! One step path per strip, with a point only where the count changes, so
//! a day of minutes costs a few kilobytes. The SVG holds numbers and fixed
//! words only: nothing from a payload.

use std::fmt::Write;

use serde::Serialize;

use crate::operations::overview::Counts;

/// Height of a strip in the SVG's units (its width is one unit per minute).
const HEIGHT: u32 = 40;

/// One outcome's strip.
#[derive(Debug, Serialize)]
pub struct Strip {
    /// The outcome as the overview names it.
    pub label: &'static str,
    /// CSS class of its colour.
    pub class: &'static str,
    /// The most deliveries in one minute: the top of its scale.
    pub peak: i64,
    /// Deliveries over the whole window.
    pub total: i64,
    /// The `<svg>` element.
    pub svg: String,
}

/// What a strip shows: an outcome's label, CSS class, and its count in a minute.
type StripOf = (&'static str, &'static str, fn(&Counts) -> i64);

/// The strips of `per_minute` (oldest minute first).
pub fn strips(per_minute: &[Counts]) -> Vec<Strip> {
    let outcomes: [StripOf; 3] = [
        ("processed", "processed", |c| c.processed),
        ("idempotent", "skipped", |c| c.skipped),
        ("failed", "failed", |c| c.failed),
    ];
    outcomes
        .into_iter()
        .map(|(label, class, count)| {
            let values: Vec<i64> = per_minute.iter().map(count).collect();
            let peak = values.iter().copied().max().unwrap_or(0);
            Strip { label, class, peak, total: values.iter().sum(), svg: svg(label, class, &values, peak) }
        })
        .collect()
}

fn svg(label: &str, class: &str, values: &[i64], peak: i64) -> String {
    let width = values.len();
    let mut path = format!("M0 {HEIGHT}");
    let mut level = HEIGHT;
    for (minute, &value) in values.iter().enumerate() {
        // A minute with any delivery is at least one unit high, so a lone
        // failure shows.
        let height = match value {
            0 => 0,
            _ => ((value as f64 / peak as f64) * f64::from(HEIGHT)).round().max(1.0) as u32,
        };
        let y = HEIGHT - height;
        if y != level {
            let _ = write!(path, "H{minute}V{y}");
            level = y;
        }
    }
    let _ = write!(path, "H{width}V{HEIGHT}Z");
    format!(
        "<svg class=\"strip {class}\" viewBox=\"0 0 {width} {HEIGHT}\" preserveAspectRatio=\"none\" \
         role=\"img\" aria-label=\"{label} deliveries per minute, last 24 hours\">\
         <path d=\"{path}\"/></svg>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strip_steps_only_where_the_count_changes_and_scales_to_its_peak() {
        let mut minutes = vec![Counts::default(); 6];
        minutes[1].failed = 1;
        minutes[2].failed = 4;
        minutes[3].failed = 4;
        let failed = &strips(&minutes)[2];
        assert_eq!((failed.peak, failed.total), (4, 9));
        assert!(failed.svg.contains("d=\"M0 40H1V30H2V0H4V40H6V40Z\""), "{}", failed.svg);
        let idle = &strips(&minutes)[0];
        assert!(idle.svg.contains("d=\"M0 40H6V40Z\""), "{}", idle.svg);
    }
}
