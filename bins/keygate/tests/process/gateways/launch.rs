//! Each gateway started from its block of docs/gateways.md, as written: the test puts in
//! its ports, the gateway's root key and a small limit, nothing else.

use keygate_test_support::{Proc, free_port, wait_for_port};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DOC: &str = include_str!("../../../../../docs/gateways.md");
/// The tests' rate-limit window (the docs' `duration=60000` becomes a day's: no test run
/// crosses a window's end but one near midnight UTC, which waits for it).
pub const WINDOW_MS: u64 = 86_400_000;
/// The tests' limit (the docs' `limit=100`).
pub const LIMIT: u64 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gateway {
    Nginx,
    Caddy,
    Traefik,
    Envoy,
    /// Envoy's ext_authz over gRPC (keygate's `KEYGATE_GRPC_LISTEN`).
    EnvoyGrpc,
    Haproxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The policy as headers in the gateway's configuration.
    Inline,
    /// A named policy of the policies file, the gateway's root key bound to it.
    Named,
}

impl Gateway {
    fn name(self) -> &'static str {
        match self {
            Gateway::Nginx => "nginx",
            Gateway::Caddy => "caddy",
            Gateway::Traefik => "traefik",
            Gateway::Envoy => "envoy",
            Gateway::EnvoyGrpc => "envoy-grpc",
            Gateway::Haproxy => "haproxy",
        }
    }

    /// Whether the documented block shows the client the rate-limit fields on a pass
    /// (Caddy's and Traefik's forward auth copy keygate's headers only upstream).
    pub fn fields_on_pass(self) -> bool {
        matches!(self, Gateway::Nginx | Gateway::Envoy | Gateway::EnvoyGrpc | Gateway::Haproxy)
    }
}

/// Where the test's keygate listens.
pub enum Kg {
    Tcp(u16),
    Unix(PathBuf),
}

impl Kg {
    /// keygate's address in a gateway's configuration (the docs' `127.0.0.1:8080`): a Unix
    /// socket is `unix:/path` to nginx, `unix//path` to Caddy.
    fn in_config(&self, gateway: Gateway) -> String {
        match (self, gateway) {
            (Kg::Tcp(port), _) => format!("127.0.0.1:{port}"),
            (Kg::Unix(path), Gateway::Caddy) => format!("unix/{}", path.display()),
            (Kg::Unix(path), Gateway::Nginx) => format!("unix:{}", path.display()),
            (Kg::Unix(_), other) => panic!("{other:?} reaches keygate over TCP only (docs/gateways.md)"),
        }
    }

    fn port(&self) -> u16 {
        match self {
            Kg::Tcp(port) => *port,
            Kg::Unix(_) => panic!("keygate listens on a Unix socket here"),
        }
    }
}

/// The fenced block after `<!-- gateway-test: {marker} -->` in docs/gateways.md.
pub fn doc_block(marker: &str) -> &'static str {
    let tag = format!("<!-- gateway-test: {marker} -->");
    let at = DOC.find(&tag).unwrap_or_else(|| panic!("no {tag} in docs/gateways.md")) + tag.len();
    let rest = &DOC[at..];
    let fence = rest.find("```").unwrap();
    let start = fence + rest[fence..].find('\n').unwrap() + 1;
    &rest[start..start + rest[start..].find("```").unwrap()]
}

/// `text` with each `(from, to)` replaced, every `from` required to be there.
fn put(text: &str, what: &str, pairs: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(out.contains(from), "{what}: no {from:?} in the documented block:\n{text}");
        out = out.replace(from, to);
    }
    out
}

/// The test's values in a block: its root key, and the limit and window of the rate limit
/// it has (an inline block or the policies file; a named block names the policy instead).
pub fn policy_values(block: &str, what: &str, root_key: &str) -> String {
    let mut pairs = Vec::new();
    if !what.ends_with(" named") {
        pairs.extend([
            ("limit=100", format!("limit={LIMIT}")),
            ("duration=60000", format!("duration={WINDOW_MS}")),
        ]);
    } else {
        assert!(
            block.contains("\"documents\"") && !block.contains("limit="),
            "{what} names the policy only:\n{block}"
        );
    }
    if what != "policies" {
        pairs.push(("kg_root_replace_with_the_gateways_root_key", root_key.to_string()));
    }
    put(block, what, &pairs)
}

/// A gateway's program: `KEYGATE_GATEWAYS_BIN/<name>` when set, else the one `.ci/gateways.sh`
/// installs (`target/gateways/bin/<name>`) when there, else `<name>` on the PATH.
pub fn tool(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("KEYGATE_GATEWAYS_BIN") {
        return Path::new(&dir).join(name);
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/gateways/bin").join(name);
    if installed.exists() { installed } else { PathBuf::from(name) }
}

/// `gateway` started from its `mode` block in `dir`, in front of `upstream` (keygate's gRPC
/// listener on `grpc`): the process and the port it listens on, once it answers through
/// keygate.
#[allow(clippy::too_many_arguments)]
pub fn start(
    gateway: Gateway,
    mode: Mode,
    kg: &Kg,
    grpc: u16,
    upstream: u16,
    root_key: &str,
    dir: &Path,
) -> (Proc, u16) {
    let what = format!("{} {}", gateway.name(), if mode == Mode::Inline { "inline" } else { "named" });
    let block = doc_block(&what);
    let listen = free_port();
    let mut text = policy_values(block, &what, root_key);
    let keygate = ("127.0.0.1:8080", kg.in_config(gateway));
    let up = ("127.0.0.1:9000", format!("127.0.0.1:{upstream}"));
    let d = dir.display().to_string();
    let cmd = match gateway {
        Gateway::Nginx => {
            text = put(&text, &what, &[keygate, up, ("listen 8000;", format!("listen 127.0.0.1:{listen};"))]);
            let conf = format!(
                "daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{text}\n}}\n"
            );
            std::fs::write(dir.join("nginx.conf"), conf).unwrap();
            let mut c = Command::new("nginx");
            c.args(["-p", &d, "-c", &format!("{d}/nginx.conf")]);
            c
        }
        Gateway::Caddy => {
            let site = (":8000 {", format!("http://:{listen} {{\n    bind 127.0.0.1"));
            text = put(&text, &what, &[keygate, up, site]);
            let file = dir.join("Caddyfile");
            std::fs::write(&file, format!("{{\n  admin off\n  auto_https off\n}}\n{text}")).unwrap();
            let mut c = Command::new("caddy");
            c.args(["run", "--config", &file.display().to_string(), "--adapter", "caddyfile"])
                .env("HOME", dir)
                .env("XDG_DATA_HOME", dir)
                .env("XDG_CONFIG_HOME", dir);
            c
        }
        Gateway::Traefik => {
            text = put(&text, &what, &[keygate, up]);
            // The static configuration as the docs' command line gives it, the port put in.
            let line = DOC[DOC.find("traefik --entryPoints").unwrap()..].lines().take(2).collect::<String>();
            for flag in [
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                "--providers.file.filename=",
            ] {
                assert!(line.contains(flag), "the documented traefik command has {flag}: {line}");
            }
            let file = dir.join("dynamic.yml");
            std::fs::write(&file, text).unwrap();
            let mut c = Command::new(tool("traefik"));
            c.arg(format!("--entryPoints.web.address=127.0.0.1:{listen}"))
                .arg(format!("--providers.file.filename={}", file.display()))
                .args([
                    "--global.checkNewVersion=false",
                    "--global.sendAnonymousUsage=false",
                    "--log.level=WARN",
                ])
                .current_dir(dir);
            c
        }
        Gateway::Envoy => {
            let ports = [
                ("address: 0.0.0.0, port_value: 8000", format!("address: 127.0.0.1, port_value: {listen}")),
                ("port_value: 8080", format!("port_value: {}", kg.port())),
                ("port_value: 9000", format!("port_value: {upstream}")),
            ];
            text = put(&text, &what, &[&[keygate][..], &ports].concat());
            let file = dir.join("envoy.yaml");
            std::fs::write(&file, text).unwrap();
            let mut c = Command::new(tool("envoy"));
            // Hot restart off: two Envoys at once would share its base id.
            c.args(["-c", &file.display().to_string(), "--disable-hot-restart", "--log-level", "warn"]);
            c
        }
        Gateway::EnvoyGrpc => {
            let ports = [
                ("address: 0.0.0.0, port_value: 8000", format!("address: 127.0.0.1, port_value: {listen}")),
                ("port_value: 8081", format!("port_value: {grpc}")),
                ("port_value: 9000", format!("port_value: {upstream}")),
            ];
            text = put(&text, &what, &ports);
            let file = dir.join("envoy.yaml");
            std::fs::write(&file, text).unwrap();
            let mut c = Command::new(tool("envoy"));
            c.args(["-c", &file.display().to_string(), "--disable-hot-restart", "--log-level", "warn"]);
            c
        }
        Gateway::Haproxy => {
            let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/haproxy/keygate.lua");
            let pairs = [
                keygate,
                up,
                ("bind :8000", format!("bind 127.0.0.1:{listen}")),
                ("/etc/haproxy/keygate.lua", lua.canonicalize().unwrap().display().to_string()),
            ];
            text = put(&text, &what, &pairs);
            let file = dir.join("haproxy.cfg");
            std::fs::write(&file, text).unwrap();
            let mut c = Command::new("haproxy");
            c.args(["-db", "-f", &file.display().to_string()]);
            c
        }
    };
    // SIGTERM first: nginx's master then stops its workers.
    let proc = Proc::spawn(cmd).terminate_on_drop();
    wait_for_port(listen, gateway.name());
    // Up once a request without a key is refused by keygate through it (Traefik and Envoy
    // listen before their routes are loaded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = keygate_test_support::request(listen, "GET", "/ready", &[], "");
        if r.status == 401 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{what} never answered 401 through keygate: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (proc, listen)
}
