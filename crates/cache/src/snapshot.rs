//! The verification cache's keys in a file (issue 82): written when a process stops, read
//! when the next starts, so that it answers from memory within a second or two instead of
//! loading each key on its first verification. Only what [`CachedKey`] holds, its shared
//! parts written once (names, grants, scopes, identities as tables, each key naming its
//! rows); a header the reader checks before anything else (whose database and schema, and
//! where its change history stood); a CRC-32 over it all. Whether the keys are still
//! current is the caller's to decide from the header (keygate-runtime's `warm.rs`): the
//! file knows nothing of databases.

use crate::compact::{CachedKey, KeyCredits, Lifetime, Rare};
use crate::intern::{Grants, Interner, KeyScope, Name};
use crate::ttl::Digest;
use keygate_domain::AllowedIps;
use keygate_domain::{Credits, Identity, IdentityView, RateLimitConfig, Refill, RefillInterval};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// `expires` of a key that never expires.
const NO_EXPIRY: i64 = i64::MIN;

/// The file's form; a file of another is not read. Raise it whenever what a cached key
/// means or holds changes.
pub const FORMAT: u32 = 2;

/// What a snapshot says of where it comes from: checked before its keys are used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// [`FORMAT`] of the process that wrote it.
    pub format: u32,
    /// The database's latest migration when it was written.
    pub schema: String,
    /// The database's change counters when it was written: the highest change number, and
    /// the counter that carried it (name, value, when), which says the history is the same
    /// one when the file is read.
    pub seq: i64,
    pub mark: Option<(String, u64, i64)>,
    /// Unix ms.
    pub written_at: i64,
}

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a snapshot of cached keys, or a damaged one: {0}")]
    Damaged(String),
}

#[derive(Serialize, Deserialize)]
struct Limit {
    id: String,
    name: String,
    limit: u64,
    duration: u64,
    auto_apply: bool,
    /// [`keygate_domain::Algorithm::as_str`].
    algorithm: String,
}

#[derive(Serialize, Deserialize)]
struct IdentityRow {
    id: String,
    workspace_id: String,
    external_id: String,
    meta: Option<String>,
    created_at: i64,
    updated_at: i64,
    ratelimits: Vec<Limit>,
    /// Its `allowedIps`, stored form (absent from snapshots written before it was kept).
    #[serde(default)]
    allowed_ips: Option<String>,
}

/// A refill: daily (else monthly), amount, day, last refill.
type RefillRow = (bool, u64, Option<u8>, Option<i64>);

#[derive(Serialize, Deserialize)]
struct RareRow {
    name: Option<String>,
    meta: Option<String>,
    /// remaining, refill, created_at.
    credits: Option<(u64, Option<RefillRow>, i64)>,
    ratelimits: Vec<Limit>,
    identity_id: Option<String>,
    /// The key's and its API's `allowedIps`, stored form.
    #[serde(default)]
    allowed_ips: Option<String>,
    #[serde(default)]
    api_allowed_ips: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct KeyRow {
    digest: Digest,
    id: String,
    enabled: bool,
    /// Unix ms, or [`NO_EXPIRY`].
    expires: i64,
    scope: u32,
    grants: u32,
    identity: Option<u32>,
    rare: Option<RareRow>,
}

/// The shared parts, each once: keys name them by their place.
#[derive(Default, Serialize, Deserialize)]
struct Tables {
    names: Vec<String>,
    /// Permissions and roles, as places in `names`.
    grants: Vec<(Vec<u32>, Vec<u32>)>,
    /// Workspace and API, as places in `names`.
    scopes: Vec<(u32, Option<u32>)>,
    identities: Vec<IdentityRow>,
}

fn limit_row(l: &RateLimitConfig) -> Limit {
    Limit {
        id: l.id.clone(),
        name: l.name.clone(),
        limit: l.limit,
        duration: l.duration,
        auto_apply: l.auto_apply,
        algorithm: l.algorithm.as_str().to_string(),
    }
}

fn limit_of(l: Limit) -> RateLimitConfig {
    RateLimitConfig {
        id: l.id,
        name: l.name,
        limit: l.limit,
        duration: l.duration,
        auto_apply: l.auto_apply,
        // A name this build does not know (a newer writer's): the strictest reading is not
        // guessable, so the file's FORMAT is raised with any new name.
        algorithm: keygate_domain::Algorithm::parse(&l.algorithm).unwrap_or_default(),
    }
}

/// The tables being made: each shared part's place, found by its address.
#[derive(Default)]
struct TableMaker {
    tables: Tables,
    names: HashMap<Name, u32>,
    grants: HashMap<*const Grants, u32>,
    scopes: HashMap<*const KeyScope, u32>,
    identities: HashMap<*const IdentityView, u32>,
}

fn place(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl TableMaker {
    fn name(&mut self, n: &Name) -> u32 {
        if let Some(i) = self.names.get(n) {
            return *i;
        }
        let i = place(self.tables.names.len());
        self.tables.names.push(n.to_string());
        self.names.insert(n.clone(), i);
        i
    }

    fn key(&mut self, digest: &Digest, k: &CachedKey) -> KeyRow {
        let scope = match self.scopes.get(&Arc::as_ptr(&k.scope)) {
            Some(i) => *i,
            None => {
                let row = (self.name(&k.scope.workspace_id), k.scope.api_id.as_ref().map(|a| self.name(a)));
                let i = place(self.tables.scopes.len());
                self.tables.scopes.push(row);
                self.scopes.insert(Arc::as_ptr(&k.scope), i);
                i
            }
        };
        let grants = match self.grants.get(&Arc::as_ptr(&k.grants)) {
            Some(i) => *i,
            None => {
                let p = k.grants.permissions.iter().map(|n| self.name(n)).collect();
                let r = k.grants.roles.iter().map(|n| self.name(n)).collect();
                let i = place(self.tables.grants.len());
                self.tables.grants.push((p, r));
                self.grants.insert(Arc::as_ptr(&k.grants), i);
                i
            }
        };
        let identity = k.identity.as_ref().map(|view| match self.identities.get(&Arc::as_ptr(view)) {
            Some(i) => *i,
            None => {
                let id = &view.identity;
                let i = place(self.tables.identities.len());
                self.tables.identities.push(IdentityRow {
                    id: id.id.clone(),
                    workspace_id: id.workspace_id.clone(),
                    external_id: id.external_id.clone(),
                    meta: id.meta.clone(),
                    created_at: id.created_at,
                    updated_at: id.updated_at,
                    ratelimits: view.ratelimits.iter().map(limit_row).collect(),
                    allowed_ips: id.allowed_ips.as_ref().map(AllowedIps::to_stored),
                });
                self.identities.insert(Arc::as_ptr(view), i);
                i
            }
        });
        let rare = k.rare.as_ref().map(|r| RareRow {
            name: r.name.as_deref().map(str::to_string),
            meta: r.meta.as_deref().map(str::to_string),
            credits: r.credits.as_ref().map(|c| {
                let refill = c
                    .credits
                    .refill
                    .as_ref()
                    .map(|f| (f.interval == RefillInterval::Daily, f.amount, f.day, f.last_refill_at));
                (c.credits.remaining, refill, c.created_at)
            }),
            ratelimits: r.ratelimits.iter().map(limit_row).collect(),
            identity_id: r.identity_id.as_deref().map(str::to_string),
            allowed_ips: r.allowed_ips.as_ref().map(AllowedIps::to_stored),
            api_allowed_ips: r.api_allowed_ips.as_ref().map(AllowedIps::to_stored),
        });
        KeyRow {
            digest: *digest,
            id: k.id().to_string(),
            enabled: k.enabled(),
            expires: k.expires().unwrap_or(NO_EXPIRY),
            scope,
            grants,
            identity,
            rare,
        }
    }
}

/// A writer that keeps the CRC-32 of what passes through it.
struct Summed<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: std::io::Write> std::io::Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn encode<T: Serialize, W: std::io::Write>(w: &mut W, value: &T) -> Result<(), SnapshotError> {
    rmp_serde::encode::write(w, value).map_err(|e| match e {
        rmp_serde::encode::Error::InvalidValueWrite(rmp::encode::ValueWriteError::InvalidDataWrite(io))
        | rmp_serde::encode::Error::InvalidValueWrite(rmp::encode::ValueWriteError::InvalidMarkerWrite(io)) => {
            SnapshotError::Io(io)
        }
        other => SnapshotError::Damaged(other.to_string()),
    })
}

/// Writes `header` and `keys` to `w` (see the module docs).
pub fn write_snapshot<W: std::io::Write>(
    w: W,
    header: &SnapshotHeader,
    keys: &[(Digest, &CachedKey)],
) -> Result<(), SnapshotError> {
    let mut maker = TableMaker::default();
    let rows: Vec<KeyRow> = keys.iter().map(|(d, k)| maker.key(d, k)).collect();
    let mut out = Summed { inner: w, crc: crc32fast::Hasher::new() };
    encode(&mut out, header)?;
    encode(&mut out, &maker.tables)?;
    encode(&mut out, &rows)?;
    let Summed { mut inner, crc } = out;
    inner.write_all(&crc.finalize().to_le_bytes())?;
    inner.flush()?;
    Ok(())
}

/// A snapshot read whole and checked, its header first (see the module docs).
pub struct SnapshotReader {
    bytes: Vec<u8>,
    /// Where the tables start.
    at: usize,
    header: SnapshotHeader,
}

impl std::fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotReader")
            .field("header", &self.header)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl SnapshotReader {
    /// Reads `r` to its end and checks it whole (its sum, its header's form).
    pub fn read<R: std::io::Read>(mut r: R) -> Result<Self, SnapshotError> {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)?;
        let Some(split) = bytes.len().checked_sub(4) else {
            return Err(SnapshotError::Damaged("shorter than its sum".into()));
        };
        let sum = u32::from_le_bytes(bytes[split..].try_into().unwrap_or_default());
        bytes.truncate(split);
        if crc32fast::hash(&bytes) != sum {
            return Err(SnapshotError::Damaged("its sum does not match".into()));
        }
        let mut slice = &bytes[..];
        let header: SnapshotHeader = decode(&mut slice)?;
        if header.format != FORMAT {
            return Err(SnapshotError::Damaged(format!(
                "form {} (this keygate reads {FORMAT})",
                header.format
            )));
        }
        let at = bytes.len() - slice.len();
        Ok(Self { bytes, at, header })
    }

    pub fn header(&self) -> &SnapshotHeader {
        &self.header
    }

    /// The keys, their shared parts taken from (and given to) `interner`.
    pub fn keys(self, interner: &Interner) -> Result<Vec<(Digest, CachedKey)>, SnapshotError> {
        let mut slice = &self.bytes[self.at..];
        let tables: Tables = decode(&mut slice)?;
        let rows: Vec<KeyRow> = decode(&mut slice)?;
        let name = |i: u32| tables.names.get(i as usize).ok_or_else(|| damaged("a name"));
        let names = |places: &[u32]| -> Result<Vec<String>, SnapshotError> {
            places.iter().map(|p| name(*p).cloned()).collect()
        };
        let grants = tables
            .grants
            .iter()
            .map(|(p, r)| Ok(interner.grants(&names(p)?, &names(r)?)))
            .collect::<Result<Vec<_>, SnapshotError>>()?;
        let scopes = tables
            .scopes
            .iter()
            .map(|(w, a)| Ok(interner.scope(name(*w)?, a.map(name).transpose()?.map(String::as_str))))
            .collect::<Result<Vec<_>, SnapshotError>>()?;
        let identities: Vec<Arc<IdentityView>> = tables
            .identities
            .into_iter()
            .map(|i| {
                interner.identity(IdentityView {
                    identity: Identity {
                        id: i.id,
                        workspace_id: i.workspace_id,
                        external_id: i.external_id,
                        meta: i.meta,
                        allowed_ips: i.allowed_ips.as_deref().map(AllowedIps::from_stored),
                        created_at: i.created_at,
                        updated_at: i.updated_at,
                    },
                    ratelimits: i.ratelimits.into_iter().map(limit_of).collect(),
                })
            })
            .collect();
        rows.into_iter()
            .map(|row| {
                let rare = row.rare.map(|r| Rare {
                    name: r.name.map(Into::into),
                    meta: r.meta.map(Into::into),
                    credits: r.credits.map(|(remaining, refill, created_at)| KeyCredits {
                        credits: Credits {
                            remaining,
                            refill: refill.map(|(daily, amount, day, last_refill_at)| Refill {
                                interval: if daily { RefillInterval::Daily } else { RefillInterval::Monthly },
                                amount,
                                day,
                                last_refill_at,
                            }),
                        },
                        created_at,
                    }),
                    ratelimits: r.ratelimits.into_iter().map(limit_of).collect(),
                    identity_id: r.identity_id.map(Into::into),
                    allowed_ips: r.allowed_ips.as_deref().map(AllowedIps::from_stored),
                    api_allowed_ips: r.api_allowed_ips.as_deref().map(AllowedIps::from_stored),
                });
                let key = CachedKey {
                    id: row.id.into(),
                    scope: scopes.get(row.scope as usize).ok_or_else(|| damaged("a scope"))?.clone(),
                    grants: grants.get(row.grants as usize).ok_or_else(|| damaged("grants"))?.clone(),
                    identity: match row.identity {
                        Some(i) => {
                            Some(identities.get(i as usize).ok_or_else(|| damaged("an identity"))?.clone())
                        }
                        None => None,
                    },
                    rare: rare.map(Box::new),
                    lifetime: Lifetime::new((row.expires != NO_EXPIRY).then_some(row.expires), row.enabled),
                };
                Ok((row.digest, key))
            })
            .collect()
    }
}

fn damaged(what: &str) -> SnapshotError {
    SnapshotError::Damaged(format!("{what} named out of its table"))
}

/// The next value of `slice`, which moves past it.
fn decode<T: serde::de::DeserializeOwned>(slice: &mut &[u8]) -> Result<T, SnapshotError> {
    let mut de = rmp_serde::Deserializer::new(&mut *slice);
    T::deserialize(&mut de).map_err(|e| SnapshotError::Damaged(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_domain::{Key, KeySummary};

    fn summary(i: usize, identity: usize) -> KeySummary {
        let list = |entries: &[&str]| {
            let owned: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
            AllowedIps::parse("allowedIps", &owned).unwrap()
        };
        KeySummary {
            api_allowed_ips: i.is_multiple_of(2).then(|| list(&["10.0.0.0/8"])).flatten(),
            key: Key {
                allowed_ips: i.is_multiple_of(3).then(|| list(&["10.1.0.0/16", "2001:db8::1"])).flatten(),
                id: format!("key_{i:025}"),
                workspace_id: "ws_1".into(),
                api_id: i.is_multiple_of(2).then(|| "api_1".to_string()),
                identity_id: Some(format!("id_{identity}")),
                credits: i.is_multiple_of(3).then_some(Credits {
                    remaining: i as u64,
                    refill: Some(Refill {
                        interval: RefillInterval::Monthly,
                        amount: 10,
                        day: Some(3),
                        last_refill_at: Some(7),
                    }),
                }),
                prefix: None,
                byte_length: None,
                start: "sk_".into(),
                name: i.is_multiple_of(5).then(|| format!("key {i} é")),
                meta: None,
                enabled: !i.is_multiple_of(7),
                expires: i.is_multiple_of(4).then_some(i as i64),
                created_at: 11,
                updated_at: 12,
            },
            permissions: vec!["a.read".into(), format!("p.{}", i % 3)],
            roles: vec!["reader".into()],
            identity: Some(IdentityView {
                identity: Identity {
                    allowed_ips: identity.is_multiple_of(2).then(|| list(&["10.1.2.0/24"])).flatten(),
                    id: format!("id_{identity}"),
                    workspace_id: "ws_1".into(),
                    external_id: format!("customer {identity}"),
                    meta: Some("{\"plan\":\"pro\"}".into()),
                    created_at: 1,
                    updated_at: 2,
                },
                ratelimits: vec![RateLimitConfig {
                    id: "rl_1".into(),
                    name: "calls".into(),
                    limit: 5,
                    duration: 1_000,
                    auto_apply: true,
                    algorithm: keygate_domain::Algorithm::Sliding,
                }],
            }),
            ratelimits: Vec::new(),
            last_used: None,
        }
    }

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            format: FORMAT,
            schema: "2026-11-27-000021".into(),
            seq: 42,
            mark: Some(("key:key_1".into(), 3, 1_700_000_000_000)),
            written_at: 1_700_000_000_001,
        }
    }

    #[test]
    fn keys_come_back_as_they_were_their_shared_parts_shared() {
        let before = Interner::default();
        let keys: Vec<(Digest, CachedKey)> =
            (0..50).map(|i| ([i as u8; 32], CachedKey::new(summary(i, i % 4), &before))).collect();
        let mut file = Vec::new();
        let refs: Vec<(Digest, &CachedKey)> = keys.iter().map(|(d, k)| (*d, k)).collect();
        write_snapshot(&mut file, &header(), &refs).unwrap();
        let after = Interner::default();
        let reader = SnapshotReader::read(&file[..]).unwrap();
        assert_eq!(reader.header(), &header());
        let read = reader.keys(&after).unwrap();
        assert_eq!(read.len(), keys.len());
        for ((d1, k1), (d2, k2)) in keys.iter().zip(&read) {
            assert_eq!(d1, d2);
            assert_eq!(format!("{k1:?}"), format!("{k2:?}"));
            assert_eq!((k1.credits(), k1.name(), k1.identity()), (k2.credits(), k2.name(), k2.identity()));
            assert_eq!(k1.rare, k2.rare, "allowedIps of the key and its API too");
            for ip in ["10.1.2.3", "10.1.9.9", "10.9.0.1", "2001:db8::1", "192.168.0.1"] {
                let ip = Some(ip.parse().unwrap());
                assert_eq!(k1.admits_ip(ip), k2.admits_ip(ip));
            }
        }
        assert!(keys.iter().any(|(_, k)| !k.admits_ip(Some("10.9.0.1".parse().unwrap()))));
        assert!(Arc::ptr_eq(&read[0].1.grants, &read[3].1.grants), "keys alike share again");
        assert!(Arc::ptr_eq(read[1].1.identity.as_ref().unwrap(), read[5].1.identity.as_ref().unwrap()));
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused() {
        let interner = Interner::default();
        let key = CachedKey::new(summary(1, 1), &interner);
        let mut file = Vec::new();
        write_snapshot(&mut file, &header(), &[([1; 32], &key)]).unwrap();
        for at in [0, file.len() / 2, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            assert!(
                matches!(SnapshotReader::read(&bad[..]), Err(SnapshotError::Damaged(_))),
                "flipped at {at}"
            );
        }
        assert!(SnapshotReader::read(&file[..file.len() - 3]).is_err());
        assert!(SnapshotReader::read(&b""[..]).is_err());
        let mut other = Vec::new();
        write_snapshot(&mut other, &SnapshotHeader { format: FORMAT + 1, ..header() }, &[]).unwrap();
        assert!(
            matches!(SnapshotReader::read(&other[..]), Err(SnapshotError::Damaged(m)) if m.contains("form"))
        );
    }
}
