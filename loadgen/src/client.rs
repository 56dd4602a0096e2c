//! Keep-alive HTTP/1.1 connections, each sending one request at a time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::events::SignedRequest;

/// What one request came back with.
pub struct Sample {
    /// Index of the request (its event) in the run.
    pub request: usize,
    /// When the request left.
    pub sent_at: SystemTime,
    pub latency: Duration,
    /// HTTP status, or 0 when the connection failed.
    pub status: u16,
    /// The answer carried a `Retry-After` header.
    pub retry_after: bool,
    pub idempotent: bool,
    /// The `error` of an answer's JSON body, if it has one.
    pub error: Option<String>,
}

/// One open connection to the service.
pub struct Connection {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Connects and completes the HTTP/1.1 handshake.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Connection { addr, sender })
    }

    /// Sends request `index` of `requests` and reads the whole answer; a
    /// broken connection is reopened for the next request and reported as
    /// status 0.
    pub async fn send(&mut self, requests: &[SignedRequest], index: usize) -> Sample {
        let request = &requests[index];
        let (sent_at, started) = (SystemTime::now(), Instant::now());
        let answer = async {
            self.sender.ready().await?;
            let mut builder = Request::post(request.path)
                .header("host", "localhost")
                .header("content-type", "application/json");
            for (name, value) in &request.headers {
                builder = builder.header(*name, value);
            }
            let response = self.sender.send_request(builder.body(Full::new(request.body.clone()))?).await?;
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, retry_after, body))
        }
        .await;
        let (status, retry_after, body) = match answer {
            Ok(answer) => answer,
            Err(_) => {
                if let Ok(fresh) = Connection::open(self.addr).await {
                    *self = fresh;
                }
                (0, false, Bytes::new())
            }
        };
        Sample {
            request: index,
            sent_at,
            latency: started.elapsed(),
            status,
            retry_after,
            idempotent: contains(&body, b"\"idempotent\":true"),
            error: error_of(&body),
        }
    }
}

/// Sends every request `copies` times. Connections form groups of `copies`;
/// each group takes the next event and fires its copies together, one per
/// connection, so they reach the service at the same moment. With a
/// `spacing`, event `i` leaves no earlier than `i × spacing` after the start
/// (a steady rate, whatever the answers take).
pub async fn run(
    connections: Vec<Connection>,
    requests: Arc<Vec<SignedRequest>>,
    copies: usize,
    spacing: Option<Duration>,
) -> anyhow::Result<Vec<Sample>> {
    let started = tokio::time::Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut groups = Vec::new();
    let mut connections = connections.into_iter();
    loop {
        let mut group: Vec<Connection> = connections.by_ref().take(copies).collect();
        if group.len() < copies {
            break;
        }
        let (next, requests) = (next.clone(), requests.clone());
        groups.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= requests.len() {
                    break;
                }
                if let Some(spacing) = spacing {
                    tokio::time::sleep_until(started + spacing * index as u32).await;
                }
                let sends = group.iter_mut().map(|connection| connection.send(&requests, index));
                // join_all polls them in one task: the requests leave back to back.
                samples.extend(join_all(sends).await);
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for group in groups {
        samples.extend(group.await?);
    }
    Ok(samples)
}

/// The `error` string of a JSON body (`{"error": "..."}`), if any.
fn error_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(value.get("error")?.as_str()?.to_string())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}
