//! A TCP proxy the tests can cut: stands between keygate and PostgreSQL or Redis to
//! simulate the store going away (every connection closed, new ones refused) and coming
//! back, without stopping the server other tests share; and to inject faults short of
//! that (tests/tests/suite/faults.rs): added latency, connections dropped while new ones are
//! accepted, and half-open connections that accept bytes and never answer.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

#[derive(Debug)]
pub struct CuttableProxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    faults: Arc<Faults>,
}

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Default)]
struct Faults {
    /// Added before each chunk is forwarded, either way (ms).
    latency_ms: AtomicU64,
    /// Bytes are read and dropped: the peer's connection stays open and gets no answer.
    black_hole: AtomicBool,
}

impl CuttableProxy {
    /// Forwards a local port to `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let down = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let faults: Arc<Faults> = Arc::default();
        let (d, l, f) = (down.clone(), live.clone(), faults.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
                    continue;
                };
                for s in [&client, &server] {
                    if let Ok(c) = s.try_clone() {
                        l.lock().push(c);
                    }
                }
                pump(client.try_clone(), server.try_clone(), f.clone());
                pump(server.try_clone(), client.try_clone(), f.clone());
            }
        });
        Ok(Self { addr, down, live, faults })
    }

    /// Delays every chunk forwarded, either way, by `latency` (a round trip: twice that).
    pub fn set_latency(&self, latency: Duration) {
        self.faults.latency_ms.store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// Half-open connections: while on, bytes either way are swallowed, connections stay
    /// open, and new ones are accepted (and swallowed too).
    pub fn set_black_hole(&self, on: bool) {
        self.faults.black_hole.store(on, Ordering::SeqCst);
    }

    /// Closes every proxied connection; new ones are accepted as before.
    pub fn drop_connections(&self) {
        for s in self.live.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Closes every proxied connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for s in self.live.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

fn pump(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>, faults: Arc<Faults>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else { return };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) if faults.black_hole.load(Ordering::SeqCst) => {}
                Ok(n) => {
                    let latency = faults.latency_ms.load(Ordering::SeqCst);
                    if latency > 0 {
                        std::thread::sleep(Duration::from_millis(latency));
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// Where `host:port` sits in `postgres://user@host:port/db`.
pub fn host_port_range(url: &str) -> std::ops::Range<usize> {
    let start = url.find('@').map(|i| i + 1).or_else(|| url.find("://").map(|i| i + 3)).unwrap();
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    start..end
}

/// The URL with `host:port` replaced by `addr`.
pub fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let r = host_port_range(url);
    format!("{}{addr}{}", &url[..r.start], &url[r.end..])
}

/// A proxy to the PostgreSQL of `base` (a `postgres://` URL), and `base` through it.
pub fn proxied_postgres(base: &str) -> (CuttableProxy, String) {
    use std::net::ToSocketAddrs;
    let target = base[host_port_range(base)].to_socket_addrs().unwrap().next().unwrap();
    let proxy = CuttableProxy::start(target).unwrap();
    let url = via(base, proxy.addr);
    (proxy, url)
}
