//! A real SMTP listener on loopback, small enough to read: EHLO/HELO, MAIL,
//! RCPT, DATA, RSET, NOOP, QUIT. It records every message it accepts, and
//! can be told to refuse (421), as a server that is down would, or to
//! stall, as a server that hangs would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One accepted message.
#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    /// Headers and body, dot-stuffing undone.
    pub data: String,
}

impl Received {
    /// The first header called `name` (unfolded lines are enough here).
    pub fn header(&self, name: &str) -> Option<&str> {
        let headers = self.data.split("\r\n\r\n").next()?;
        headers.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    pub fn message_id(&self) -> String {
        self.header("Message-ID").expect("a Message-ID").to_string()
    }
}

#[derive(Default)]
struct State {
    messages: Vec<Received>,
    refusing: bool,
    /// Connections held ungreeted so far.
    stalled: usize,
}

/// The listener; stops when dropped.
pub struct SmtpServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stalling: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl SmtpServer {
    pub async fn start() -> SmtpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let (stalling, stalled) = watch::channel(false);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(session(stream, shared.clone(), stalled.clone()));
            }
        });
        SmtpServer { addr, state, stalling, task }
    }

    /// `SMTP_URL` for this server.
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// Every message accepted so far.
    pub fn messages(&self) -> Vec<Received> {
        self.state.lock().unwrap().messages.clone()
    }

    /// From now on, answer 421 (service not available) to new connections
    /// and to MAIL on open ones; or accept again.
    pub fn refuse(&self, refusing: bool) {
        self.state.lock().unwrap().refusing = refusing;
    }

    /// From now on, accept connections but greet none of them (the client
    /// waits, up to its timeout) until `stall(false)`, which greets those
    /// held and carries on.
    pub fn stall(&self, stalling: bool) {
        self.stalling.send_replace(stalling);
    }

    /// Polls until `count` connections in all have been held ungreeted.
    pub async fn until_stalled(&self, count: usize) {
        for _ in 0..1000 {
            if self.state.lock().unwrap().stalled >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{count} connections never stalled");
    }

    /// Polls until `count` messages arrived (the condition, not a guess at its timing).
    pub async fn until_received(&self, count: usize) -> Vec<Received> {
        for _ in 0..1000 {
            let messages = self.messages();
            if messages.len() >= count {
                return messages;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {count} messages, got {}", self.messages().len());
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn session(
    stream: TcpStream,
    state: Arc<Mutex<State>>,
    mut stalling: watch::Receiver<bool>,
) -> std::io::Result<()> {
    if *stalling.borrow_and_update() {
        state.lock().unwrap().stalled += 1;
        // An error: the server was dropped while this connection was held.
        if stalling.wait_for(|stalling| !stalling).await.is_err() {
            return Ok(());
        }
    }
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let refusing = || state.lock().unwrap().refusing;
    if refusing() {
        return write.write_all(b"421 test server not available\r\n").await;
    }
    write.write_all(b"220 test ESMTP\r\n").await?;
    let (mut from, mut to) = (String::new(), Vec::new());
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") {
            b"250-test\r\n250 8BITMIME\r\n"
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            b"250 OK\r\n"
        } else if upper.starts_with("RSET") {
            (from, to) = (String::new(), Vec::new());
            b"250 OK\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            if refusing() {
                return write.write_all(b"421 test server not available\r\n").await;
            }
            from = line[10..].trim().to_string();
            b"250 OK\r\n"
        } else if upper.starts_with("RCPT TO:") {
            to.push(line[8..].trim().to_string());
            b"250 OK\r\n"
        } else if upper == "DATA" {
            write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
            let mut data = String::new();
            while let Some(line) = lines.next_line().await? {
                if line == "." {
                    break;
                }
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
                data.push_str("\r\n");
            }
            let message = Received { from: std::mem::take(&mut from), to: std::mem::take(&mut to), data };
            state.lock().unwrap().messages.push(message);
            b"250 OK queued\r\n"
        } else if upper == "QUIT" {
            return write.write_all(b"221 bye\r\n").await;
        } else {
            b"502 not implemented\r\n"
        };
        write.write_all(reply).await?;
    }
    Ok(())
}
