//! Settings: each a flag, an environment variable and a key of the config file
//! (docs/configuration.md lists them; precedence flag > environment > file > default).

mod file;
pub mod grpc;
pub mod usage_export;
mod values;
use values::{dashboard_base, file_mode, migration_entry, otlp_endpoint, positive_usize, public_url};

use crate::admin::commands::{
    AuditCmd, BackupArgs, EncryptionCmd, KeysCmd, RootKeysCmd, StoreCmd, WorkspacesCmd,
};
use clap::{Args, Parser, Subcommand};
use keygate_domain::redact_url;
pub use keygate_http::HttpLimits;
pub use keygate_runtime::AnalyticsSettings;
use keygate_store::{PoolSettings, RedisSettings};
use std::time::Duration;

/// `keygate [serve] [server flags]` runs the server: its flags are taken with or without
/// the `serve` subcommand (contract §7). `--database-url` goes anywhere; the other server
/// flags before a subcommand are an error (see [`Cli::parse_args`]).
#[derive(Parser)]
#[command(name = "keygate", version, about = "API-key access control and rate limiting")]
pub struct Cli {
    /// Database: postgres://..., sqlite://PATH or a file path.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://keygate.db", global = true)]
    pub database_url: String,

    /// A TOML config file: every setting as a key, in snake_case (`listen`, `database_url`,
    /// `redis_url`, ...); a flag or an environment variable wins over the file.
    #[arg(long, env = "KEYGATE_CONFIG", global = true)]
    pub config: Option<std::path::PathBuf>,

    /// Log levels, in env_logger's syntax (default `info,actix_server=warn,keygate::access=off`).
    #[arg(long, env = "RUST_LOG", global = true)]
    pub log: Option<String>,

    /// Log line format: `text` or `json`.
    #[arg(long, env = "KEYGATE_LOG_FORMAT", global = true, value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// The server's settings when no subcommand is given.
    #[command(flatten)]
    pub serve: ServeArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Parses the process's arguments, as [`Parser::parse`] does (exiting with clap's
    /// message on an error), and refuses server flags given before a subcommand
    /// (`keygate --listen X serve`, `keygate --workers 2 keys create`): they would be
    /// silently ignored, since a subcommand takes its own.
    pub fn parse_args() -> Self {
        Self::try_parse_args_from(std::env::args_os()).unwrap_or_else(|e| exit_on(&e))
    }

    /// [`Cli::parse_args`] on the given arguments (the first is the program name), returning
    /// clap's error (`--help` and `--version` are errors too, as in clap).
    pub fn try_parse_args_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
        let mut cmd = Self::command();
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let matches = match cmd.try_get_matches_from_mut(args.clone()) {
            Ok(m) => m,
            // `keygate keys`: name the subcommands instead of printing the group's help.
            Err(e)
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        | clap::error::ErrorKind::MissingSubcommand
                ) =>
            {
                let group =
                    args.iter().skip(1).filter_map(|a| a.to_str()).find(|a| cmd.find_subcommand(a).is_some());
                let subs = group.and_then(|g| cmd.find_subcommand(g)).map(|g| {
                    let names = g.get_subcommands().map(clap::Command::get_name).filter(|&n| n != "help");
                    names.collect::<Vec<_>>().join(", ")
                });
                return Err(match (group, subs) {
                    (Some(g), Some(subs)) => cmd.error(
                        clap::error::ErrorKind::MissingSubcommand,
                        format!("`keygate {g}` needs a subcommand: {subs}"),
                    ),
                    _ => e,
                });
            }
            Err(e) => return Err(e),
        };
        let mut matches = matches;
        if let Some(sub) = matches.subcommand_name() {
            let server_flags = ServeArgs::augment_args(clap::Command::new("serve"));
            for arg in server_flags.get_arguments() {
                if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
                    let flag = arg.get_long().unwrap_or_default();
                    return Err(cmd.error(
                        clap::error::ErrorKind::ArgumentConflict,
                        format!("--{flag} is a server flag: give it after `serve`, or with no subcommand, not before `{sub}`"),
                    ));
                }
            }
        }
        // The config file: its keys become the arguments that neither the command line nor
        // the environment gave (flag > environment > file > default).
        if let Some(path) = matches.get_one::<std::path::PathBuf>("config").cloned() {
            let extra = file::file_args(&path, &cmd, &matches, matches.subcommand())
                .map_err(|m| cmd.error(clap::error::ErrorKind::InvalidValue, m))?;
            if !extra.is_empty() {
                matches = cmd.try_get_matches_from_mut(args.into_iter().chain(extra))?;
            }
        }
        Self::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
    }
}

/// Ends the process on a command-line error: help and version as clap prints them, any other
/// error as one line on stderr (contract §2: "a one-line error"), exit status 2.
fn exit_on(e: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    eprintln!("keygate: {}", one_line(&e.to_string()));
    std::process::exit(2);
}

/// clap's message without its "error: " prefix and usage block, on one line.
fn one_line(message: &str) -> String {
    let message = message.trim_start().strip_prefix("error: ").unwrap_or(message);
    let parts: Vec<&str> = message
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("{} (see keygate --help)", parts.join(" "))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve(Box<ServeArgs>),
    /// Manage workspaces.
    #[command(subcommand)]
    Workspaces(WorkspacesCmd),
    /// Manage root keys.
    #[command(subcommand, name = "root-keys")]
    RootKeys(RootKeysCmd),
    /// Manage keys.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Read the audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Back up a SQLite database while the server serves.
    Backup(BackupArgs),
    /// The vault of recoverable keys: rotate the keyring, make a new key.
    #[command(subcommand)]
    Encryption(EncryptionCmd),
    /// Copy or compare whole databases (SQLite to PostgreSQL and back).
    #[command(subcommand)]
    Store(StoreCmd),
    /// Print an OpenAPI document (what `/openapi.json` or `/openapi-v2.json` serves; the
    /// files in docs/ are this output). Needs no database.
    Openapi {
        /// `v1` (every route outside /v2) or `v2`.
        #[arg(value_parser = ["v1", "v2"])]
        api: String,
    },
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on: HOST:PORT, or unix:/PATH for a Unix domain socket (a gateway on
    /// the same host).
    #[arg(long, env = "KEYGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// With `--listen unix:/PATH`: the socket file's permissions, in octal (a gateway's user
    /// needs write permission to connect).
    #[arg(long, env = "KEYGATE_LISTEN_MODE", default_value = "0660", value_parser = file_mode)]
    pub listen_mode: u32,
    /// Redis URL for shared rate-limit counters (unset: in-process store).
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,
    /// Largest number of open Redis connections.
    #[arg(long, env = "KEYGATE_REDIS_POOL_SIZE", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub redis_pool_size: u32,
    /// Longest wait for a Redis connection, and for one reply, in milliseconds.
    #[arg(long, env = "KEYGATE_REDIS_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_timeout_ms: u64,
    /// Put before every rate-limit key in Redis (deployments sharing one Redis).
    #[arg(long, env = "KEYGATE_REDIS_KEY_PREFIX", default_value = "keygate:rl:")]
    pub redis_key_prefix: String,
    /// Redis mode: deny locally what Redis would deny (a budget it reported exhausted in
    /// the current window), without a round trip: on or off.
    #[arg(long, env = "KEYGATE_REDIS_LOCAL_DENIALS", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub redis_local_denials: bool,
    /// Redis mode: how often the tokens that `async: true` requests passed from local state
    /// are sent to Redis, in milliseconds (1 to 1000); the bound on what several instances
    /// may over-admit grows with it (docs/api.md).
    #[arg(long, env = "KEYGATE_REDIS_ASYNC_SYNC_MS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub redis_async_sync_ms: u64,
    /// REDIS_URL names the seed nodes of a Redis Cluster (one or more URLs separated by
    /// commas): on or off.
    #[arg(long, env = "KEYGATE_REDIS_CLUSTER", default_value = "off", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub redis_cluster: bool,
    /// When the rate-limit store is unreachable, pass requests (and log) instead of 503.
    #[arg(long, env = "KEYGATE_RATELIMIT_FAIL_OPEN")]
    pub ratelimit_fail_open: bool,
    /// Without Redis, on SQLite: keep the in-process rate-limit budgets in
    /// `<database file>-ratelimits/`, so that a restart (`kill -9` included) admits nothing
    /// beyond a limit: on or off (off: a restart starts every budget afresh).
    #[arg(long, env = "KEYGATE_RATELIMIT_PERSIST", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub ratelimit_persist: bool,
    /// The algorithm rate-limit namespaces are created with: fixed, sliding or token_bucket
    /// (existing namespaces keep theirs; `ratelimit.updateNamespace` changes any).
    #[arg(long, env = "KEYGATE_RATELIMIT_ALGORITHM", default_value = "fixed", value_parser = ["fixed", "sliding", "token_bucket"])]
    pub ratelimit_algorithm: String,
    /// Webhook endpoints may point at loopback, private, link-local and unique-local
    /// addresses (docs/webhooks.md; off: refused at creation and at every delivery).
    #[arg(long, env = "KEYGATE_WEBHOOKS_ALLOW_PRIVATE", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub webhooks_allow_private: bool,
    /// Delete webhook deliveries finished (sent or failed) more than this many days ago,
    /// with their attempts and events, in the background (at most 5,000 a minute); 0
    /// keeps them for good. Pending deliveries are never deleted.
    #[arg(long, env = "KEYGATE_WEBHOOKS_RETENTION_DAYS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=36_500))]
    pub webhooks_retention_days: u64,
    /// The DNS server (`IP:PORT`) webhook endpoints' host names are looked up with, when
    /// an endpoint is written and at every delivery (unset: the system's resolver).
    #[arg(long, env = "KEYGATE_WEBHOOKS_DNS")]
    pub webhooks_dns: Option<std::net::SocketAddr>,
    /// The file of GitHub's secret scanning public keys (the JSON GitHub publishes), read
    /// again when it changes; unset: `POST /v1/secret-scanning/github` answers 401.
    #[arg(long, env = "KEYGATE_GITHUB_SCANNING_KEYS")]
    pub github_scanning_keys: Option<std::path::PathBuf>,
    /// What the first report of a live key does to it: disable, expire (now) or report
    /// (the audit event and the webhook only).
    #[arg(long, env = "KEYGATE_GITHUB_SCANNING_ACTION", default_value = "disable", value_parser = ["disable", "expire", "report"])]
    pub github_scanning_action: String,
    /// `ratelimits.limit` (v1) and `ratelimit.limit` (v2) answers carry the rate-limit
    /// header fields forward auth sends (`RateLimit-Limit`, `-Remaining`, `-Reset`, and
    /// `RateLimit-Policy`, `RateLimit` of draft-ietf-httpapi-ratelimit-headers-11): on or off.
    #[arg(long, env = "KEYGATE_RATELIMIT_HEADERS", default_value = "off", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub ratelimit_headers: bool,
    /// Cache verifications (keys.verifyKey), each used only while nothing it depends on has
    /// changed: on or off (off: every verification reads the database).
    #[arg(long, env = "KEYGATE_VERIFY_CACHE", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub verify_cache: bool,
    /// The most the verification cache's keys weigh, about (MiB): beyond it, the keys not
    /// verified recently are evicted first.
    #[arg(long, env = "KEYGATE_VERIFY_CACHE_MB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub verify_cache_mb: u64,
    /// The verification cache's keys kept across a restart: written to a file when the
    /// server stops and read when it starts (each key used only if nothing it depends on
    /// changed meanwhile): `on` (the file beside the SQLite database, `<file>-keys`),
    /// `off`, or the file's path. With the embedded default only (SQLite, no Redis).
    #[arg(long, env = "KEYGATE_VERIFY_CACHE_SNAPSHOT", default_value = "on")]
    pub verify_cache_snapshot: String,
    /// Migration ids `keys.migrateKeys` accepts besides the built-in schemes' own names
    /// (`sha256_hex`, `sha256_base64`): `ID=SCHEME` entries, comma-separated.
    #[arg(long, env = "KEYGATE_MIGRATIONS", value_delimiter = ',', value_parser = migration_entry)]
    pub migrations: Vec<String>,
    /// `GET /metrics` (Prometheus text): `on` (no authentication: labels carry no tenant
    /// data), `root-key` (a root key holding `metrics.read`), or `off`.
    #[arg(long, env = "KEYGATE_METRICS", default_value = "on", value_parser = ["on", "off", "root-key"])]
    pub metrics: String,
    /// Serve `/metrics` on this address instead of the main listener (with
    /// `KEYGATE_METRICS=on`, without authentication there).
    #[arg(long, env = "KEYGATE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// The gRPC listener (`config/grpc.rs`).
    #[command(flatten)]
    pub grpc: grpc::GrpcArgs,
    /// The usage export (`config/usage_export.rs`).
    #[command(flatten)]
    pub usage_export: usage_export::UsageExportArgs,
    /// How many rate-limit namespaces get series of their own in `/metrics`
    /// (`keygate_ratelimit_namespace_decisions_total`): the first this many decided on
    /// since the start, labelled with their workspace id and name; the rest count as
    /// `other`. 0 keeps namespace names out of `/metrics`.
    #[arg(long, env = "KEYGATE_METRICS_NAMESPACES", default_value_t = 20, value_parser = clap::value_parser!(u16).range(0..=1000))]
    pub metrics_namespaces: u16,
    /// A JSON file of named policies for `/v1/gateway.authorize` (docs/gateways.md):
    /// `{"policies": {"name": {"permissions": "...", "ratelimit": "...", "keyHeader": "..."}}}`.
    #[arg(long, env = "KEYGATE_GATEWAY_POLICIES")]
    pub gateway_policies: Option<String>,
    /// Proxies (addresses, CIDR ranges) whose X-Forwarded-For forward auth believes.
    #[arg(long, env = "KEYGATE_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,
    /// Delete audit events older than this many days, in the background (at most
    /// 5,000 a minute); 0 keeps them for good.
    #[arg(long, env = "KEYGATE_AUDIT_RETENTION_DAYS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=36_500))]
    pub audit_retention_days: u64,
    /// Verification analytics (docs/operations.md, *Analytics*): every verification counted
    /// in memory and written to the database every few seconds; on or off.
    #[arg(long, env = "KEYGATE_ANALYTICS", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub analytics: bool,
    /// The most analytics series (key, outcome, tags, minute, ...) held in memory at once
    /// (those of the current minute, and the last minute's until written); counts of new
    /// series beyond it are dropped (and counted).
    #[arg(long, env = "KEYGATE_ANALYTICS_MAX_SERIES", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub analytics_max_series: u64,
    /// Days of analytics kept (as day rows; minutes roll up into hours after a day, hours
    /// into days after 30 days).
    #[arg(long, env = "KEYGATE_ANALYTICS_RETENTION_DAYS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    pub analytics_retention_days: u64,
    /// The web dashboard under `/dashboard` (docs/dashboard.md); on or off.
    #[arg(long, env = "KEYGATE_DASHBOARD", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub dashboard: bool,
    /// The path browsers reach the dashboard at, when a proxy serves it under another
    /// prefix (links, forms and cookie paths use it); keygate still serves `/dashboard`.
    #[arg(long, env = "KEYGATE_DASHBOARD_BASE", default_value = "/dashboard", value_parser = dashboard_base)]
    pub dashboard_base: String,
    /// Mark the dashboard's cookies `Secure` even when requests do not look like HTTPS
    /// (they are when the request, or the proxy's `X-Forwarded-Proto`, says https).
    #[arg(long, env = "KEYGATE_DASHBOARD_SECURE_COOKIES", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub dashboard_secure_cookies: bool,
    /// OpenTelemetry traces: the OTLP collector's base URL (`http://collector:4318`; spans
    /// go to `<it>/v1/traces`, or to the gRPC service there). Unset: no tracing.
    #[arg(long, env = "KEYGATE_OTLP_ENDPOINT", value_parser = otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// How spans reach the collector: `http/protobuf` or `grpc`.
    #[arg(long, env = "KEYGATE_OTLP_PROTOCOL", default_value = "http/protobuf", value_parser = crate::telemetry::OtlpProtocol::parse)]
    pub otlp_protocol: crate::telemetry::OtlpProtocol,
    /// The share of requests without a trace context that are traced, 0 to 1 (a request
    /// carrying a `traceparent` follows its caller's sampling decision).
    #[arg(long, env = "KEYGATE_OTLP_SAMPLE_RATIO", default_value = "1", value_parser = crate::telemetry::sample_ratio)]
    pub otlp_sample_ratio: f64,
    /// HTTP worker threads (default: one per CPU).
    #[arg(long, env = "KEYGATE_WORKERS", value_parser = positive_usize)]
    pub workers: Option<usize>,
    /// Largest number of open database connections.
    #[arg(long, env = "KEYGATE_DB_POOL_SIZE", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub db_pool_size: u32,
    /// How long to wait for a database connection, in milliseconds.
    #[arg(long, env = "KEYGATE_DB_CONNECT_TIMEOUT_MS", default_value_t = 5_000)]
    pub db_connect_timeout_ms: u64,
    /// Longest a statement may run (PostgreSQL statement_timeout, SQLite busy_timeout), ms.
    #[arg(long, env = "KEYGATE_DB_STATEMENT_TIMEOUT_MS", default_value_t = 5_000)]
    pub db_statement_timeout_ms: u64,
    /// Longest wait for a request's head (request line and headers), in milliseconds; then
    /// 408 and the connection is closed.
    #[arg(long, env = "KEYGATE_HEADER_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub header_timeout_ms: u64,
    /// Longest wait for a request's whole body, in milliseconds from the handler starting to
    /// read it; then 408 REQUEST_TIMEOUT and the connection is closed.
    #[arg(long, env = "KEYGATE_BODY_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub body_timeout_ms: u64,
    /// How long an idle keep-alive connection stays open, in milliseconds.
    #[arg(long, env = "KEYGATE_KEEP_ALIVE_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub keep_alive_ms: u64,
    /// Most client connections open at once, over all workers (also bounded by the open-file
    /// limit); further connections wait in the listen backlog.
    #[arg(long, env = "KEYGATE_MAX_CONNECTIONS", default_value_t = 4_096, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Base URL of the error docs put into error bodies (default: this server's /docs).
    #[arg(long, env = "KEYGATE_DOCS_URL")]
    pub docs_url: Option<String>,
    /// The URL end users reach this server at (docs/portal.md): portal sessions' links are
    /// `<public URL>/portal/<slug>?code=…` (default: http:// and the listen address).
    #[arg(long, env = "KEYGATE_PUBLIC_URL", value_parser = public_url)]
    pub public_url: Option<String>,
    /// Root key to create at first start instead of a random one.
    #[arg(long, env = "KEYGATE_ROOT_KEY", hide_env_values = true)]
    pub root_key: Option<String>,
    /// The keyring recoverable keys are sealed with (docs/security.md): `id:base64-of-32-bytes`
    /// entries, comma-separated; the first seals, all open. Without it, `recoverable` is 412.
    #[arg(long, env = "KEYGATE_ENCRYPTION_KEYS", hide_env_values = true)]
    pub encryption_keys: Option<String>,
}

/// No secret in a `Debug` output: URLs redacted, the root key left out.
impl std::fmt::Debug for Cli {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cli")
            .field("database_url", &redact_url(&self.database_url))
            .field("command", &self.command)
            .field("serve", &self.serve)
            .finish()
    }
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("listen", &self.listen)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("workers", &self.workers)
            .field("root_key", &self.root_key.as_ref().map(|_| "<redacted>"))
            .field("encryption_keys", &self.encryption_keys.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Default for ServeArgs {
    fn default() -> Self {
        // The same defaults as the flags (and their environment variables).
        let cli = Cli::parse_from(["keygate", "serve"]);
        match cli.command {
            Some(Command::Serve(args)) => *args,
            _ => unreachable!("`keygate serve` parses as Serve"),
        }
    }
}

impl ServeArgs {
    pub fn into_config(self, database_url: &str) -> ServerConfig {
        ServerConfig {
            listen: self.listen,
            listen_mode: self.listen_mode,
            database_url: database_url.to_string(),
            redis_url: self.redis_url,
            redis: RedisSettings {
                max_size: self.redis_pool_size,
                connect_timeout: Duration::from_millis(self.redis_timeout_ms),
                io_timeout: Duration::from_millis(self.redis_timeout_ms),
                key_prefix: self.redis_key_prefix,
                local_denials: self.redis_local_denials,
                async_sync_interval: Duration::from_millis(self.redis_async_sync_ms),
                cluster: self.redis_cluster,
                ..RedisSettings::default()
            },
            ratelimit_fail_open: self.ratelimit_fail_open,
            ratelimit_persist: self.ratelimit_persist,
            ratelimit_algorithm: keygate_domain::Algorithm::parse(&self.ratelimit_algorithm)
                .unwrap_or_default(),
            webhooks_allow_private: self.webhooks_allow_private,
            webhooks_retention_days: self.webhooks_retention_days,
            webhooks_dns: self.webhooks_dns,
            github_scanning_keys: self.github_scanning_keys,
            github_scanning_action: keygate_scanning::LeakAction::parse(&self.github_scanning_action)
                .unwrap_or_default(),
            ratelimit_headers: self.ratelimit_headers,
            verify_cache: self.verify_cache,
            verify_cache_mb: self.verify_cache_mb,
            verify_cache_snapshot: match self.verify_cache_snapshot.as_str() {
                "off" => None,
                "on" => Some(None),
                path => Some(Some(path.into())),
            },
            migrations: self.migrations,
            audit_retention_days: self.audit_retention_days,
            analytics: self.analytics.then_some(AnalyticsSettings {
                max_series: self.analytics_max_series as usize,
                retention_days: self.analytics_retention_days,
            }),
            dashboard: self.dashboard.then_some(keygate_http::DashboardSettings {
                base: self.dashboard_base,
                secure_cookies: self.dashboard_secure_cookies,
            }),
            metrics: match self.metrics.as_str() {
                "off" => MetricsSetting::Off,
                "root-key" => MetricsSetting::RootKey,
                _ => MetricsSetting::On,
            },
            metrics_listen: self.metrics_listen,
            grpc: self.grpc.settings(),
            usage_export: self.usage_export.settings(),
            metrics_namespaces: usize::from(self.metrics_namespaces),
            gateway_policies: self.gateway_policies,
            trusted_proxies: self.trusted_proxies,
            workers: self.workers,
            pool: PoolSettings {
                max_size: self.db_pool_size,
                connect_timeout: Duration::from_millis(self.db_connect_timeout_ms),
                statement_timeout: Duration::from_millis(self.db_statement_timeout_ms),
            },
            docs_url: self.docs_url,
            public_url: self.public_url,
            http: HttpLimits {
                header_timeout: Duration::from_millis(self.header_timeout_ms),
                body_timeout: Duration::from_millis(self.body_timeout_ms),
                keep_alive: Duration::from_millis(self.keep_alive_ms),
                max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            },
            root_key: self.root_key,
            encryption_keys: self.encryption_keys,
            handle_signals: true,
            tracing: self.otlp_endpoint.map(|endpoint| crate::telemetry::TraceSettings {
                endpoint,
                protocol: self.otlp_protocol,
                sample_ratio: self.otlp_sample_ratio,
            }),
        }
    }
}

/// `KEYGATE_METRICS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsSetting {
    On,
    RootKey,
    Off,
}

/// Everything the server needs to start. Its `Debug` shows no secret (URLs redacted, the
/// root key left out).
#[derive(Clone)]
pub struct ServerConfig {
    /// `HOST:PORT`, or `unix:/PATH`.
    pub listen: String,
    /// The Unix socket file's permissions.
    pub listen_mode: u32,
    pub database_url: String,
    pub redis_url: Option<String>,
    pub redis: RedisSettings,
    /// Pass rate-limit requests when the rate-limit store is unreachable (contract §5.12).
    pub ratelimit_fail_open: bool,
    /// `KEYGATE_RATELIMIT_PERSIST`: the in-process budgets survive a restart.
    pub ratelimit_persist: bool,
    /// `KEYGATE_RATELIMIT_ALGORITHM`: new namespaces' algorithm.
    pub ratelimit_algorithm: keygate_domain::Algorithm,
    /// `KEYGATE_WEBHOOKS_ALLOW_PRIVATE`: webhook endpoints may point at private addresses.
    pub webhooks_allow_private: bool,
    /// `KEYGATE_WEBHOOKS_RETENTION_DAYS`: finished deliveries are kept this many days; 0: kept.
    pub webhooks_retention_days: u64,
    /// `KEYGATE_WEBHOOKS_DNS`: the DNS server webhook names are looked up with.
    pub webhooks_dns: Option<std::net::SocketAddr>,
    /// `KEYGATE_GITHUB_SCANNING_KEYS`: GitHub's secret scanning public keys.
    pub github_scanning_keys: Option<std::path::PathBuf>,
    /// `KEYGATE_GITHUB_SCANNING_ACTION`.
    pub github_scanning_action: keygate_scanning::LeakAction,
    /// Rate-limit header fields on `limit` answers (`KEYGATE_RATELIMIT_HEADERS`).
    pub ratelimit_headers: bool,
    /// Cache verifications (`KEYGATE_VERIFY_CACHE`).
    pub verify_cache: bool,
    /// `KEYGATE_VERIFY_CACHE_MB`.
    pub verify_cache_mb: u64,
    /// `KEYGATE_VERIFY_CACHE_SNAPSHOT`: off (`None`), beside the database (`Some(None)`), or
    /// at a path.
    pub verify_cache_snapshot: Option<Option<std::path::PathBuf>>,
    /// `KEYGATE_MIGRATIONS`: migration ids and their schemes, `ID=SCHEME` each.
    pub migrations: Vec<String>,
    /// Audit events older than this many days are deleted in the background; 0: kept.
    pub audit_retention_days: u64,
    /// Verification analytics; `None`: off.
    pub analytics: Option<AnalyticsSettings>,
    /// The dashboard; `None`: off.
    pub dashboard: Option<keygate_http::DashboardSettings>,
    /// `GET /metrics`: served openly, to root keys with `metrics.read`, or not at all.
    pub metrics: MetricsSetting,
    /// `/metrics` on its own listener instead of the main one.
    pub metrics_listen: Option<String>,
    /// The gRPC listener.
    pub grpc: grpc::GrpcSettings,
    /// The usage export (`Err`: a setting that cannot run, refused at start).
    pub usage_export: Result<Option<keygate_metering::ExportSettings>, String>,
    /// Namespaces given series of their own (`KEYGATE_METRICS_NAMESPACES`).
    pub metrics_namespaces: usize,
    /// The gateway policies file.
    pub gateway_policies: Option<String>,
    /// `KEYGATE_TRUSTED_PROXIES`.
    pub trusted_proxies: Vec<String>,
    pub workers: Option<usize>,
    pub pool: PoolSettings,
    pub docs_url: Option<String>,
    /// `KEYGATE_PUBLIC_URL` (no trailing `/`).
    pub public_url: Option<String>,
    pub http: HttpLimits,
    pub root_key: Option<String>,
    /// `KEYGATE_ENCRYPTION_KEYS`, as given (parsed at start).
    pub encryption_keys: Option<String>,
    /// Stop gracefully on SIGINT/SIGTERM (the binary); off for servers embedded in tests.
    pub handle_signals: bool,
    /// OpenTelemetry traces; `None`: off. Installed by [`crate::server::run_forever`] (the
    /// process's subscriber), not by a server embedded in another program.
    pub tracing: Option<crate::telemetry::TraceSettings>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("workers", &self.workers)
            .field("http", &self.http)
            .field("root_key", &self.root_key.as_ref().map(|_| "<redacted>"))
            .field("encryption_keys", &self.encryption_keys.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// A config for a given database with every other setting at its default.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        ServeArgs::default().into_config(&database_url.into())
    }
}

#[cfg(test)]
mod tests;
