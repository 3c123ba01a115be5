//! `--proxy LISTEN`: a TCP proxy in front of the system's Redis, for the `stall` fault. The
//! system connects to LISTEN instead of Redis; each of its connections is forwarded as it is,
//! until the nemesis stalls one (nothing moves either way while the others go on: one holder
//! slow, as a process pause would make it, without touching the process) or resets it.
//!
//! Threads and blocking sockets: two pumps a connection, for the few connections of a test
//! system. A pump checks the stall between reads, so a stall takes hold at the connection's next
//! bytes.

use crate::error::ProxyError;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One proxied connection.
struct Link {
    client: TcpStream,
    server: TcpStream,
    stalled: AtomicBool,
    closed: AtomicBool,
    /// Pumps still running (two at the start): the link is forgotten when none is.
    pumps: AtomicU8,
}

/// The running proxy; stops accepting when dropped (the connections it holds end with their
/// peers).
pub struct Proxy {
    listen: SocketAddr,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on `listen` and forwards every connection to `upstream`. An address that cannot
    /// be bound is an error naming it.
    pub fn start(listen: &str, upstream: Vec<SocketAddr>) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind(listen).map_err(|source| ProxyError::Listen {
            listen: listen.to_string(),
            source,
        })?;
        let addr = listener.local_addr().map_err(ProxyError::Socket)?;
        listener.set_nonblocking(true).map_err(ProxyError::Socket)?;
        let proxy = Proxy {
            listen: addr,
            links: Arc::default(),
            stop: Arc::default(),
        };
        let (links, stop) = (proxy.links.clone(), proxy.stop.clone());
        thread::Builder::new()
            .name("lockctl-proxy".into())
            .spawn(move || accept(listener, upstream, links, stop))
            .map_err(ProxyError::Thread)?;
        Ok(proxy)
    }

    /// Where the system should connect.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// The links still open (those whose pumps have all ended are forgotten here).
    fn live(&self) -> Vec<Arc<Link>> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        links.retain(|l| l.pumps.load(Ordering::SeqCst) > 0);
        links
            .iter()
            .filter(|l| !l.closed.load(Ordering::SeqCst))
            .cloned()
            .collect()
    }

    /// How many connections are open through the proxy now.
    pub fn open(&self) -> usize {
        self.live().len()
    }

    /// Stalls connection `pick` (of the live ones, modulo their number), or resets it when
    /// `reset`; what was done, in words, or `None` when no connection was open.
    pub fn strike(&self, pick: usize, reset: bool) -> Option<String> {
        let live = self.live();
        let link = live.get(pick % live.len().max(1))?;
        let peer = link
            .client
            .peer_addr()
            .map_or("a connection".to_string(), |a| a.to_string());
        if reset {
            // An abortive close (RST) both ways, as a broken network leaves it: the pumps are
            // woken (their reads end) and the sockets' last close, with no linger, resets.
            for s in [&link.client, &link.server] {
                let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
                let _ = s.shutdown(Shutdown::Read);
            }
            link.closed.store(true, Ordering::SeqCst);
            Some(format!(
                "reset the connection from {peer} (of {})",
                live.len()
            ))
        } else {
            link.stalled.store(true, Ordering::SeqCst);
            Some(format!(
                "stalled the connection from {peer} (of {})",
                live.len()
            ))
        }
    }

    /// Lets every stalled connection go on, closed ones included (a pump may still hold bytes
    /// of one).
    pub fn unstall_all(&self) {
        let links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        for l in links.iter() {
            l.stalled.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unstall_all();
    }
}

fn accept(
    listener: TcpListener,
    upstream: Vec<SocketAddr>,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        // Each address of the upstream in turn (localhost may be ::1 first and Redis on IPv4).
        let Some(server) = upstream
            .iter()
            .find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(2)).ok())
        else {
            continue;
        };
        let _ = client.set_nonblocking(false);
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        let link = Arc::new(Link {
            client,
            server,
            stalled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            pumps: AtomicU8::new(2),
        });
        links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(link.clone());
        for upward in [true, false] {
            let (link, stop) = (link.clone(), stop.clone());
            let _ = thread::Builder::new()
                .name("lockctl-proxy-pump".into())
                .spawn(move || pump(&link, upward, &stop));
        }
    }
}

/// Copies one direction of `link` until either side closes, holding bytes while it is
/// stalled.
fn pump(link: &Link, upward: bool, stop: &AtomicBool) {
    let (from, to) = match upward {
        true => (&link.client, &link.server),
        false => (&link.server, &link.client),
    };
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while link.stalled.load(Ordering::SeqCst)
            && !stop.load(Ordering::SeqCst)
            && !link.closed.load(Ordering::SeqCst)
        {
            thread::sleep(Duration::from_millis(2));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    link.closed.store(true, Ordering::SeqCst);
    let _ = to.shutdown(Shutdown::Write);
    link.pumps.fetch_sub(1, Ordering::SeqCst);
}
