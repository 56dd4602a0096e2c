//! The pages of one run: each next page must be one not read yet, and a run
//! reads at most [`MAX_PAGES`]. Why: an API that keeps naming the same next
//! page (Paddle's `next`, Stripe's `has_more` with the same last id, a
//! GitHub `Link` that loops) would be paged for ever, holding the
//! provider's lock and spending the key's rate limit.

use std::collections::HashSet;

/// Most pages one run reads: 2 million events at Paddle's 200 a page, far
/// beyond the 90 days it keeps.
pub const MAX_PAGES: usize = 10_000;

/// Why a run stopped paging.
#[derive(Debug, thiserror::Error)]
#[error("the {provider} API pages without end: {problem}")]
pub struct EndlessPages {
    /// The provider.
    pub provider: &'static str,
    /// What it did.
    pub problem: &'static str,
}

/// The next pages a run was given.
#[derive(Debug, Default)]
pub struct Pages {
    named: HashSet<String>,
}

impl Pages {
    /// `next`, if the run may read it: named for the first time, and
    /// within [`MAX_PAGES`]; else the run ends with the error saying why.
    pub fn next(&mut self, provider: &'static str, next: String) -> Result<String, EndlessPages> {
        // The first page was named by no cursor.
        if self.named.len() + 1 >= MAX_PAGES {
            return Err(EndlessPages { provider, problem: "more than 10000 pages in one run" });
        }
        if !self.named.insert(next.clone()) {
            return Err(EndlessPages { provider, problem: "it named a page it had named before" });
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_named_again_or_one_past_the_bound_ends_the_run() {
        let mut pages = Pages::default();
        assert_eq!(pages.next("paddle", "a".into()).unwrap(), "a");
        assert_eq!(pages.next("paddle", "b".into()).unwrap(), "b");
        let again = pages.next("paddle", "a".into()).unwrap_err().to_string();
        assert_eq!(again, "the paddle API pages without end: it named a page it had named before");
        let mut pages = Pages::default();
        for n in 1..MAX_PAGES {
            pages.next("stripe", n.to_string()).unwrap();
        }
        assert!(
            pages.next("stripe", "new".into()).unwrap_err().to_string().contains("more than 10000 pages")
        );
    }
}
