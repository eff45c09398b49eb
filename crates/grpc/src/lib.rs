//! keygate's gRPC listener (docs/gateways.md, *Envoy over gRPC*): Envoy's external
//! authorization, `envoy.service.auth.v3.Authorization/Check`, answered with the same
//! decision as HTTP forward auth (`keygate_http::forward_auth`), the standard
//! `grpc.health.v1.Health` service, and server reflection (v1 and v1alpha: `grpcurl`
//! lists and calls the services without a protoset). It shares the process, the store and
//! the caches with the HTTP server: the binary starts it beside the HTTP listeners
//! ([`serve`]), on a runtime of its own.
//!
//! - [`ext_authz`]: `Check`, its fields and its answers.

pub mod ext_authz;

use actix_web::web;
use envoy_types::ext_authz::v3::pb::AuthorizationServer;
use keygate_http::AppState;
use std::net::SocketAddr;

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

/// Serves keygate's gRPC services on `listener` until `shutdown` resolves: `Check`, the
/// health service (`SERVING` for the whole server and for
/// `envoy.service.auth.v3.Authorization`) and reflection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: web::Data<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<AuthorizationServer<ext_authz::Authorizer>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(DESCRIPTORS)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(AuthorizationServer::new(ext_authz::Authorizer::new(state)))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}

/// Binds `addr` for [`serve`] (an error names the address).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("gRPC listener {addr}: {e}")))
}
