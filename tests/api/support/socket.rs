//! A minimal HTTP/1.1 client over a real TCP socket, for the tests that are
//! about the socket itself (server, shutdown, slow or vanishing clients).

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::signing::Delivery;

/// The raw bytes of `delivery` as an HTTP/1.1 request that closes the connection.
pub fn request_bytes(delivery: &Delivery) -> Vec<u8> {
    let mut head = format!("POST {} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n", delivery.path);
    for (name, value) in &delivery.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", delivery.body.len()));
    [head.into_bytes(), delivery.body.clone()].concat()
}

/// Sends `delivery` over a new connection and returns status and JSON body.
pub async fn post(addr: SocketAddr, delivery: &Delivery) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&request_bytes(delivery)).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    parse_response(&response)
}

/// Status code and JSON body of a raw HTTP/1.1 response.
pub fn parse_response(response: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(response);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}
