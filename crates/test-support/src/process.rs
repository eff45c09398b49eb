//! Processes the tests start: keygate itself, and the real neighbours (nginx, Caddy,
//! Prometheus, ...). Each is killed when its [`Proc`] is dropped, whatever the test did.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A loopback port nothing listens on now, handed out once in this test process.
///
/// Taken below the kernel's ephemeral range, not from it: the OS gives ephemeral ports to
/// outgoing connections too, so a port it picked for us (bind to port 0) could be some
/// client's local port by the time the server binds it ("Address already in use", seen in
/// CI). Each process starts at its own offset (its pid) so two test processes rarely meet,
/// and a port something already listens on is skipped.
pub fn free_port() -> u16 {
    // The one counter of the test process, so that two tests never get the same port.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let high = ephemeral_low().clamp(LOW + 1_000, 32_000);
    let span = high - LOW;
    let start = std::process::id().wrapping_mul(7_919) % span;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "no free port left in {LOW}..{high}");
        let port = (LOW + (start + n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The first port the kernel hands to outgoing connections (Linux's
/// `ip_local_port_range`; 32768 where it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Waits (at most 30 s) until something accepts connections on `127.0.0.1:port`.
pub fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How a [`Proc`] is stopped when dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL at once.
    Kill,
    /// SIGTERM, then SIGKILL if it has not ended within 5 s (a process that must stop its
    /// own children: nginx's master, whose SIGKILL would leave its workers running).
    Term,
}

/// A child process, stopped on drop; its stdout and stderr lines are collected by threads
/// (so a chatty process never blocks on a full pipe) and read with [`Proc::wait_for`] and
/// [`Proc::output`].
#[derive(Debug)]
pub struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    stop: Stop,
}

impl Proc {
    /// Spawns `cmd` with its stdout and stderr piped to the collector.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stdout.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Self { child, lines, seen: Vec::new(), stop: Stop::Kill }
    }

    /// Stops it with SIGTERM first when dropped (see `Stop::Term`).
    pub fn terminate_on_drop(mut self) -> Self {
        self.stop = Stop::Term;
        self
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most `limit`) for a line containing `needle`; false when the time ran out
    /// or the process ended first.
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }

    /// The lines read so far (by [`Proc::wait_for`]).
    pub fn lines(&self) -> &[String] {
        &self.seen
    }

    /// Waits for the process to end by itself (at most `limit`): its exit code, if it ended.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits for the process to end (however long it takes): its exit status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
    }

    /// Everything printed so far, the process killed first when `stop` (else waited for).
    pub fn output(&mut self, stop: bool) -> String {
        if stop {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.stop == Stop::Term {
            self.terminate();
            if self.wait_exit(Duration::from_secs(5)).is_some() {
                return;
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The keygate binary `bin` (a test's `env!("CARGO_BIN_EXE_keygate")`) as a server on
/// `db`, listening on `127.0.0.1:port` with one worker, its settings from the environment
/// only: no root key, Redis or config file inherited from the test's own environment.
/// Add or change settings on the returned command.
pub fn keygate_command(bin: &str, db: &str, port: u16) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("DATABASE_URL", db)
        .env("KEYGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("KEYGATE_WORKERS", "1")
        .env("RUST_LOG", "info,keygate::access=off")
        .env_remove("KEYGATE_ROOT_KEY")
        .env_remove("KEYGATE_CONFIG")
        .env_remove("KEYGATE_LOG_FORMAT")
        .env_remove("REDIS_URL")
        .env("KEYGATE_REDIS_KEY_PREFIX", crate::redis_prefix_for(db));
    cmd
}

/// Starts a keygate server command and waits (at most 30 s) until it says it listens;
/// panics with everything it printed when it does not.
pub fn start_keygate(cmd: Command) -> Proc {
    let mut proc = Proc::spawn(cmd);
    if !proc.wait_for("keygate listening on", Duration::from_secs(30)) {
        panic!("keygate did not start:\n{}", proc.output(true));
    }
    proc
}
