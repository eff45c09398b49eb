use rand::RngCore;

/// The id prefixes of contract §1.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdPrefix {
    Workspace,
    RootKey,
    Key,
    Permission,
    Role,
    Namespace,
    Override,
    Request,
    AuditEvent,
}

impl IdPrefix {
    pub const fn as_str(self) -> &'static str {
        match self {
            IdPrefix::Workspace => "ws",
            IdPrefix::RootKey => "rk",
            IdPrefix::Key => "key",
            IdPrefix::Permission => "perm",
            IdPrefix::Role => "role",
            IdPrefix::Namespace => "rlns",
            IdPrefix::Override => "rlor",
            IdPrefix::Request => "req",
            IdPrefix::AuditEvent => "evt",
        }
    }
}

/// `<prefix>_<base58 of 128 random bits>`: URL-safe, at least 96 random bits (contract §1.2).
pub fn new_id(prefix: IdPrefix) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let mut out = String::with_capacity(prefix.as_str().len() + 1 + 22);
    out.push_str(prefix.as_str());
    out.push('_');
    out.push_str(&bs58::encode(bytes).into_string());
    out
}

/// A secret token: `<prefix>_<base58 of 256 random bits>`.
pub fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}_{}", bs58::encode(bytes).into_string())
}

/// Whether `id` has the shape `<prefix>_...`. A reference with the wrong prefix is simply
/// not found; callers use this to skip a pointless lookup.
pub fn has_prefix(id: &str, prefix: IdPrefix) -> bool {
    id.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.starts_with('_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_prefix_and_enough_entropy() {
        let a = new_id(IdPrefix::Permission);
        let b = new_id(IdPrefix::Permission);
        assert_ne!(a, b);
        assert!(a.starts_with("perm_"));
        let body = &a["perm_".len()..];
        // 128 bits in base58 need at least 17 characters.
        assert!(body.len() >= 17, "{a}");
        assert!(body.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(has_prefix(&a, IdPrefix::Permission));
        assert!(!has_prefix(&a, IdPrefix::Role));
        assert!(!has_prefix("permx_1", IdPrefix::Permission));
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let t = random_token("kg");
        assert!(t.starts_with("kg_") && t.len() > 40);
        assert_ne!(t, random_token("kg"));
    }
}
