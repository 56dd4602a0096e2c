//! The server: accepts connections, at most so many at once (shedding
//! those that wait for a request head to admit new ones), until shutdown
//! is signalled, then stops accepting and drains in-flight
//! deliveries, bounded in time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::waiting::Connections;
use crate::inbox::Workers;

/// What the server allows client connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most connections open at once; at least 1.
    pub max_connections: usize,
    /// Time a connection gets to send a request head, from its acceptance
    /// or from the previous answer on it.
    pub header_read_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves; then closes the
/// listener (new connections are refused), lets open connections finish
/// their current request, and waits for the deliveries queued on `workers`
/// (those of clients that went away too), all within `grace`. Returns
/// whether everything drained in time.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    workers: Workers,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> bool {
    // HTTP/1.1 only. Slow clients: a connection that does not send a
    // complete request head within the timeout, counted from the moment it
    // is accepted or its previous answer was sent, is closed (hyper needs a
    // timer for the timeout to apply). The body has its own timeout in the
    // webhook handler. Why not HTTP/2 too: cleartext HTTP/2 (prior
    // knowledge) has no such timeout, and a connection that never sends its
    // first bytes, while the protocol is still undecided, would be held open
    // forever. Providers reach the service through a TLS-terminating proxy
    // that speaks HTTP/1.1 to it.
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let shutting_down = CancellationToken::new();
    let tasks = TaskTracker::new();
    let open = Connections::default();
    let mut shutdown = std::pin::pin!(shutdown);
    // Why a bound: each connection may hold a request head (up to ~400 KiB)
    // and a body (MAX_BODY_BYTES) for as long as the read timeouts allow,
    // before anything is verified. At the bound, a new connection is
    // accepted and the one that has waited longest for a request head is
    // closed in its place (see `waiting`); when every connection has a
    // request in progress, the new one waits until one closes (connections
    // after it wait in the kernel's listen backlog, costing nothing here).
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut saturated = false;

    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: keep serving the
                    // open connections and try again shortly.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                saturated = false;
                permit
            }
            Err(_) => {
                let shed = open.shed_oldest();
                if !saturated {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        shed,
                        "connection limit reached: connections waiting for a request head are closed, oldest \
                         first, to admit new ones; when none waits, new connections wait until one closes"
                    );
                }
                saturated = true;
                tokio::select! {
                    permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let stop = shutting_down.child_token();
        let connection = Arc::new(open.accepted(stop.clone()));
        let (started, answered) = (connection.clone(), connection.clone());
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(move |request: hyper::Request<Incoming>| {
                    started.request_started();
                    let mut request = request.map(axum::body::Body::new);
                    // Whom operator tokens are counted against (`guessing`).
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request
                })
                .map_response(move |response| {
                    answered.answered();
                    response
                }),
        );
        let serving = builder.serve_connection(TokioIo::new(stream), service);
        tasks.spawn(async move {
            let mut serving = std::pin::pin!(serving);
            let ended = tokio::select! {
                ended = serving.as_mut() => ended,
                () = stop.cancelled() => {
                    // Shutdown, or shed: the request in progress, if any, is
                    // answered; then the connection closes.
                    serving.as_mut().graceful_shutdown();
                    serving.await
                }
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(connection);
            drop(permit);
        });
    }

    drop(listener);
    tracing::info!("shutting down: listener closed, draining in-flight deliveries");
    shutting_down.cancel();
    tasks.close();
    let drained = tokio::time::timeout(grace, async {
        tasks.wait().await;
        workers.close().await;
    })
    .await
    .is_ok();
    if !drained {
        tracing::warn!(grace_secs = grace.as_secs(), "shutdown grace expired with deliveries in flight");
    }
    drained
}
