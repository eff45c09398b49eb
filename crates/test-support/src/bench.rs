//! Latency reports of the benchmarks that time whole operations (no criterion): p50 and
//! p99 of a set of samples, one line per operation and backend.

use std::time::Duration;

/// The `p` quantile (0 to 1) of sorted samples, nearest rank.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Prints `backend op p50 .. ms p99 .. ms (n=..)`.
pub fn report(backend: &str, op: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{backend:8} {op:40} p50 {:>8.3} ms   p99 {:>8.3} ms   (n={})",
        percentile(&samples, 0.50).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.len()
    );
}
