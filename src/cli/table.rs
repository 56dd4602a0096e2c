//! Aligned text tables: archive rows, destinations, jobs.

use std::io::{self, Write};

use chrono::{DateTime, Utc};

use crate::operations::ArchivedDelivery;
use crate::operations::display::visible;

/// Longest error message shown in a table; `events show` prints it whole.
const ERROR_WIDTH: usize = 60;

/// Writes `rows` as a table with a header line, hidden characters of the
/// stored values escaped.
pub fn deliveries(out: &mut dyn Write, rows: &[ArchivedDelivery]) -> io::Result<()> {
    let header = ["ID", "CREATED (UTC)", "STATUS", "PROVIDER", "TYPE", "EVENT ID", "REPROCESS OF", "ERROR"];
    let lines: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            [
                row.id.to_string(),
                time(row.created_at),
                row.processing_status.clone(),
                visible(&row.provider).into_owned(),
                visible(&row.event_type).into_owned(),
                visible(&row.event_id).into_owned(),
                row.reprocess_of.map(|id| id.to_string()).unwrap_or_default(),
                row.error_message.as_deref().map(cell).unwrap_or_default(),
            ]
        })
        .collect();
    write(out, header, &lines)
}

/// Writes one `name value` line per field, the values aligned after
/// `width` columns, hidden characters of the values escaped: stored values
/// come from providers and receivers (and error messages quote them), and
/// nothing in them may drive the terminal or hide a character.
pub fn fields(out: &mut dyn Write, width: usize, fields: &[(&str, String)]) -> io::Result<()> {
    fields.iter().try_for_each(|(name, value)| writeln!(out, "{name:<width$}{}", visible(value)))
}

/// A stored value for a table cell: its first line, cut to
/// [`ERROR_WIDTH`] characters, hidden characters escaped.
pub fn cell(text: &str) -> String {
    first_line(&visible(text))
}

/// Writes `lines` under `header`, each column as wide as its widest cell.
pub fn write<const N: usize>(
    out: &mut dyn Write,
    header: [&str; N],
    lines: &[[String; N]],
) -> io::Result<()> {
    let mut widths = header.map(str::len);
    for line in lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    write_line(out, &header.map(String::from), &widths)?;
    lines.iter().try_for_each(|line| write_line(out, line, &widths))
}

fn write_line<const N: usize>(
    out: &mut dyn Write,
    cells: &[String; N],
    widths: &[usize; N],
) -> io::Result<()> {
    let mut line = String::new();
    for (cell, width) in cells.iter().zip(widths) {
        line.push_str(&format!("{cell:<width$}  "));
    }
    writeln!(out, "{}", line.trim_end())
}

/// A time to the second, UTC.
pub fn time(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The first line of `text`, cut to [`ERROR_WIDTH`] characters.
pub fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(ERROR_WIDTH) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}
