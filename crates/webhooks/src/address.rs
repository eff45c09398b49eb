//! Where an endpoint may point (API-v2.md §23): never, unless the operator allows it, at
//! an address of this machine or of a private network — checked when the endpoint is
//! written, and again at every delivery on the addresses the connection will use (a name
//! that resolved to a public address at creation may resolve to a private one later).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// How long the check at creation waits for a name to resolve; past it the endpoint is
/// taken, and checked at delivery.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why an address is refused, when it is: loopback, private, link-local, unique-local,
/// unspecified, multicast or broadcast (IPv4-mapped, -compatible and NAT64 IPv6 addresses
/// as the IPv4 address they carry).
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        Some("a multicast or reserved address")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96): the IPv4 inside.
    if (s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified()) || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        return forbidden_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])));
    }
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Some("a unique-local address")
    } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
        Some("a link-local address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else {
        None
    }
}

/// Whether a host name is this machine's by definition (`localhost`, `*.localhost`).
pub fn is_local_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

/// Where webhook host names are looked up: the system's resolver, or the DNS server
/// `KEYGATE_WEBHOOKS_DNS` names (over UDP, then TCP; nothing cached), for instance a
/// resolver that answers only for public names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Names {
    #[default]
    System,
    Server(SocketAddr),
}

impl Names {
    /// `host`'s addresses.
    async fn lookup(self, host: &str) -> Result<Vec<IpAddr>, String> {
        use hickory_resolver::config::{NameServerConfig, ResolverConfig};
        use hickory_resolver::net::runtime::TokioRuntimeProvider;
        let Names::Server(server) = self else {
            let found = tokio::net::lookup_host((host, 0)).await.map_err(|e| e.to_string())?;
            return Ok(found.map(|a| a.ip()).collect());
        };
        let mut ns = NameServerConfig::udp_and_tcp(server.ip());
        for c in &mut ns.connections {
            c.port = server.port();
        }
        let mut builder = hickory_resolver::Resolver::builder_with_config(
            ResolverConfig::from_parts(None, Vec::new(), vec![ns]),
            TokioRuntimeProvider::default(),
        );
        let options = builder.options_mut();
        options.cache_size = 0;
        options.timeout = RESOLVE_TIMEOUT;
        options.attempts = 1;
        let resolver = builder.build().map_err(|e| e.to_string())?;
        let found = resolver.lookup_ip(host).await.map_err(|e| e.to_string())?;
        Ok(found.iter().collect())
    }

    /// `host`'s addresses, or `None` when they are not known within `wait`. Blocking.
    fn lookup_within(self, host: &str, wait: Duration) -> Option<Vec<IpAddr>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let host = host.to_string();
        std::thread::Builder::new()
            .name("keygate-webhook-resolve".into())
            .spawn(move || {
                let found = match self {
                    Names::System => (host.as_str(), 0)
                        .to_socket_addrs()
                        .map(|a| a.map(|s| s.ip()).collect::<Vec<_>>())
                        .map_err(|e| e.to_string()),
                    Names::Server(_) => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())
                        .and_then(|rt| rt.block_on(self.lookup(&host))),
                };
                let _ = tx.send(found);
            })
            .ok()?;
        rx.recv_timeout(wait).ok()?.ok()
    }
}

/// The reason `url` may not be called, if any: an IP literal or a local name at once; a
/// name by what it resolves to now through `names` (within [`RESOLVE_TIMEOUT`]; a name
/// that does not resolve yet is taken, and checked at each delivery). Blocking.
pub fn refusal(url: &url::Url, names: Names) -> Option<String> {
    match url.host()? {
        url::Host::Ipv4(ip) => forbidden(IpAddr::V4(ip)).map(|why| format!("{ip} is {why}")),
        url::Host::Ipv6(ip) => forbidden(IpAddr::V6(ip)).map(|why| format!("{ip} is {why}")),
        url::Host::Domain(name) if is_local_name(name) => Some(format!("{name} is this machine")),
        url::Host::Domain(name) => {
            let addrs = names.lookup_within(name, RESOLVE_TIMEOUT)?;
            addrs.iter().find_map(|ip| forbidden(*ip).map(|why| format!("{name} resolves to {why}")))
        }
    }
}

/// Resolves names for deliveries through `names` and drops every address [`forbidden`]
/// refuses (unless private addresses are allowed): a name with no other address fails to
/// connect.
#[derive(Debug, Clone, Copy)]
pub struct CheckedResolver {
    pub allow_private: bool,
    pub names: Names,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let Self { allow_private, names } = *self;
        Box::pin(async move {
            let host = name.as_str().to_string();
            if !allow_private && is_local_name(&host) {
                return Err(format!("{host} is this machine").into());
            }
            let found = names.lookup(&host).await?;
            let allowed: Vec<SocketAddr> = found
                .iter()
                .filter(|ip| allow_private || forbidden(**ip).is_none())
                .map(|ip| SocketAddr::new(*ip, 0))
                .collect();
            if allowed.is_empty() {
                let why = found.first().and_then(|ip| forbidden(*ip)).unwrap_or("no address");
                return Err(format!("{host} resolves to {why}").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        forbidden(s.parse().unwrap()).is_some()
    }

    #[test]
    fn private_loopback_link_local_and_unique_local_are_refused_in_every_form() {
        for ip in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.1.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "ff02::1",
        ] {
            assert!(refused(ip), "{ip} must be refused");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!refused(ip), "{ip} is public");
        }
    }

    #[test]
    fn literals_and_local_names_are_refused_without_a_lookup() {
        for u in [
            "http://127.0.0.1/",
            "http://[::1]:8080/",
            "http://localhost/",
            "http://api.localhost./x",
            "http://[::ffff:192.168.0.1]/",
            "http://[fd00::1]/",
            "http://169.254.169.254/latest",
        ] {
            let url = url::Url::parse(u).unwrap();
            assert!(refusal(&url, Names::System).is_some(), "{u}");
        }
        assert!(refusal(&url::Url::parse("http://93.184.216.34/").unwrap(), Names::System).is_none());
    }
}
