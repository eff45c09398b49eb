//! keygate's black-box suite, one test binary: a module per area, each test starting the
//! real server (in process, on a free port, against a fresh database) and talking to it
//! over HTTP, SDK clients and real tools. One binary links the server once; run one area
//! with `cargo test -p keygate-tests --test suite -- <area>::`.

mod add_roles;
mod algorithms;
mod allowed_ips;
mod analytics;
mod analytics_sql;
mod apis;
mod audit;
mod checksum;
mod client;
mod credits;
mod dashboard;
mod dashboard_browser;
mod embedding;
mod errors;
mod faults;
mod fuzz_bodies;
mod gateway;
mod identities;
mod in_process;
mod integers;
mod keys;
mod legacy;
mod links;
mod metrics;
mod middleware;
mod migrate_keys;
mod nul;
mod openapi;
mod overrides;
mod permissions;
mod portal;
mod portal_pages;
mod postgres_restart;
mod ratelimit;
mod ratelimit_analytics;
mod recoverable;
mod redis;
mod redis_round_trips;
mod root_keys;
mod routes;
mod scale_out;
mod scanning;
mod set_permissions;
mod tenancy;
mod update_key;
mod v2_keys;
mod v2_permissions;
mod v2_ratelimit;
mod v2_routes;
mod verify_cache;
mod verify_usage;
mod warm_restart;
mod webhooks;
