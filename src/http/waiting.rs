//! The open connections, and which of them are waiting for a request head:
//! the ones a server at its connection limit sheds, oldest first, to admit
//! a new connection.
//!
//! Why shed rather than wait: connections that open and send nothing (or
//! only part of a head) would otherwise hold every place until the header
//! timeout cuts them, and a client renewing them keeps the service
//! unreachable. A connection waiting for a head has nothing in progress: no
//! request has been read from it since its last answer, so closing it loses
//! nothing, and a real client opens another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Every open connection: whether it waits for a request head, since when,
/// and how to close it.
#[derive(Clone, Default)]
pub struct Connections {
    open: Arc<Mutex<HashMap<u64, Entry>>>,
    next_id: Arc<AtomicU64>,
}

struct Entry {
    /// When it began waiting for a head (its acceptance, or its last
    /// answer); `None` while a request is in progress.
    waiting_since: Option<Instant>,
    /// Cancelled to close it gracefully.
    stop: CancellationToken,
}

/// One open connection's place in [`Connections`]; leaves it when dropped.
pub struct Connection {
    id: u64,
    connections: Connections,
}

impl Connections {
    /// A connection accepted now, waiting for its first head, closed
    /// gracefully when `stop` (a child of the server's shutdown) is cancelled.
    pub fn accepted(&self, stop: CancellationToken) -> Connection {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Entry { waiting_since: Some(Instant::now()), stop };
        self.open.lock().expect("never poisoned").insert(id, entry);
        Connection { id, connections: self.clone() }
    }

    /// Closes the connection that has waited longest for a request head, if
    /// any waits: whether one was shed.
    pub fn shed_oldest(&self) -> bool {
        let mut open = self.open.lock().expect("never poisoned");
        let oldest = open
            .iter()
            .filter_map(|(id, entry)| entry.waiting_since.map(|since| (since, *id)))
            .min()
            .map(|(_, id)| id);
        // Removed at once, so that the next shed picks another one.
        match oldest.and_then(|id| open.remove(&id)) {
            Some(entry) => {
                entry.stop.cancel();
                true
            }
            None => false,
        }
    }

    fn set_waiting(&self, id: u64, waiting_since: Option<Instant>) {
        if let Some(entry) = self.open.lock().expect("never poisoned").get_mut(&id) {
            entry.waiting_since = waiting_since;
        }
    }
}

impl Connection {
    /// A request head arrived: the connection is not shed until it is answered.
    pub fn request_started(&self) {
        self.connections.set_waiting(self.id, None);
    }

    /// Its answer is sent: it waits for the next head again.
    pub fn answered(&self) {
        self.connections.set_waiting(self.id, Some(Instant::now()));
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.connections.open.lock().expect("never poisoned").remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_connection_waiting_for_a_head_is_shed_and_a_busy_one_never() {
        let connections = Connections::default();
        let tokens: Vec<CancellationToken> = (0..3).map(|_| CancellationToken::new()).collect();
        let first = connections.accepted(tokens[0].clone());
        let _second = connections.accepted(tokens[1].clone());
        let _third = connections.accepted(tokens[2].clone());
        first.request_started();
        assert!(connections.shed_oldest());
        assert_eq!(
            tokens.iter().map(CancellationToken::is_cancelled).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert!(connections.shed_oldest());
        assert!(tokens[2].is_cancelled());
        assert!(!connections.shed_oldest(), "the busy one is never shed");
        first.answered();
        assert!(connections.shed_oldest(), "once answered, it waits again");
        assert!(tokens[0].is_cancelled());
    }
}
