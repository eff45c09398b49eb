//! A load generator for Envoy's rate-limit service (`ShouldRateLimit`), for the benchmark
//! `bins/keygate/bench/rls.sh`: keygate's RLS and any other speaking the same protocol
//! (limitador's), driven alike. One thread; `STREAMS` calls in flight over `CONNECTIONS`
//! HTTP/2 connections for `SECONDS`; each call one descriptor `[(KEY, <prefix>_<i>)]`, `i`
//! rotating over `IDENTIFIERS` (env `RLS_DESCRIPTORS=N`: N such descriptors a call, for
//! identifiers `i` to `i + N - 1`); the root key (env `KEYGATE_ROOT_KEY`, if set) in the
//! `x-keygate-root-key` metadata.
//!
//! ```text
//! cargo run --release -p keygate-grpc --example rls_load -- \
//!     http://127.0.0.1:18501 DOMAIN KEY SECONDS STREAMS CONNECTIONS IDENTIFIERS
//! ```
//!
//! Prints one line, `RESULT rps=… p50_us=… p99_us=… errors=… requests=…`, the shape the
//! benchmark scripts' summaries read (`bins/keygate/bench/lib.sh`): `errors` counts failed
//! calls and answers other than OK (the benchmark's limits never deny).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::time::{Duration, Instant};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

struct Load {
    url: String,
    domain: String,
    key: String,
    seconds: u64,
    streams: usize,
    connections: usize,
    identifiers: usize,
    descriptors: usize,
    root_key: Option<MetadataValue<tonic::metadata::Ascii>>,
}

fn arguments() -> Result<Load, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, domain, key, seconds, streams, connections, identifiers] = args.as_slice() else {
        return Err("usage: rls_load URL DOMAIN KEY SECONDS STREAMS CONNECTIONS IDENTIFIERS".into());
    };
    let number = |name: &str, v: &str| v.parse::<usize>().map_err(|e| format!("{name}: {e}"));
    let root_key = match std::env::var("KEYGATE_ROOT_KEY") {
        Ok(k) => Some(k.parse().map_err(|e| format!("KEYGATE_ROOT_KEY: {e}"))?),
        Err(_) => None,
    };
    Ok(Load {
        url: url.clone(),
        domain: domain.clone(),
        key: key.clone(),
        seconds: number("SECONDS", seconds)? as u64,
        streams: number("STREAMS", streams)?.max(1),
        connections: number("CONNECTIONS", connections)?.max(1),
        identifiers: number("IDENTIFIERS", identifiers)?.max(1),
        descriptors: match std::env::var("RLS_DESCRIPTORS") {
            Ok(n) => number("RLS_DESCRIPTORS", &n)?.max(1),
            Err(_) => 1,
        },
        root_key,
    })
}

/// The requests, one per identifier, built before the clock starts.
fn requests(load: &Load) -> Vec<RateLimitRequest> {
    (0..load.identifiers)
        .map(|i| RateLimitRequest {
            domain: load.domain.clone(),
            descriptors: (i..i + load.descriptors)
                .map(|d| RateLimitDescriptor {
                    entries: vec![rate_limit_descriptor::Entry {
                        key: load.key.clone(),
                        value: format!("user_{:06}@example.com", d % load.identifiers),
                    }],
                    limit: None,
                    hits_addend: None,
                    is_negative_hits: false,
                })
                .collect(),
            hits_addend: 0,
        })
        .collect()
}

/// One stream: calls until `until`; its latencies (µs) and its errors.
async fn stream(
    mut client: RateLimitServiceClient<Channel>,
    requests: std::sync::Arc<Vec<RateLimitRequest>>,
    root_key: Option<MetadataValue<tonic::metadata::Ascii>>,
    first: usize,
    until: Instant,
) -> (Vec<u32>, u64) {
    let (mut latencies, mut errors) = (Vec::with_capacity(1 << 16), 0);
    let mut i = first;
    while Instant::now() < until {
        let mut request = tonic::Request::new(requests[i % requests.len()].clone());
        if let Some(k) = &root_key {
            request.metadata_mut().insert("x-keygate-root-key", k.clone());
        }
        i += 1;
        let start = Instant::now();
        let answer = client.should_rate_limit(request).await;
        latencies.push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
        if !matches!(answer, Ok(a) if a.get_ref().overall_code == Code::Ok as i32) {
            errors += 1;
        }
    }
    (latencies, errors)
}

fn main() -> Result<(), String> {
    let load = arguments()?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut channels = Vec::new();
        for _ in 0..load.connections {
            let endpoint = Endpoint::from_shared(load.url.clone()).map_err(|e| e.to_string())?;
            channels.push(endpoint.connect().await.map_err(|e| format!("{}: {e}", load.url))?);
        }
        let requests = std::sync::Arc::new(requests(&load));
        let until = Instant::now() + Duration::from_secs(load.seconds);
        let started = Instant::now();
        let tasks: Vec<_> = (0..load.streams)
            .map(|s| {
                let client = RateLimitServiceClient::new(channels[s % channels.len()].clone());
                let first = s * load.identifiers / load.streams;
                tokio::spawn(stream(client, requests.clone(), load.root_key.clone(), first, until))
            })
            .collect();
        let (mut latencies, mut errors) = (Vec::new(), 0);
        for t in tasks {
            let (l, e) = t.await.map_err(|e| e.to_string())?;
            latencies.extend(l);
            errors += e;
        }
        let elapsed = started.elapsed().as_secs_f64();
        latencies.sort_unstable();
        let at = |q: f64| {
            latencies.get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
        };
        println!(
            "RESULT rps={:.0} p50_us={} p99_us={} errors={} requests={}",
            latencies.len() as f64 / elapsed,
            at(0.5).copied().unwrap_or(0),
            at(0.99).copied().unwrap_or(0),
            errors,
            latencies.len()
        );
        Ok(())
    })
}
