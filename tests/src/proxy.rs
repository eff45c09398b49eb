//! A TCP proxy the tests can cut: stands between keygate and PostgreSQL to simulate the
//! database going away (every connection closed, new ones refused) and coming back,
//! without stopping the PostgreSQL server other tests share.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

#[derive(Debug)]
pub struct CuttableProxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl CuttableProxy {
    /// Forwards a local port to `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let down = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, l) = (down.clone(), live.clone());
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
                pump(client.try_clone(), server.try_clone());
                pump(server.try_clone(), client.try_clone());
            }
        });
        Ok(Self { addr, down, live })
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

fn pump(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else { return };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
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
