//! A real Prometheus (the Debian package; `.ci/run` installs it) scrapes the real binary's
//! `/metrics`; its HTTP API then answers the counts of a known sequence of requests.
#![allow(clippy::unwrap_used)]

use keygate_test_support::http::try_http;
use keygate_test_support::{Proc, free_port, http, keygate_command, start_keygate};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_prometheus_test_0123456789";

fn limit(port: u16, body: &str) -> String {
    http(
        port,
        &format!(
            "POST /v1/ratelimits.limit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The value of a PromQL query that answers one sample, once it has one.
fn query(prom: u16, promql: &str) -> Option<f64> {
    let q: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    // Prometheus may not listen yet: no answer is no value.
    let res = try_http(
        prom,
        &format!("GET /api/v1/query?query={q} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
    .ok()?;
    let body = res.split("\r\n\r\n").nth(1)?;
    // Chunked or not, the JSON object is the one line that starts with `{`.
    let json = body.lines().find(|l| l.starts_with('{'))?;
    let v: Value = serde_json::from_str(json).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[test]
#[ignore = "needs prometheus (Debian package `prometheus`; .ci/run installs it) and runs with --include-ignored"]
fn prometheus_scrapes_the_decisions_and_requests_of_a_known_sequence() {
    let prometheus = which("prometheus").expect("prometheus is not installed: apt-get install prometheus");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = keygate_command(BIN, &format!("sqlite://{}", dir.path().join("k.db").display()), port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("RUST_LOG", "warn,keygate=info");
    let _keygate = start_keygate(cmd);

    // 5 passed and 2 denied decisions, one 404.
    for _ in 0..7 {
        let res = limit(port, r#"{"namespace":"prom","identifier":"u","limit":5,"duration":60000}"#);
        assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    }
    assert!(
        http(port, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 404")
    );

    let prom = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: keygate\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(prometheus);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{prom}"));
    let _prometheus = Proc::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    let passed = r#"keygate_ratelimit_decisions_total{outcome="passed",store="memory"}"#;
    let denied = r#"keygate_ratelimit_decisions_total{outcome="denied",store="memory"}"#;
    let requests = r#"keygate_http_requests_total{route="/v1/ratelimits.limit",status="200"}"#;
    let unmatched = r#"keygate_http_requests_total{route="unmatched",status="404"}"#;
    loop {
        let got = [query(prom, passed), query(prom, denied), query(prom, requests), query(prom, unmatched)];
        if got == [Some(5.0), Some(2.0), Some(7.0), Some(1.0)] {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus answered {got:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let up = query(prom, r#"up{job="keygate"}"#);
    assert_eq!(up, Some(1.0), "the scrape itself succeeds");
    let latency = query(prom, r#"keygate_http_request_duration_seconds_count{route="/v1/ratelimits.limit"}"#);
    assert_eq!(latency, Some(7.0));
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
}
