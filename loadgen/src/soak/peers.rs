//! What the service talks to during the soak besides its clients: the
//! team's app, which fails one request in a hundred, and Paddle's event
//! API, which reconciliation reads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What a peer has answered so far.
#[derive(Default)]
pub struct Answered {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
}

impl Answered {
    /// Requests answered, failures included.
    pub fn total(&self) -> u64 {
        self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed)
    }
}

/// Serves `answer` (given the request's number, from 1) on a loopback port.
async fn serve(
    answer: impl Fn(u64) -> (StatusCode, &'static str) + Send + Sync + 'static,
) -> anyhow::Result<(SocketAddr, Arc<Answered>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let answered = Arc::new(Answered::default());
    let (counts, answer) = (answered.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (counts, answer) = (counts.clone(), answer.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let (counts, answer) = (counts.clone(), answer.clone());
                    async move {
                        // Read the whole body, as an app would before answering.
                        let _ = request.into_body().collect().await;
                        let (status, body) = answer(counts.total() + 1);
                        let counter = if status.is_success() { &counts.ok } else { &counts.failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                        let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, answered))
}

/// The team's app: every hundredth request is answered 500, the others 200.
pub async fn flaky_receiver() -> anyhow::Result<(SocketAddr, Arc<Answered>)> {
    serve(|n| if n % 100 == 0 { (StatusCode::INTERNAL_SERVER_ERROR, "") } else { (StatusCode::OK, "") }).await
}

/// Paddle's `GET /events`: an empty log, so each reconciliation reads one
/// page and finds no gap.
pub async fn paddle_api() -> anyhow::Result<(SocketAddr, Arc<Answered>)> {
    serve(|_| {
        (
            StatusCode::OK,
            r#"{"data":[],"meta":{"request_id":"soak","pagination":{"next":null,"has_more":false}}}"#,
        )
    })
    .await
}
