//! A host on the other side of a real link: a network namespace joined to
//! this one by a veth pair, whose packets a test can drop silently (no FIN,
//! no RST, the peer's sockets hang) as when a host is powered off or a
//! firewall starts dropping. Needs root, `ip` and `iptables`; everything is
//! removed when the guard drops, also when the test fails.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces this process made, for unique names and addresses.
static MADE: AtomicU32 = AtomicU32::new(0);

/// A network namespace with a veth pair to this one. Dropped: the namespace
/// and the link are deleted (deleting the namespace deletes its end of the
/// pair, and so the pair).
pub struct Namespace {
    pub name: String,
    /// This side's address.
    pub host_addr: Ipv4Addr,
    /// The namespace's address.
    pub addr: Ipv4Addr,
    host_link: String,
}

impl Namespace {
    /// Creates the namespace and the link, with a /30 of their own: names
    /// and addresses come from this process's id and a counter, so tests
    /// (and test binaries) running at once do not meet.
    pub fn create() -> Namespace {
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("wib-faults-{pid}-{n}");
        let (host_link, peer_link) = (format!("wf{pid:x}h{n}"), format!("wf{pid:x}n{n}"));
        // 2^20 blocks of four addresses in 10.100.0.0-10.163.255.255.
        let block = (pid.wrapping_mul(16).wrapping_add(n)) & 0xf_ffff;
        let base = u32::from(Ipv4Addr::new(10, 100, 0, 0)) + block * 4;
        let (host_addr, addr) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
        // The guard exists before the first command, so a failure half way
        // still removes what was made.
        let namespace = Namespace { name, host_addr, addr, host_link };
        let name = namespace.name.as_str();
        run(&["ip", "netns", "add", name]);
        run(&["ip", "link", "add", &namespace.host_link, "type", "veth", "peer", "name", &peer_link]);
        run(&["ip", "link", "set", &peer_link, "netns", name]);
        run(&["ip", "addr", "add", &format!("{host_addr}/30"), "dev", &namespace.host_link]);
        run(&["ip", "link", "set", &namespace.host_link, "up"]);
        run(&["ip", "-n", name, "addr", "add", &format!("{addr}/30"), "dev", &peer_link]);
        run(&["ip", "-n", name, "link", "set", &peer_link, "up"]);
        run(&["ip", "-n", name, "link", "set", "lo", "up"]);
        namespace
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// From now on every packet into or out of the namespace is dropped.
    pub fn cut(&self) {
        for chain in ["INPUT", "OUTPUT"] {
            run(&["ip", "netns", "exec", &self.name, "iptables", "-w", "-A", chain, "-j", "DROP"]);
        }
    }

    /// Lets packets through again.
    pub fn heal(&self) {
        for chain in ["INPUT", "OUTPUT"] {
            run(&["ip", "netns", "exec", &self.name, "iptables", "-w", "-D", chain, "-j", "DROP"]);
        }
    }

    /// A TCP listener on the namespace's address (`port` 0: any free one):
    /// bound from a thread that has entered the namespace, so the socket
    /// lives there (a socket stays in the namespace it was made in,
    /// whichever thread then uses it).
    pub fn listen(&self, port: u16) -> tokio::net::TcpListener {
        let path = format!("/run/netns/{}", self.name);
        let addr = (self.addr, port);
        let listener = std::thread::spawn(move || {
            let handle = std::fs::File::open(&path).expect("the namespace's handle");
            nix::sched::setns(handle.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("enter the namespace");
            let listener = std::net::TcpListener::bind(addr).expect("bind in the namespace");
            listener.set_nonblocking(true).unwrap();
            listener
        })
        .join()
        .expect("the thread that binds in the namespace");
        tokio::net::TcpListener::from_std(listener).unwrap()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        // Gone with the namespace's end; only if that failed is it still here.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Runs a setup command, panicking with its output if it fails.
fn run(args: &[&str]) {
    let output = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?} failed (the network fault tests need root, iproute2 and iptables): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
