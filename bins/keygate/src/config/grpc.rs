//! The gRPC listener's settings (docs/gateways.md, *Envoy over gRPC* and *Envoy's global
//! rate limit*): where it listens, its TLS pair, and envoyproxy/ratelimit's configuration.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug, Default)]
pub struct GrpcArgs {
    /// The gRPC listener (`HOST:PORT` or `unix:/PATH`; off when unset): Envoy's ext_authz,
    /// rate-limit service, health and reflection (docs/gateways.md, *Envoy over gRPC*).
    #[arg(long, env = "KEYGATE_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    /// envoyproxy/ratelimit's YAML (a file, or a directory of them): Envoy's global rate
    /// limit on the gRPC listener (docs/gateways.md); reloaded on SIGHUP.
    #[arg(long, env = "KEYGATE_ENVOY_RATELIMIT_CONFIG", requires = "grpc_listen")]
    pub envoy_ratelimit_config: Option<PathBuf>,
    /// The gRPC listener's TLS certificate chain (PEM file); with `--grpc-tls-key`.
    #[arg(long, env = "KEYGATE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The private key of `--grpc-tls-cert` (PEM file).
    #[arg(long, env = "KEYGATE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
}

/// The gRPC listener as the server starts it.
#[derive(Clone, Debug, Default)]
pub struct GrpcSettings {
    /// Where it listens (`None`: off).
    pub listen: Option<String>,
    /// Its certificate chain and key files (PEM): TLS when given.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// envoyproxy/ratelimit's configuration, for `ShouldRateLimit`.
    pub ratelimit_config: Option<PathBuf>,
}

impl GrpcArgs {
    pub fn settings(self) -> GrpcSettings {
        GrpcSettings {
            listen: self.grpc_listen,
            tls: self.grpc_tls_cert.zip(self.grpc_tls_key),
            ratelimit_config: self.envoy_ratelimit_config,
        }
    }
}
