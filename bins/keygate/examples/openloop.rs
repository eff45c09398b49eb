//! The latency phase of the HTTP benchmark (bins/keygate/bench/http-limit.sh): an open-loop
//! load generator for `POST /v1/ratelimits.limit`.
//!
//! Requests are *scheduled* at a fixed rate, evenly spaced (request `i` is due at
//! `start + i / rate`), and sent on whichever of the keep-alive connections is free (one
//! request in flight per connection, no pipelining). A request's latency runs from its due
//! time to the end of its response, so time spent waiting for a free connection counts too
//! (no coordinated omission). The loop busy-polls only the connections with a request in
//! flight, so on its own core it sends and reads within a few microseconds of the due time.
//!
//! Why not wrk or oha: wrk's think time (`delay()`) runs on millisecond timers, so its 64
//! connections fire together on each tick and the p99 it reports is the length of that
//! burst's queue (64 x the service time) rather than the server's latency; oha's own cost
//! on one core is ~150 us per request at 5k req/s, ten times the service time measured.
//!
//! `ROOT_KEY=... cargo run --release -p keygate --example openloop -- \
//!     127.0.0.1:8080 RATE SECONDS CONNECTIONS BODIES_FILE`
//!
//! BODIES_FILE holds one JSON body per line, used in rotation; `OPENLOOP_PATH` posts them
//! to another path than `/v1/ratelimits.limit` (e.g. `/v2/keys.verifyKey`). Prints one line:
//! `RESULT rps=.. p50_us=.. p99_us=.. errors=.. p999_us=.. max_us=..` (errors: non-200
//! answers). With `OPENLOOP_TIMELINE=1` it also prints, on stderr, every 100 ms slice of
//! due times whose slowest request took over 1 ms: stalls that recur at the same period
//! for keygate and the bare handler are the machine's, not the server's.

use anyhow::{Context, bail};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// The response read so far.
    buf: Vec<u8>,
    /// The due time of the request in flight.
    due: Instant,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, rate, seconds, connections, bodies] = args.as_slice() else {
        bail!("usage: openloop ADDR RATE SECONDS CONNECTIONS BODIES_FILE (ROOT_KEY from the environment)");
    };
    let rate: f64 = rate.parse().context("RATE: requests per second")?;
    let seconds: f64 = seconds.parse().context("SECONDS")?;
    let connections: usize = connections.parse().context("CONNECTIONS")?;
    if !(rate > 0.0 && seconds > 0.0 && connections > 0) {
        bail!("RATE, SECONDS and CONNECTIONS must be positive");
    }
    let token = std::env::var("ROOT_KEY").unwrap_or_else(|_| "none".to_string());
    let path = std::env::var("OPENLOOP_PATH").unwrap_or_else(|_| "/v1/ratelimits.limit".to_string());
    let requests: Vec<Vec<u8>> = std::fs::read_to_string(bodies)
        .with_context(|| format!("reading {bodies}"))?
        .lines()
        .filter(|line| !line.is_empty())
        .map(|body| {
            format!(
                "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .collect();
    if requests.is_empty() {
        bail!("{bodies} holds no body");
    }

    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        let stream = TcpStream::connect(addr.as_str()).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        conns.push(Conn { stream, buf: Vec::with_capacity(1024), due: Instant::now() });
    }
    // Free connections are reused in turn (FIFO): one left idle past the server's
    // keep-alive timeout (actix: 5 s) would be closed under us.
    let mut free: VecDeque<usize> = (0..connections).collect();
    let mut busy: Vec<usize> = Vec::with_capacity(connections);

    let total = (rate * seconds) as u64;
    let mut latencies_ns: Vec<u64> = Vec::with_capacity(total as usize);
    let (mut sent, mut non_200) = (0u64, 0u64);
    let mut chunk = [0u8; 4096];
    // The slowest latency (us) among the requests due in each 100 ms slice of the run.
    let mut slowest_per_slice = vec![0u64; (seconds * 10.0).ceil() as usize + 1];
    let start = Instant::now() + Duration::from_millis(10);
    loop {
        let now = Instant::now();
        while sent < total {
            let due = start + Duration::from_nanos((sent as f64 * 1e9 / rate) as u64);
            if due > now {
                break;
            }
            let Some(c) = free.pop_front() else { break };
            let request = &requests[(sent % requests.len() as u64) as usize];
            write_all(&mut conns[c].stream, request)?;
            conns[c].due = due;
            busy.push(c);
            sent += 1;
        }
        let mut i = 0;
        while i < busy.len() {
            let conn = &mut conns[busy[i]];
            match conn.stream.read(&mut chunk) {
                Ok(0) => bail!("the server closed a connection"),
                Ok(n) => conn.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            match complete_response(&conn.buf)? {
                Some(ok) => {
                    let latency = conn.due.elapsed().as_nanos() as u64;
                    latencies_ns.push(latency);
                    let slice = (conn.due.duration_since(start).as_millis() / 100) as usize;
                    if let Some(slowest) = slowest_per_slice.get_mut(slice) {
                        *slowest = (*slowest).max(latency / 1000);
                    }
                    non_200 += u64::from(!ok);
                    conn.buf.clear();
                    free.push_back(busy.swap_remove(i));
                }
                None => i += 1,
            }
        }
        if sent == total && busy.is_empty() {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();

    if std::env::var_os("OPENLOOP_TIMELINE").is_some() {
        for (slice, &slowest) in slowest_per_slice.iter().enumerate().filter(|(_, us)| **us > 1000) {
            eprintln!("due at {:>6} ms: slowest {slowest} us", slice * 100);
        }
    }
    latencies_ns.sort_unstable();
    let pct = |p: f64| {
        let at = ((latencies_ns.len() as f64 * p).ceil() as usize).clamp(1, latencies_ns.len());
        latencies_ns[at - 1] / 1000
    };
    println!(
        "RESULT rps={:.0} p50_us={} p99_us={} errors={} p999_us={} max_us={}",
        latencies_ns.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        non_200,
        pct(0.999),
        pct(1.0)
    );
    Ok(())
}

/// Writes a whole request on a non-blocking socket (a ~250-byte request to an idle
/// connection goes out in one call; the loop covers a full send buffer).
fn write_all(stream: &mut TcpStream, mut bytes: &[u8]) -> anyhow::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => bail!("the server closed a connection"),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `Some(status is 200)` once `buf` holds a whole response (headers and the
/// `Content-Length` body), `None` while more is to come.
fn complete_response(buf: &[u8]) -> anyhow::Result<Option<bool>> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
    let head = std::str::from_utf8(&buf[..head_end]).context("a response head that is not text")?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok())?
        })
        .context("a response without Content-Length")?;
    if buf.len() < head_end + 4 + length {
        return Ok(None);
    }
    if buf.len() > head_end + 4 + length {
        bail!("more bytes than one response on a connection with one request in flight");
    }
    Ok(Some(head.starts_with("HTTP/1.1 200 ")))
}
