//! Online guessing of the operator tokens (the admin API's bearer token, the
//! console's sign-in, `/metrics`' token), slowed per client address.
//!
//! The first [`FREE_MISSES`] wrong tokens from an address are answered as
//! usual (401); after that the address is refused (429 with `Retry-After`)
//! for a wait that starts at one second and doubles with each further miss,
//! up to [`MAX_WAIT`]. A right token resets the count. While an address is
//! refused, every token from it is refused, the right one too: otherwise a
//! refusal would still say whether a guess was right, and the guessing
//! would go on at full speed. The real operator is never refused for long
//! (at most [`MAX_WAIT`] after the last miss from their own address) and
//! never from another address.
//!
//! The client address is the connection's peer, or, when the peer is a
//! configured trusted proxy (`TRUSTED_PROXY`), the last address of its
//! `X-Forwarded-For` (the one that proxy appended); a header from anyone
//! else is ignored, since a client could otherwise name a fresh address for
//! every guess.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use tokio::time::Instant;

/// Wrong tokens an address may send before it is slowed.
pub const FREE_MISSES: u32 = 5;

/// The longest an address is refused after its last miss.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Addresses remembered at most; the quietest are forgotten first.
const MAX_ADDRESSES: usize = 10_000;

/// Wrong tokens by client address.
#[derive(Debug, Default)]
pub struct Guessing {
    trusted_proxies: Vec<IpAddr>,
    misses: Mutex<HashMap<Option<IpAddr>, Misses>>,
}

#[derive(Debug, Clone, Copy)]
struct Misses {
    count: u32,
    /// Refused until then.
    until: Instant,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It was wrong: 401.
    Wrong,
    /// The address sent too many wrong ones: 429, retry after this long.
    Throttled(Duration),
}

impl Guessing {
    /// Honours `X-Forwarded-For` from `trusted_proxies` only.
    pub fn new(trusted_proxies: Vec<IpAddr>) -> Self {
        Guessing { trusted_proxies, misses: Mutex::default() }
    }

    /// The request's client address (see the module's doc); `None` for a
    /// request that came over no socket (the tests' in-process router).
    pub fn client(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
        let peer = extensions.get::<ConnectInfo<SocketAddr>>()?.0.ip();
        if !self.trusted_proxies.contains(&peer) {
            return Some(peer);
        }
        let forwarded =
            headers.get_all("x-forwarded-for").iter().filter_map(|value| value.to_str().ok()).next_back();
        Some(forwarded.and_then(|value| value.rsplit(',').next()?.trim().parse().ok()).unwrap_or(peer))
    }

    /// Checks a token from `client` with `matches`, unless the address is
    /// refused now; records the outcome.
    pub fn check(
        &self,
        client: Option<IpAddr>,
        now: Instant,
        matches: impl FnOnce() -> bool,
    ) -> Result<(), Refusal> {
        let mut misses = self.misses.lock().expect("never poisoned");
        let wait = misses.get(&client).and_then(|m| m.until.checked_duration_since(now));
        if let Some(wait) = wait.filter(|wait| !wait.is_zero()) {
            return Err(Refusal::Throttled(wait));
        }
        if matches() {
            misses.remove(&client);
            return Ok(());
        }
        if misses.len() >= MAX_ADDRESSES && !misses.contains_key(&client) {
            let quietest = misses.iter().min_by_key(|(_, m)| m.until).map(|(address, _)| *address);
            quietest.map(|address| misses.remove(&address));
        }
        let entry = misses.entry(client).or_insert(Misses { count: 0, until: now });
        entry.count += 1;
        entry.until = now + wait_after(entry.count);
        Err(Refusal::Wrong)
    }
}

/// How long an address is refused after its `count`th miss in a row.
fn wait_after(count: u32) -> Duration {
    match count.checked_sub(FREE_MISSES + 1) {
        None => Duration::ZERO,
        Some(over) => Duration::from_secs(1).saturating_mul(1 << over.min(16)).min(MAX_WAIT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_past_the_free_ones_refuse_the_address_for_a_doubling_wait_that_a_right_token_resets() {
        let guessing = Guessing::default();
        let (client, other) = (Some("192.0.2.1".parse().unwrap()), Some("192.0.2.2".parse().unwrap()));
        let mut now = Instant::now();
        for _ in 0..=FREE_MISSES {
            assert_eq!(guessing.check(client, now, || false), Err(Refusal::Wrong));
        }
        // The sixth miss asked for a second's wait: everything is refused meanwhile, the right token too.
        assert_eq!(guessing.check(client, now, || true), Err(Refusal::Throttled(Duration::from_secs(1))));
        assert_eq!(guessing.check(other, now, || true), Ok(()), "another address is not slowed");
        now += Duration::from_secs(1);
        assert_eq!(guessing.check(client, now, || false), Err(Refusal::Wrong));
        assert_eq!(guessing.check(client, now, || true), Err(Refusal::Throttled(Duration::from_secs(2))));
        now += Duration::from_secs(2);
        assert_eq!(guessing.check(client, now, || true), Ok(()));
        assert_eq!(guessing.check(client, now, || false), Err(Refusal::Wrong), "the count starts again");
        assert_eq!(guessing.check(client, now, || true), Ok(()));
        assert_eq!(wait_after(40), MAX_WAIT);
    }

    #[test]
    fn forwarded_for_is_read_only_from_a_trusted_proxy() {
        let proxy: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo(proxy));
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "198.51.100.7, 203.0.113.9".parse().unwrap());
        let trusting = Guessing::new(vec![proxy.ip()]);
        assert_eq!(trusting.client(&headers, &extensions), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(Guessing::default().client(&headers, &extensions), Some(proxy.ip()));
        assert_eq!(trusting.client(&HeaderMap::new(), &extensions), Some(proxy.ip()));
        assert_eq!(trusting.client(&headers, &Extensions::new()), None);
    }
}
