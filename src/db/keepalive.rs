//! TCP keepalives on the database connections.
//!
//! Why: a database host that disappears without a word (powered off, its
//! address moved by a failover, a firewall that drops instead of refusing)
//! leaves the service's idle connections looking open, and the first
//! statement on one would wait for the delivery's 60 s deadline. Keepalive
//! probes find such a connection dead after [`Keepalive::bound`] of silence,
//! and `TCP_USER_TIMEOUT`, set to the same bound, ends a connection whose
//! data goes unacknowledged as long, so a delivery in flight fails then too
//! (503), instead of at its deadline.
//!
//! Why this way: sqlx opens its sockets itself and has neither a keepalive
//! setting nor a hook on the socket. So after each new connection, every
//! TCP socket of this process that is connected to the database's address
//! gets the settings (on the ones that already have them, nothing changes).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

/// TCP keepalive settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence on a connection before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection is dropped.
    pub count: u32,
}

impl Keepalive {
    /// The longest a peer that went silent goes unnoticed: `idle +
    /// interval × count`.
    pub fn bound(&self) -> Duration {
        self.idle + self.interval * self.count
    }

    /// Sets keepalive probes and `TCP_USER_TIMEOUT` on `socket`.
    pub fn apply(&self, socket: SockRef<'_>) -> io::Result<()> {
        let probes =
            TcpKeepalive::new().with_time(self.idle).with_interval(self.interval).with_retries(self.count);
        socket.set_tcp_keepalive(&probes)?;
        socket.set_tcp_user_timeout(Some(self.bound()))
    }

    /// Applies the settings to every TCP socket of this process that is
    /// connected to one of `peers`; returns how many there were.
    pub fn apply_to_sockets_to(&self, peers: &[SocketAddr]) -> usize {
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return 0;
        };
        let fds = entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<RawFd>().ok());
        fds.filter(|&fd| {
            // SAFETY: `fd` was open when listed. Should another thread close
            // it (and the number be reused) meanwhile, the calls below fail
            // on it (EBADF, ENOTSOCK) or touch only a socket connected to
            // the database; nothing here reads or writes memory through it.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let socket = SockRef::from(&fd);
            let peer = socket.peer_addr().ok().and_then(|peer| peer.as_socket());
            peer.is_some_and(|peer| peers.contains(&peer)) && self.apply(socket).is_ok()
        })
        .count()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn sockets_connected_to_the_peer_get_the_settings_and_no_other_socket_does() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let keepalive =
            Keepalive { idle: Duration::from_secs(7), interval: Duration::from_secs(3), count: 4 };

        assert_eq!(keepalive.apply_to_sockets_to(&[listener.local_addr().unwrap()]), 1);

        let socket = SockRef::from(&to_peer);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), Duration::from_secs(3));
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 4);
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(Duration::from_secs(19)));
        for untouched in [SockRef::from(&to_other), SockRef::from(&accepted), SockRef::from(&listener)] {
            assert!(!untouched.keepalive().unwrap());
            assert_eq!(untouched.tcp_user_timeout().unwrap(), None);
        }
    }
}
