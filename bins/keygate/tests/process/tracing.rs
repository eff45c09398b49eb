//! OpenTelemetry traces from the real binary to an OTLP receiver in this test, built on
//! the OTLP protobuf definitions (`opentelemetry-proto`): over HTTP/protobuf
//! (`POST /v1/traces`) and over gRPC (`TraceService/Export`). For a verification sent with a
//! `traceparent`, one trace arrives: the HTTP span, a child of the caller's span, with its
//! route, status, request id and workspace, and under it the verification cache (hit or
//! miss), the blocking pool's wait and the database; no secret in any of it.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{
    Proc, TestDb, free_port, http, keygate_command, redis_cluster, redis_prefix_for, redis_url, start_keygate,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_tracing_test_0123456789abcdef";

/// What the receiver got: each export request, and how it came (path, content type).
#[derive(Default)]
struct Received {
    exports: Vec<ExportTraceServiceRequest>,
    how: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

/// An OTLP/HTTP receiver on a free port: `POST /v1/traces` with a protobuf body, answered
/// 200 with an empty `ExportTraceServiceResponse`.
fn http_receiver() -> (u16, Shared) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Shared::default();
    let shared = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let got = shared.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                // One request after another on a kept-alive connection.
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut length, mut content_type) = (0, String::new());
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        let (name, value) = line.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap(),
                            "content-type" => content_type = value.trim().to_string(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let export = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                    {
                        let mut got = got.lock().unwrap();
                        got.how.push(format!("{path} {content_type}"));
                        got.exports.push(export);
                    }
                    let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                    if stream.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, got)
}

/// An OTLP/gRPC receiver (tonic, the generated `TraceService`) on a free port.
fn grpc_receiver() -> (u16, Shared, tokio::runtime::Runtime) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    struct Service(Shared);
    #[tonic::async_trait]
    impl TraceService for Service {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let mut got = self.0.lock().unwrap();
            got.how.push("grpc".into());
            got.exports.push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let port = free_port();
    let got = Shared::default();
    let service = TraceServiceServer::new(Service(got.clone()));
    runtime.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve(([127, 0, 0, 1], port).into())
            .await
            .unwrap();
    });
    keygate_test_support::wait_for_port(port, "the OTLP/gRPC receiver");
    (port, got, runtime)
}

/// A v2 call with the root key (and `extra` headers): status, `Unkey-Request-Id`, body.
fn v2(port: u16, op: &str, body: &Value, extra: &str) -> (u16, String, Value) {
    let body = body.to_string();
    let res = http(
        port,
        &format!(
            "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let (head, body) = res.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let id = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("unkey-request-id").then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    (status, id, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attribute, as text.
fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref()?.value.as_ref()).map(|v| {
        match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            AnyValue::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        }
    })
}

/// The spans of trace `trace_id` received so far.
fn spans_of(got: &Shared, trace_id: &str) -> Vec<Span> {
    let got = got.lock().unwrap();
    got.exports
        .iter()
        .flat_map(|e| &e.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .filter(|s| hex(&s.trace_id) == trace_id)
        .cloned()
        .collect()
}

/// Waits (at most 20 s) until trace `trace_id` holds a span named `name`.
fn wait_for_span(got: &Shared, trace_id: &str, name: &str) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans = spans_of(got, trace_id);
        if spans.iter().any(|s| s.name == name) {
            // The rest of a request's spans end before it; give a batch in flight a moment.
            std::thread::sleep(Duration::from_millis(300));
            return spans_of(got, trace_id);
        }
        assert!(Instant::now() < deadline, "no span {name:?} in trace {trace_id}: {spans:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts keygate tracing to `endpoint` over `protocol`, makes a key, verifies it twice
/// (a miss that loads it, then a hit) each with a `traceparent`, and checks both traces.
fn a_verification_is_traced(endpoint: &str, protocol: &str, got: &Shared) {
    // The backends the suite runs on: SQLite, or PostgreSQL with Redis (or a Redis Cluster).
    let db = TestDb::fresh();
    let system = if db.url.starts_with("postgres") { "postgresql" } else { "sqlite" };
    let port = free_port();
    let mut cmd = keygate_command(BIN, &db.url, port);
    let redis = redis_url();
    if let Some(redis) = &redis {
        cmd.env("REDIS_URL", redis)
            .env("KEYGATE_REDIS_CLUSTER", if redis_cluster() { "on" } else { "off" })
            .env("KEYGATE_REDIS_KEY_PREFIX", redis_prefix_for(&db.url));
    }
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("KEYGATE_OTLP_ENDPOINT", endpoint)
        .env("KEYGATE_OTLP_PROTOCOL", protocol)
        .env("KEYGATE_OTLP_SAMPLE_RATIO", "1")
        // Batches every 100 ms instead of 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let keygate: Proc = start_keygate(cmd);

    let (status, _, api) = v2(port, "apis.createApi", &json!({"name": "traced"}), "");
    assert_eq!(status, 200, "{api}");
    let api_id = api["data"]["apiId"].as_str().unwrap().to_string();
    let (status, _, key) = v2(port, "keys.createKey", &json!({"apiId": api_id, "name": "t"}), "");
    assert_eq!(status, 200, "{key}");
    let secret = key["data"]["key"].as_str().unwrap().to_string();

    let parent_span = "00f067aa0ba902b7";
    let mut workspace = String::new();
    for (round, hit) in
        [("4bf92f3577b34da6a3ce929d0e0e4736", false), ("4bf92f3577b34da6a3ce929d0e0e4737", true)]
    {
        let traceparent = format!("traceparent: 00-{round}-{parent_span}-01\r\n");
        let (status, request_id, answer) = v2(port, "keys.verifyKey", &json!({"key": secret}), &traceparent);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["data"]["valid"], true, "{answer}");
        let spans = wait_for_span(got, round, "POST /v2/keys.verifyKey");
        let what = format!("{spans:#?}");

        // One HTTP span, the caller's span its parent.
        let roots: Vec<&Span> = spans.iter().filter(|s| hex(&s.parent_span_id) == parent_span).collect();
        assert_eq!(roots.len(), 1, "one span under the caller's: {what}");
        let request = roots[0];
        assert_eq!(request.name, "POST /v2/keys.verifyKey");
        assert_eq!(request.kind, 2, "a server span: {what}");
        assert_eq!(attr(request, "http.route").as_deref(), Some("/v2/keys.verifyKey"));
        assert_eq!(attr(request, "http.request.method").as_deref(), Some("POST"));
        assert_eq!(attr(request, "http.response.status_code").as_deref(), Some("200"));
        assert_eq!(attr(request, "keygate.request_id").as_deref(), Some(request_id.as_str()), "{what}");
        assert!(request_id.starts_with("req_"), "{request_id}");
        workspace = attr(request, "keygate.workspace_id").expect("the caller's workspace");
        assert!(workspace.starts_with("ws_"), "{workspace}");

        // Every other span descends from it, within the trace.
        let ids: Vec<String> = spans.iter().map(|s| hex(&s.span_id)).collect();
        let request_id_hex = hex(&request.span_id);
        for s in spans.iter().filter(|s| hex(&s.span_id) != request_id_hex) {
            assert!(
                ids.contains(&hex(&s.parent_span_id)),
                "{} has a parent outside the trace: {what}",
                s.name
            );
            let mut up = s.clone();
            while hex(&up.span_id) != request_id_hex {
                up = spans.iter().find(|p| p.span_id == up.parent_span_id).unwrap().clone();
            }
        }
        let named = |n: &str| spans.iter().filter(move |s| s.name == n).collect::<Vec<_>>();
        // A miss may look twice (SQLite's in-process counters: on the worker first, then
        // where it may block), and loads the key there.
        let cache = named("verification cache");
        let hits: Vec<Option<String>> = cache.iter().map(|c| attr(c, "keygate.cache.hit")).collect();
        if hit {
            assert_eq!(hits, [Some("true".to_string())], "{what}");
        } else {
            assert!(!hits.is_empty() && hits.iter().all(|h| h.as_deref() == Some("false")), "{what}");
        }
        let under_cache = |s: &&Span| cache.iter().any(|c| s.parent_span_id == c.span_id);
        let database: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("database ")).collect();
        assert!(database.iter().all(|d| attr(d, "db.system.name").as_deref() == Some(system)), "{what}");
        if hit {
            assert!(database.is_empty(), "a cached answer reads no database: {what}");
        } else {
            assert!(database.iter().any(under_cache), "the key's load under the cache's span: {what}");
            assert!(!named("blocking pool wait").is_empty(), "{what}");
        }
        // With Redis, the change counters are read there, under the cache's span: on their
        // own ("redis") or, for a cached answer, in a batch shared with other requests
        // ("redis batch": the wait for it).
        let redis_spans: Vec<&Span> = named("redis").into_iter().chain(named("redis batch")).collect();
        match &redis {
            Some(_) => assert!(redis_spans.iter().any(under_cache), "{what}"),
            None => assert!(redis_spans.is_empty(), "{what}"),
        }
    }

    // A rate-limit decision: with Redis, the request's wait for its batch's script call
    // is a span of its own under the request's (one call serves many requests).
    let round = "4bf92f3577b34da6a3ce929d0e0e4739";
    let traceparent = format!("traceparent: 00-{round}-{parent_span}-01\r\n");
    let body = json!({"namespace": "traced", "identifier": "u", "limit": 5, "duration": 60_000});
    let (status, _, answer) = v2(port, "ratelimit.limit", &body, &traceparent);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["success"], true, "{answer}");
    let spans = wait_for_span(got, round, "POST /v2/ratelimit.limit");
    let what = format!("{spans:#?}");
    let request = spans.iter().find(|s| hex(&s.parent_span_id) == parent_span).expect("the HTTP span");
    let batch: Vec<&Span> = spans.iter().filter(|s| s.name == "redis batch").collect();
    match &redis {
        Some(_) => {
            assert_eq!(batch.len(), 1, "{what}");
            assert_eq!(batch[0].parent_span_id, request.span_id, "{what}");
            assert_eq!(batch[0].kind, 3, "a client span: {what}");
            assert_eq!(attr(batch[0], "db.system.name").as_deref(), Some("redis"), "{what}");
        }
        None => assert!(batch.is_empty(), "{what}"),
    }

    // A caller that did not sample its trace is followed: nothing of it is made; a request
    // without a trace context starts one (ratio 1 here).
    let unsampled = "4bf92f3577b34da6a3ce929d0e0e4738";
    let traceparent = format!("traceparent: 00-{unsampled}-{parent_span}-00\r\n");
    assert_eq!(v2(port, "keys.verifyKey", &json!({"key": secret}), &traceparent).0, 200);
    let (status, request_id, _) = v2(port, "keys.verifyKey", &json!({"key": secret}), "");
    assert_eq!(status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let root = loop {
        let found = got
            .lock()
            .unwrap()
            .exports
            .iter()
            .flat_map(|e| &e.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .find(|s| attr(s, "keygate.request_id").as_deref() == Some(request_id.as_str()))
            .cloned();
        if let Some(root) = found {
            break root;
        }
        assert!(Instant::now() < deadline, "the request without a traceparent was not traced");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(root.parent_span_id.is_empty(), "a root span: {root:?}");
    assert!(spans_of(got, unsampled).is_empty(), "an unsampled caller's trace was exported");

    // The exports: how they came, and the service named.
    let got = got.lock().unwrap();
    if protocol == "grpc" {
        assert!(got.how.iter().all(|h| h == "grpc"), "{:?}", got.how);
    } else {
        assert!(got.how.iter().all(|h| h == "/v1/traces application/x-protobuf"), "{:?}", got.how);
    }
    let everything = format!("{:?}", got.exports);
    assert!(everything.contains("\"keygate\""), "service.name keygate");
    // No secret anywhere: not the root key, the key, nor a part of either.
    for secret in [ROOT_KEY, &secret, &secret[secret.len() - 12..], &ROOT_KEY[ROOT_KEY.len() - 12..]] {
        assert!(!everything.contains(secret), "a secret in an exported span");
    }
    assert!(everything.contains(&workspace));
    drop(got);
    keygate.terminate();
}

#[test]
fn a_verification_is_traced_over_otlp_http() {
    let (port, got) = http_receiver();
    a_verification_is_traced(&format!("http://127.0.0.1:{port}"), "http/protobuf", &got);
}

#[test]
fn a_verification_is_traced_over_otlp_grpc() {
    let (port, got, _runtime) = grpc_receiver();
    a_verification_is_traced(&format!("http://127.0.0.1:{port}"), "grpc", &got);
}

#[test]
fn a_collector_that_is_down_costs_spans_never_a_request() {
    for protocol in ["http/protobuf", "grpc"] {
        let db = TestDb::fresh();
        let port = free_port();
        let mut cmd = keygate_command(BIN, &db.url, port);
        // Nothing listens there.
        cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
            .env("KEYGATE_OTLP_ENDPOINT", format!("http://127.0.0.1:{}", free_port()))
            .env("KEYGATE_OTLP_PROTOCOL", protocol)
            .env("OTEL_BSP_SCHEDULE_DELAY", "50");
        let keygate = start_keygate(cmd);
        let (status, _, api) = v2(port, "apis.createApi", &json!({"name": "down"}), "");
        assert_eq!(status, 200, "{protocol}: {api}");
        let api_id = api["data"]["apiId"].as_str().unwrap().to_string();
        let (_, _, key) = v2(port, "keys.createKey", &json!({"apiId": api_id}), "");
        let secret = key["data"]["key"].as_str().unwrap().to_string();
        let started = Instant::now();
        for _ in 0..50 {
            let (status, _, answer) = v2(port, "keys.verifyKey", &json!({"key": secret}), "");
            assert_eq!((status, &answer["data"]["valid"]), (200, &json!(true)), "{protocol}: {answer}");
        }
        // Exports fail in the background (every 50 ms here); requests do not wait for them.
        assert!(started.elapsed() < Duration::from_secs(20), "{protocol}: {:?}", started.elapsed());
        keygate.terminate();
    }
}

/// Off, a span costs nothing and says nothing: `tracing`'s `log` feature (on in the HTTP
/// stack) would otherwise hand each span's creation, entry and exit to the log.
#[test]
fn with_tracing_off_no_span_reaches_the_log() {
    let db = TestDb::fresh();
    let port = free_port();
    let mut cmd = keygate_command(BIN, &db.url, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("RUST_LOG", "trace,actix_server=warn,keygate::access=off");
    let mut keygate = start_keygate(cmd);
    let (status, _, api) = v2(port, "apis.createApi", &json!({"name": "quiet"}), "");
    assert_eq!(status, 200, "{api}");
    let api_id = api["data"]["apiId"].as_str().unwrap().to_string();
    let (_, _, key) = v2(port, "keys.createKey", &json!({"apiId": api_id}), "");
    let secret = key["data"]["key"].as_str().unwrap().to_string();
    for _ in 0..3 {
        let (status, _, answer) = v2(port, "keys.verifyKey", &json!({"key": secret}), "");
        assert_eq!(status, 200, "{answer}");
    }
    let log = keygate.output(true);
    for span in ["verification cache", "blocking pool wait", "database read", "otel.kind", "-> request"] {
        assert!(!log.contains(span), "{span:?} in the log:\n{log}");
    }
}
