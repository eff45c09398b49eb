//! Where the server listens (`KEYGATE_LISTEN`): a TCP address, or a Unix domain socket
//! (`unix:/path/keygate.sock`) for a gateway on the same host (docs/gateways.md).
//!
//! A Unix socket's file is keygate's while it runs: one left by a crash (nothing listens
//! on it) is replaced at the next start, a live one (another process serves it) or a path
//! that is not a socket is a startup error, and the file is removed when the server stops
//! (a graceful stop or a failed start), unless something else has replaced it meanwhile.

use anyhow::{Context, bail};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The address a server listens on, as bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddr {
    /// The TCP address (`None` for a Unix socket).
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Self::Tcp(a) => Some(*a),
            Self::Unix(_) => None,
        }
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "http://{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// The socket and the guard that removes its file.
    Unix(UnixListener, SocketFile),
}

impl Listener {
    /// Binds `listen` (`HOST:PORT` or `unix:/PATH`); a Unix socket's file gets `mode`.
    pub fn bind(listen: &str, mode: u32) -> anyhow::Result<(Self, ListenAddr)> {
        match listen.strip_prefix("unix:") {
            Some(path) => {
                let path = Path::new(path);
                if path.as_os_str().is_empty() {
                    bail!("KEYGATE_LISTEN=unix: needs a path (unix:/run/keygate/keygate.sock)");
                }
                let (listener, file) = bind_unix(path, mode)?;
                Ok((Self::Unix(listener, file), ListenAddr::Unix(path.to_path_buf())))
            }
            None => {
                let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
                let addr = listener.local_addr()?;
                Ok((Self::Tcp(listener), ListenAddr::Tcp(addr)))
            }
        }
    }
}

/// Binds a Unix socket at `path` with permissions `mode`, replacing a stale socket file.
fn bind_unix(path: &Path, mode: u32) -> anyhow::Result<(UnixListener, SocketFile)> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                bail!("binding unix:{shown}: another process is listening on this socket");
            }
            // Left by a process that ended without removing it (a crash, SIGKILL).
            std::fs::remove_file(path).with_context(|| format!("removing the stale socket {shown}"))?;
            log::info!("replaced the stale socket {shown}");
        }
        Ok(_) => bail!(
            "binding unix:{shown}: the path exists and is not a socket (keygate replaces only a socket)"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("binding unix:{shown}")),
    }
    let listener = UnixListener::bind(path).with_context(|| format!("binding unix:{shown}"))?;
    let file = SocketFile::of(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the permissions of {shown} to {mode:04o}"))?;
    Ok((listener, file))
}

/// Removes the socket file it was made for when dropped, if the path still names that file
/// (the same device and inode: not a socket another process bound there since).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    fn of(path: &Path) -> anyhow::Result<Self> {
        let m = std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Self { path: path.to_path_buf(), dev: m.dev(), ino: m.ino() })
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            log::warn!("could not remove the socket {}: {e}", self.path.display());
        }
    }
}
