//! The console's templates (minijinja, compiled into the binary from
//! `templates/console/`) and its stylesheet.
//!
//! Every template's name ends in `.html`, so minijinja escapes every value
//! it prints for HTML: text and attribute values alike (`<`, `>`, `&`, `"`,
//! `'`). Before that, characters that cannot be seen or that change how the
//! text around them shows (bidirectional overrides, zero-width spaces,
//! controls) are written as escapes, as the CLI does (`operations::display`):
//! one event id must not pass for another. Values never start a URL: every
//! link is a path we build, and values inside one are URL-encoded first, so
//! a `javascript:` value stays text.

use std::sync::LazyLock;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse};
use chrono::{DateTime, Utc};
use minijinja::value::Serde;
use minijinja::{Environment, Value, context, escape_formatter};
use serde::Serialize;

use crate::operations::display;

/// The templates, by name.
const TEMPLATES: [(&str, &str); 9] = [
    ("base.html", include_str!("../../../templates/console/base.html")),
    ("sign_in.html", include_str!("../../../templates/console/sign_in.html")),
    ("error.html", include_str!("../../../templates/console/error.html")),
    ("overview.html", include_str!("../../../templates/console/overview.html")),
    ("events.html", include_str!("../../../templates/console/events.html")),
    ("event.html", include_str!("../../../templates/console/event.html")),
    ("bulk.html", include_str!("../../../templates/console/bulk.html")),
    ("replay_dead.html", include_str!("../../../templates/console/replay_dead.html")),
    ("backfill.html", include_str!("../../../templates/console/backfill.html")),
];

const STYLESHEET: &str = include_str!("../../../templates/console/console.css");

static ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in TEMPLATES {
        env.add_template(name, source).expect("the console's templates compile");
    }
    env.set_formatter(|out, state, value| {
        let shown = match value.as_str() {
            Some(text) if !value.is_safe() => &Value::from(display::visible(text).as_ref()),
            _ => value,
        };
        escape_formatter(out, state, shown)
    });
    env.add_filter("time", time);
    env.add_filter("ago", ago);
    env.add_filter("seconds", |seconds: f64| duration(seconds as i64));
    env.add_filter("clip", clip);
    env
});

/// A serializable value for a template's context.
pub fn serde<T: Serialize + ?Sized>(value: &T) -> Value {
    Value::from(Serde(value))
}

/// Renders template `name` with `context`. A failure is a bug (a template
/// that names a value its page does not give it): a page answers it 500
/// (`ConsoleError`'s `From`).
pub fn render(name: &str, context: Value) -> Result<Html<String>, minijinja::Error> {
    ENVIRONMENT.get_template(name)?.render(context).map(Html)
}

/// The sign-in form, with an error line when the last try failed.
pub fn sign_in(csrf: &str, next: &str, error: Option<&str>) -> Html<String> {
    render("sign_in.html", context! { sign_in_csrf => csrf, next, error })
        .unwrap_or_else(|_| Html("sign-in is unavailable".into()))
}

/// A page that says what went wrong.
pub fn error_page(status: StatusCode, reason: &str) -> Html<String> {
    render("error.html", context! { status => status.as_u16(), reason })
        .unwrap_or_else(|_| Html("error".into()))
}

/// `GET /console/console.css`.
pub async fn stylesheet() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLESHEET)
}

/// `{{ at | time }}`: an RFC 3339 time as `2026-12-01 03:04:05` (UTC).
fn time(value: Value) -> String {
    match parse(&value) {
        Some(time) => time.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => String::new(),
    }
}

/// `{{ then | ago(now) }}`: how long before `now` `then` was, e.g. `3 h 12 min`.
fn ago(then: Value, now: Value) -> String {
    match (parse(&then), parse(&now)) {
        (Some(then), Some(now)) => duration((now - then).num_seconds().max(0)),
        _ => String::new(),
    }
}

/// `{{ text | clip }}`: at most [`CLIP`] characters, for a table's one-line cell.
fn clip(text: Option<String>) -> String {
    let text = text.unwrap_or_default();
    match text.char_indices().nth(CLIP) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Longest text in a table cell (the cell's width cuts it further on screen).
const CLIP: usize = 200;

fn parse(value: &Value) -> Option<DateTime<Utc>> {
    let text = value.as_str()?;
    DateTime::parse_from_rfc3339(text).ok().map(|time| time.with_timezone(&Utc))
}

/// Seconds as the two largest units: `42 s`, `5 min 3 s`, `3 h 12 min`, `2 d 4 h`.
pub fn duration(seconds: i64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds % 86_400 / 3600, seconds % 3600 / 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(duration(42), "42 s");
        assert_eq!(duration(303), "5 min 3 s");
        assert_eq!(duration(3 * 3600 + 12 * 60 + 5), "3 h 12 min");
        assert_eq!(duration(2 * 86_400 + 4 * 3600), "2 d 4 h");
    }

    #[test]
    fn every_printed_value_is_escaped() {
        let hostile = "\"><img src=x onerror=alert(1)><script>alert(2)</script>";
        let page = render("error.html", context! { status => 400, reason => hostile }).unwrap().0;
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img src=x"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
    }

    #[test]
    fn characters_that_hide_or_reorder_text_are_shown_as_escapes() {
        let page =
            render("error.html", context! { status => 400, reason => "evt_\u{202e}10\u{200b}" }).unwrap().0;
        assert!(page.contains("evt_\\u{202e}10\\u{200b}"), "{page}");
        assert!(!page.contains('\u{202e}') && !page.contains('\u{200b}'), "{page}");
    }
}
