//! A minimal HTTP/1.1 client over a real TCP socket, for the tests that are
//! about the socket itself (server, shutdown, slow or vanishing clients).
//! Also compiled into the fault suite (`tests/faults`).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::signing::Delivery;

/// Longest a test waits for an answer before calling the request lost.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// An answer read off the socket.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Status line and headers, as received.
    pub head: String,
    /// The body as JSON, `Null` when it is not JSON.
    pub body: Value,
}

impl Response {
    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The raw bytes of `delivery` as an HTTP/1.1 request that closes the connection.
pub fn request_bytes(delivery: &Delivery) -> Vec<u8> {
    let mut head = format!("POST {} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n", delivery.path);
    for (name, value) in &delivery.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", delivery.body.len()));
    [head.into_bytes(), delivery.body.clone()].concat()
}

/// Sends `delivery` over a new connection and reads the answer. An error is
/// what a provider sees as "no answer": refused, reset, closed, timed out.
pub async fn send(addr: SocketAddr, delivery: &Delivery) -> io::Result<Response> {
    send_raw(addr, &request_bytes(delivery)).await
}

/// Sends raw request bytes over a new connection and reads the answer.
pub async fn send_raw(addr: SocketAddr, request: &[u8]) -> io::Result<Response> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, io::Error>(response)
    };
    let response = tokio::time::timeout(ANSWER_TIMEOUT, exchange).await.map_err(io::Error::other)??;
    if response.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(parse(&response))
}

/// Sends `delivery` over a new connection and returns status and JSON body.
pub async fn post(addr: SocketAddr, delivery: &Delivery) -> (u16, Value) {
    let response = send(addr, delivery).await.unwrap();
    (response.status, response.body)
}

/// Status code, head and JSON body of a raw HTTP/1.1 response.
pub fn parse(response: &[u8]) -> Response {
    let text = String::from_utf8_lossy(response);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Response { status, head: head.to_string(), body: serde_json::from_str(body).unwrap_or(Value::Null) }
}
