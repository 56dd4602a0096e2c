//! Outbound HTTP: the one client setup for every request the service makes
//! (forwarding to destinations now; reconciliation with providers' APIs
//! later), so TLS, redirects and identification are decided once.

use std::sync::Arc;
use std::time::Duration;

/// How long a TCP (and TLS) connection may take to open; a request's own
/// timeout bounds the whole exchange on top of it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle keep-alive connection is kept for the next request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the service says it is, on every request.
pub const USER_AGENT: &str = concat!("webhook-inbox/", env!("CARGO_PKG_VERSION"));

/// The settings both clients are built with, applied to either builder
/// (reqwest's async and blocking builders are different types with the
/// same methods), so the policy [`build`] documents is written once.
macro_rules! configured {
    ($builder:expr) => {
        $builder
            .use_preconfigured_tls(tls())
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .build()
            .expect("a client with a rustls configuration builds")
    };
}

/// A client for everything the service calls: rustls with the Mozilla roots
/// compiled in (no dependency on the host's certificate store, the same
/// roots as the SMTP client's), HTTP/1.1, no proxy from the environment, and
/// no redirects.
///
/// Why no redirects: a webhook receiver that answers 3xx has moved, and
/// re-sending a signed POST somewhere else on its word would send the
/// payload to whoever the redirect names; it counts as a failed attempt
/// whose status the operator sees.
pub fn build() -> reqwest::Client {
    configured!(reqwest::Client::builder())
}

/// [`build`]'s blocking twin, for the trace exporter, which sends from a
/// thread of its own.
pub fn build_blocking() -> reqwest::blocking::Client {
    // A blocking client runs a runtime of its own, which must be neither
    // built nor dropped on an async runtime's thread.
    std::thread::spawn(|| configured!(reqwest::blocking::Client::builder()))
        .join()
        .expect("building a client does not panic")
}

/// rustls with the Mozilla roots compiled in.
fn tls() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}
