//! Where a key may be used from (API-v2.md §25): `allowedIps` on APIs, identities and keys,
//! each a list of IPv4/IPv6 addresses and CIDR ranges. A verification from address `ip`
//! passes when `ip` is in every list that is set (the intersection); when any is set and
//! the verification gives no address, it does not pass.

use crate::ValidationError;
use ipnet::IpNet;
use std::net::IpAddr;

/// The most entries one list holds.
pub const MAX_ALLOWED_IPS: usize = 100;
/// The longest entry taken (`ffff:…/128` is 43 characters).
const MAX_ENTRY_CHARS: usize = 64;

/// A list of addresses and ranges, each held as a range (an address: /32 or /128), in the
/// order given, host bits cleared (`10.1.2.3/8` is held as `10.0.0.0/8`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedIps(Box<[IpNet]>);

impl AllowedIps {
    /// The list of `entries` (request field `field`): 400 naming the entry for a
    /// malformed one, or more than [`MAX_ALLOWED_IPS`]. An empty list is `None`: nothing
    /// narrows (as `null`).
    pub fn parse(field: &str, entries: &[String]) -> Result<Option<Self>, ValidationError> {
        if entries.len() > MAX_ALLOWED_IPS {
            let msg = format!("at most {MAX_ALLOWED_IPS} addresses or ranges");
            return Err(ValidationError::new(field, msg));
        }
        let mut nets = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let bad = || {
                let msg = "must be an IPv4 or IPv6 address, or a range in CIDR notation (10.0.0.0/8, 2001:db8::/32)";
                ValidationError::new(format!("{field}.{i}"), msg)
            };
            // (A prefix length is written as a number is: `/8`, never `/08`.)
            let padded = e.split_once('/').is_some_and(|(_, len)| len.len() > 1 && len.starts_with('0'));
            if e.len() > MAX_ENTRY_CHARS || padded {
                return Err(bad());
            }
            let net = match e.parse::<IpAddr>() {
                Ok(addr) => IpNet::from(unmapped(addr)),
                Err(_) => e.parse::<IpNet>().map_err(|_| bad())?.trunc(),
            };
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
        Ok((!nets.is_empty()).then(|| Self(nets.into())))
    }

    /// Whether `ip` is in the list (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// The entries as shown and stored: addresses alone, ranges in CIDR notation.
    pub fn entries(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|n| if n.prefix_len() == n.max_prefix_len() { n.addr().to_string() } else { n.to_string() })
            .collect()
    }

    /// The stored form: the entries, comma-separated.
    pub fn to_stored(&self) -> String {
        self.entries().join(",")
    }

    /// From [`Self::to_stored`]'s form (a row that does not read back narrows to nothing:
    /// no address passes it).
    pub fn from_stored(text: &str) -> Self {
        let nets: Vec<IpNet> = text
            .split(',')
            .filter_map(|e| e.parse::<IpAddr>().map(IpNet::from).or_else(|_| e.parse::<IpNet>()).ok())
            .collect();
        Self(nets.into())
    }

    /// About the bytes it holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.0.len() * std::mem::size_of::<IpNet>()
    }
}

/// Whether a verification from `ip` passes every list of `lists` that is set.
pub fn admits<'a>(lists: impl IntoIterator<Item = Option<&'a AllowedIps>>, ip: Option<IpAddr>) -> bool {
    lists.into_iter().flatten().all(|list| ip.is_some_and(|ip| list.contains(ip)))
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowedIps {
        let owned: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        AllowedIps::parse("allowedIps", &owned).unwrap().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_and_ranges_of_both_families_match() {
        let l = list(&["203.0.113.7", "10.0.0.0/8", "2001:db8::/32", "::1"]);
        for yes in ["203.0.113.7", "10.255.0.1", "2001:db8:ffff::1", "::1", "::ffff:10.1.2.3"] {
            assert!(l.contains(ip(yes)), "{yes}");
        }
        for no in ["203.0.113.8", "11.0.0.1", "2001:db9::1", "::2", "192.168.0.1"] {
            assert!(!l.contains(ip(no)), "{no}");
        }
        assert_eq!(l.entries(), ["203.0.113.7", "10.0.0.0/8", "2001:db8::/32", "::1"]);
        assert_eq!(AllowedIps::from_stored(&l.to_stored()), l);
        assert_eq!(list(&["10.1.2.3/8"]).entries(), ["10.0.0.0/8"]);
    }

    #[test]
    fn every_form_the_openapi_pattern_allows_parses() {
        // One of each alternative of `IP_RANGE` (keygate-http's OpenAPI documents).
        let forms = [
            "255.255.255.255/32",
            "0.0.0.0/0",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "1::",
            "1:2:3:4:5:6::8",
            "1:2:3:4:5::7:8",
            "1:2:3:4::6:7:8",
            "1:2:3::5:6:7:8",
            "1:2::4:5:6:7:8",
            "1::3:4:5:6:7:8",
            "::2:3:4:5:6:7:8",
            "::",
            "FFFF:0000::1/128",
            "::/0",
            "2001:db8::/119",
        ];
        let owned: Vec<String> = forms.iter().map(|f| f.to_string()).collect();
        assert_eq!(AllowedIps::parse("allowedIps", &owned).unwrap().unwrap().entries().len(), forms.len());
    }

    #[test]
    fn bad_entries_and_long_lists_are_refused_naming_the_entry() {
        for bad in [
            "10.0.0.0/33",
            "300.1.1.1",
            "10.0.0",
            "::/129",
            "",
            "a.b.c.d",
            "10.0.0.1/",
            "1.2.3.4 ",
            "10.0.0.0/08",
        ] {
            let e = AllowedIps::parse("allowedIps", &["1.1.1.1".into(), bad.into()]).unwrap_err();
            assert_eq!(e.path, "allowedIps.1", "{bad}");
        }
        let many: Vec<String> = (0..=100).map(|i| format!("10.0.{i}.0/24")).collect();
        assert_eq!(AllowedIps::parse("allowedIps", &many).unwrap_err().path, "allowedIps");
        assert_eq!(AllowedIps::parse("allowedIps", &many[..100]).unwrap().unwrap().entries().len(), 100);
        assert_eq!(AllowedIps::parse("allowedIps", &[]).unwrap(), None);
    }

    #[test]
    fn the_lists_that_are_set_all_apply() {
        let (a, b) = (list(&["10.0.0.0/8"]), list(&["10.1.0.0/16", "192.168.0.1"]));
        assert!(admits([Some(&a), None, Some(&b)], Some(ip("10.1.2.3"))));
        assert!(!admits([Some(&a), None, Some(&b)], Some(ip("10.2.0.1"))), "in one list only");
        assert!(!admits([Some(&a)], None), "no address given");
        assert!(admits([None, None], None), "no list set");
    }
}
