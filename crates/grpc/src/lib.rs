//! keygate's gRPC listener (docs/gateways.md, *Envoy over gRPC*): Envoy's external
//! authorization, `envoy.service.auth.v3.Authorization/Check`, answered with the same
//! decision as HTTP forward auth (`keygate_http::forward_auth`), and the standard
//! `grpc.health.v1.Health` service. It shares the process, the store and the caches with
//! the HTTP server: the binary starts it beside the HTTP listeners
//! ([`serve`]), on a runtime of its own.
//!
//! - [`ext_authz`]: `Check`, its fields and its answers.

pub mod ext_authz;

use actix_web::web;
use envoy_types::ext_authz::v3::pb::AuthorizationServer;
use keygate_http::AppState;
use std::net::SocketAddr;

/// Serves keygate's gRPC services on `listener` until `shutdown` resolves: `Check` and
/// the health service (`SERVING` for the whole server and for
/// `envoy.service.auth.v3.Authorization`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: web::Data<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<AuthorizationServer<ext_authz::Authorizer>>().await;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(AuthorizationServer::new(ext_authz::Authorizer::new(state)))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Binds `addr` for [`serve`] (an error names the address).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("gRPC listener {addr}: {e}")))
}
