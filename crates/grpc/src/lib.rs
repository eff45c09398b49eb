//! keygate's gRPC listener (docs/gateways.md, *Envoy over gRPC*): Envoy's external
//! authorization, `envoy.service.auth.v3.Authorization/Check`, answered with the same
//! decision as HTTP forward auth (`keygate_http::forward_auth`), the standard
//! `grpc.health.v1.Health` service, and server reflection (v1 and v1alpha: `grpcurl`
//! lists and calls the services without a protoset). It shares the process, the store and
//! the caches with the HTTP server: the binary starts it beside the HTTP listeners
//! ([`serve`]), on a runtime of its own.
//!
//! - [`ext_authz`]: `Check`, its fields and its answers.
//! - [`rls`]: `ShouldRateLimit` with envoyproxy/ratelimit's configuration, when given.

pub mod ext_authz;
pub mod rls;

use actix_web::web;
use envoy_types::ext_authz::v3::pb::AuthorizationServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use keygate_http::AppState;
use std::sync::Arc;

/// Envoy's `external_auth.proto` and what it imports, as envoy-types ships them, compiled
/// (`tests/descriptors.rs` checks it and writes it again).
const DESCRIPTORS: &[u8] = include_bytes!("descriptors.bin");

/// Why the listener stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Where the listener accepts connections.
#[derive(Debug)]
pub enum Incoming {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// A certificate chain and its private key, PEM: the listener speaks TLS with them.
#[derive(Clone)]
pub struct TlsPair {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsPair { .. }")
    }
}

/// The rate-limit service's configuration, replaced whole on a reload.
pub type SharedRlsConfig = Arc<parking_lot::RwLock<Arc<rls::config::RlsConfig>>>;

/// Serves keygate's gRPC services on `incoming` (over TLS with `tls`) until `shutdown`
/// resolves: `Check`, `ShouldRateLimit` with `rls` (when given), the health service
/// (`SERVING` for the whole server and for each of those) and reflection.
pub async fn serve(
    incoming: Incoming,
    tls: Option<TlsPair>,
    state: web::Data<AppState>,
    rls: Option<SharedRlsConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<AuthorizationServer<ext_authz::Authorizer>>().await;
    let limiter = match rls {
        Some(config) => {
            reporter.set_serving::<RateLimitServiceServer<rls::RateLimiter>>().await;
            Some(RateLimitServiceServer::new(rls::RateLimiter::new(state.clone(), config)))
        }
        None => None,
    };
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(DESCRIPTORS)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let mut builder = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(decode_errors_are_invalid_argument));
    if let Some(pair) = tls {
        let identity = tonic::transport::Identity::from_pem(pair.cert_pem, pair.key_pem);
        builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
    }
    let router = builder
        .add_service(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(AuthorizationServer::new(ext_authz::Authorizer::new(state)))
        .add_optional_service(limiter);
    match incoming {
        Incoming::Tcp(l) => {
            // TCP_NODELAY: without it small answers wait on Nagle's algorithm and the
            // peer's delayed ACK (tens of milliseconds a call through Envoy).
            let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
            router.serve_with_incoming_shutdown(incoming, shutdown).await?
        }
        Incoming::Unix(l) => {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(l);
            router.serve_with_incoming_shutdown(incoming, shutdown).await?
        }
    }
    Ok(())
}

/// A call whose message does not decode as its protobuf is the caller's error: tonic answers
/// it INTERNAL (`failed to decode Protobuf message: ...`), which a client would retry or
/// blame on the server; this answers INVALID_ARGUMENT with the same message.
fn decode_errors_are_invalid_argument<B>(mut answer: http::Response<B>) -> http::Response<B> {
    const INTERNAL: &str = "13";
    let headers = answer.headers_mut();
    let undecodable = headers.get("grpc-status").is_some_and(|s| s == INTERNAL)
        && headers.get("grpc-message").is_some_and(|m| {
            // grpc-message is percent-encoded (a space is `%20`).
            let m = String::from_utf8_lossy(m.as_bytes()).replace("%20", " ");
            m.starts_with("failed to decode Protobuf message")
        });
    if undecodable {
        let code = tonic::Code::InvalidArgument as i32;
        headers.insert("grpc-status", http::HeaderValue::from(code));
    }
    answer
}
