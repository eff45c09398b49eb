//! One shared copy of what many cached keys hold alike: names (permissions, roles, the ids
//! of workspaces and APIs), sets of names (a key's effective permissions, its roles) and
//! identities. A million keys of a few plans hold a few hundred distinct names and sets,
//! and customers' keys share their identity: each key then holds pointers, not copies.
//!
//! The tables keep a copy while some key holds it: they are swept of what only they still
//! hold whenever they have doubled since the last sweep, so their size follows the keys
//! cached, not every name ever seen.

use keygate_domain::IdentityView;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A name many cached keys hold alike, held once (see the module docs): compares, hashes
/// and reads as its text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The bytes it holds on the heap (its text and the reference counts).
    fn heap_bytes(&self) -> usize {
        self.0.len() + 16
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name of its own, shared with nothing (the [`Interner`] makes the shared ones).
impl From<&str> for Name {
    fn from(text: &str) -> Self {
        Name(text.into())
    }
}

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

/// A sorted set of names, held once.
pub type Names = Arc<[Name]>;

/// Where a key is: its workspace and API (keys of one API share one).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KeyScope {
    pub workspace_id: Name,
    pub api_id: Option<Name>,
}

/// What a key may do: its effective permissions and its roles, each sorted (keys of one
/// plan share one).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Grants {
    pub permissions: Names,
    pub roles: Names,
}

/// The shared copies (see the module docs); one per verification cache.
#[derive(Default)]
pub struct Interner {
    tables: Mutex<Tables>,
}

impl std::fmt::Debug for Interner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.tables.lock();
        f.debug_struct("Interner")
            .field("names", &t.names.len())
            .field("sets", &t.sets.len())
            .field("scopes", &t.scopes.len())
            .field("grants", &t.grants.len())
            .field("identities", &t.identities.len())
            .finish()
    }
}

#[derive(Default)]
struct Tables {
    names: HashSet<Name>,
    sets: HashSet<Names>,
    scopes: HashSet<Arc<KeyScope>>,
    grants: HashSet<Arc<Grants>>,
    identities: HashMap<Box<str>, Arc<IdentityView>>,
    /// Entries left by the last sweep.
    kept: usize,
}

/// Tables smaller than this are never swept.
const SWEEP_FROM: usize = 1_024;

impl Tables {
    fn name(&mut self, text: &str) -> Name {
        if let Some(n) = self.names.get(text) {
            return n.clone();
        }
        let n = Name(text.into());
        self.names.insert(n.clone());
        n
    }

    fn len(&self) -> usize {
        self.names.len() + self.sets.len() + self.scopes.len() + self.grants.len() + self.identities.len()
    }

    fn names(&mut self, names: &[String]) -> Names {
        let set: Vec<Name> = names.iter().map(|n| self.name(n)).collect();
        if let Some(s) = self.sets.get(&set[..]) {
            return s.clone();
        }
        let s: Names = set.into();
        self.sets.insert(s.clone());
        s
    }

    /// Drops what no cached key holds any more, once the tables have doubled since the
    /// last sweep.
    fn sweep_if_grown(&mut self) {
        if self.len() < SWEEP_FROM.max(2 * self.kept) {
            return;
        }
        // What holds others first: grants hold sets, sets and scopes hold names.
        self.grants.retain(|g| Arc::strong_count(g) > 1);
        self.scopes.retain(|s| Arc::strong_count(s) > 1);
        self.sets.retain(|s| Arc::strong_count(s) > 1);
        self.identities.retain(|_, i| Arc::strong_count(i) > 1);
        // Names last: the sets just dropped held some of them.
        self.names.retain(|n| Arc::strong_count(&n.0) > 1);
        self.kept = self.len();
    }
}

impl Interner {
    /// The shared copy of `text`.
    pub fn name(&self, text: &str) -> Name {
        let mut t = self.tables.lock();
        t.sweep_if_grown();
        t.name(text)
    }

    /// The shared copy of the set of `names` (sorted, each once, as given).
    pub fn names(&self, names: &[String]) -> Names {
        let mut t = self.tables.lock();
        t.sweep_if_grown();
        t.names(names)
    }

    /// The shared copy of a key's workspace and API.
    pub fn scope(&self, workspace_id: &str, api_id: Option<&str>) -> Arc<KeyScope> {
        let mut t = self.tables.lock();
        t.sweep_if_grown();
        let scope = KeyScope { workspace_id: t.name(workspace_id), api_id: api_id.map(|a| t.name(a)) };
        if let Some(s) = t.scopes.get(&scope) {
            return s.clone();
        }
        let s = Arc::new(scope);
        t.scopes.insert(s.clone());
        s
    }

    /// The shared copy of a key's permissions and roles (each sorted, each once).
    pub fn grants(&self, permissions: &[String], roles: &[String]) -> Arc<Grants> {
        let mut t = self.tables.lock();
        t.sweep_if_grown();
        let grants = Grants { permissions: t.names(permissions), roles: t.names(roles) };
        if let Some(g) = t.grants.get(&grants) {
            return g.clone();
        }
        let g = Arc::new(grants);
        t.grants.insert(g.clone());
        g
    }

    /// The shared copy of `identity` (as it is now: a changed identity is a new copy, and
    /// the old one goes with the last key that holds it).
    pub fn identity(&self, identity: IdentityView) -> Arc<IdentityView> {
        let mut t = self.tables.lock();
        t.sweep_if_grown();
        if let Some(held) = t.identities.get(identity.identity.id.as_str())
            && **held == identity
        {
            return held.clone();
        }
        let shared = Arc::new(identity);
        t.identities.insert(shared.identity.id.as_str().into(), shared.clone());
        shared
    }

    /// Entries held now (names, sets, identities).
    pub fn len(&self) -> usize {
        self.tables.lock().len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `grants` weigh on the heap, shared among the keys that hold them: a key's share
/// (the interner holds one reference of its own).
pub(crate) fn share_of_grants(grants: &Arc<Grants>) -> usize {
    let set = |names: &Names| {
        16 + names.len() * std::mem::size_of::<Name>() + names.iter().map(Name::heap_bytes).sum::<usize>()
    };
    let bytes = 16 + std::mem::size_of::<Grants>() + set(&grants.permissions) + set(&grants.roles);
    bytes / Arc::strong_count(grants).saturating_sub(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_domain::Identity;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn identity(id: &str, external_id: &str) -> IdentityView {
        IdentityView {
            identity: Identity {
                allowed_ips: None,
                id: id.into(),
                workspace_id: "ws_1".into(),
                external_id: external_id.into(),
                meta: None,
                created_at: 1,
                updated_at: 1,
            },
            ratelimits: Vec::new(),
        }
    }

    #[test]
    fn equal_names_sets_and_identities_are_one_copy() {
        let i = Interner::default();
        let (a, b) = (i.name("documents.read"), i.name("documents.read"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, "documents.read");
        let s1 = i.names(&strings(&["a", "b"]));
        let s2 = i.names(&strings(&["a", "b"]));
        assert!(Arc::ptr_eq(&s1, &s2));
        assert!(Arc::ptr_eq(&s1[0].0, &i.name("a").0), "a set's names are the shared names");
        assert!(!Arc::ptr_eq(&s1, &i.names(&strings(&["a"]))));
        let (x, y) = (i.identity(identity("id_1", "alice")), i.identity(identity("id_1", "alice")));
        assert!(Arc::ptr_eq(&x, &y));
        let changed = i.identity(identity("id_1", "alice2"));
        assert_eq!(changed.identity.external_id, "alice2", "a changed identity is a copy of its own");
        assert_eq!(x.identity.external_id, "alice", "the keys holding the old one keep it");
    }

    #[test]
    fn what_no_key_holds_is_swept_once_the_tables_double() {
        let i = Interner::default();
        let held: Vec<Names> = (0..100).map(|n| i.names(&strings(&[&format!("kept.{n}")]))).collect();
        for n in 0..5_000 {
            drop(i.names(&strings(&[&format!("gone.{n}")])));
        }
        assert!(i.len() < 2 * SWEEP_FROM + 300, "{} entries", i.len());
        // What keys hold stays shared.
        for (n, set) in held.iter().enumerate() {
            assert!(Arc::ptr_eq(set, &i.names(&strings(&[&format!("kept.{n}")]))));
        }
    }
}
