//! The server: accepts connections until shutdown is signalled, then stops
//! accepting and drains in-flight deliveries, bounded in time.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Serves `app` on `listener` until `shutdown` resolves; then closes the
/// listener (new connections are refused), lets open connections finish
/// their current request, and waits for the delivery tasks in `tasks`, all
/// within `grace`. Returns whether everything drained in time.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tasks: TaskTracker,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> bool {
    let mut builder = Builder::new(TokioExecutor::new());
    // Slow clients: a connection that does not send its headers in time is
    // closed (hyper needs a timer for the timeout to apply). The body has its
    // own timeout in the webhook handler.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);

    loop {
        let (stream, _peer) = tokio::select! {
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
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            app.clone().map_request(|request: hyper::Request<Incoming>| request.map(axum::body::Body::new)),
        );
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }

    drop(listener);
    tracing::info!("shutting down: listener closed, draining in-flight deliveries");
    tasks.close();
    let drained = tokio::time::timeout(grace, async {
        connections.shutdown().await;
        tasks.wait().await;
    })
    .await
    .is_ok();
    if !drained {
        tracing::warn!(grace_secs = grace.as_secs(), "shutdown grace expired with deliveries in flight");
    }
    drained
}
