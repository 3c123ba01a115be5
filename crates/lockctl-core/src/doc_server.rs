//! A private `redis-server` for the documentation's examples, which run as doc tests: started
//! on a free loopback port, stopped when dropped. Not part of the API (hidden from the docs).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`, stopped on drop.
pub struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts one, or says on stderr why the example is skipped (no `redis-server` installed, or
/// it never listened) and returns `None`.
pub fn start() -> Option<Server> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok()?
        .port();
    let spawned = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn();
    let Ok(child) = spawned else {
        eprintln!("skipped: redis-server is not installed (apt-get install redis-server)");
        return None;
    };
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            eprintln!("skipped: redis-server never listened on port {port}");
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(server)
}
