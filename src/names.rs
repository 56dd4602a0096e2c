//! Closed sets of names read from text: a status, a mode. A leaf module,
//! so that the core (`queue`) and the operators' layer (`operations`) both
//! parse their stored values with it without depending on each other.

/// The one of `values` whose stored text (`text_of`) is `text`, whatever
/// its case; or an answer that lists them.
pub fn one_of<T: Copy>(text: &str, values: &[T], text_of: impl Fn(T) -> &'static str) -> Result<T, String> {
    values.iter().copied().find(|value| text_of(*value).eq_ignore_ascii_case(text)).ok_or_else(|| {
        let listed: Vec<&str> = values.iter().map(|value| text_of(*value)).collect();
        format!("{text:?} is not one of {}", listed.join(", "))
    })
}
