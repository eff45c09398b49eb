//! Validation of names and identifiers (contract §1.2, §5). Lengths are counted in
//! Unicode scalar values, never bytes.

use crate::ValidationError;

pub const MAX_NAME_CHARS: usize = 255;
pub const MAX_KEY_ID_CHARS: usize = 255;
pub const MAX_IDENTIFIER_CHARS: usize = 512;
/// 2^53 - 1, the largest integer every JSON client represents exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Checks `1 <= chars(value) <= max`.
pub fn check_len(path: &str, value: &str, max: usize) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(path, "must not be empty"));
    }
    // Cheap exit: a string of at most `max` bytes has at most `max` chars.
    if value.len() > max && value.chars().count() > max {
        return Err(ValidationError::new(path, format!("must be at most {max} characters")));
    }
    Ok(())
}

/// Permission names: 1-255 characters of `A-Z a-z 0-9 . _ - : *`.
pub fn validate_permission_name(path: &str, name: &str) -> Result<(), ValidationError> {
    check_len(path, name, MAX_NAME_CHARS)?;
    if let Some(bad) =
        name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '*')))
    {
        return Err(ValidationError::new(
            path,
            format!("invalid character {bad:?}; permission names use A-Z a-z 0-9 . _ - : *"),
        ));
    }
    Ok(())
}

/// Names people read (roles, keys, workspaces): 1-255 characters, no control characters.
/// (Permission names are narrower: [`validate_permission_name`].)
pub fn validate_display_name(path: &str, name: &str) -> Result<(), ValidationError> {
    check_len(path, name, MAX_NAME_CHARS)?;
    if name.chars().any(char::is_control) {
        return Err(ValidationError::new(path, "must not contain control characters"));
    }
    Ok(())
}

/// API names (API-v2.md §10): 3-255 characters, a letter then `A-Z a-z 0-9 . _ -`.
pub fn validate_api_name(path: &str, name: &str) -> Result<(), ValidationError> {
    check_len(path, name, MAX_NAME_CHARS)?;
    if name.chars().count() < 3 {
        return Err(ValidationError::new(path, "must be at least 3 characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(ValidationError::new(path, "must start with a letter"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(ValidationError::new(
            path,
            format!("invalid character {bad:?}; API names use A-Z a-z 0-9 . _ -"),
        ));
    }
    Ok(())
}

/// An identity's `externalId` (API-v2.md §11): 1-255 characters of `A-Z a-z 0-9 _ . -`.
pub fn validate_external_id(path: &str, id: &str) -> Result<(), ValidationError> {
    check_len(path, id, MAX_NAME_CHARS)?;
    if let Some(bad) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(ValidationError::new(path, format!("invalid character {bad:?}; use A-Z a-z 0-9 _ . -")));
    }
    Ok(())
}

/// Rate-limit namespace names: 1-512 characters, no NUL (which PostgreSQL text cannot
/// store; refused on every backend so that both behave the same).
pub fn validate_namespace_name(path: &str, name: &str) -> Result<(), ValidationError> {
    check_len(path, name, MAX_IDENTIFIER_CHARS)?;
    if name.contains('\0') {
        return Err(ValidationError::new(path, "must not contain NUL characters"));
    }
    Ok(())
}

/// `keyId`: 1-255 characters.
pub fn validate_key_id(path: &str, key_id: &str) -> Result<(), ValidationError> {
    check_len(path, key_id, MAX_KEY_ID_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_names() {
        for ok in ["a", "documents.read", "rbac.*.add_role_to_key", "A-b_c:d", &"x".repeat(255)] {
            assert!(validate_permission_name("p", ok).is_ok(), "{ok}");
        }
        let e = validate_permission_name("permissions.0.name", "").unwrap_err();
        assert_eq!(e.to_string(), "permissions.0.name: must not be empty");
        assert!(validate_permission_name("p", &"x".repeat(256)).is_err());
        assert!(validate_permission_name("p", "has space").is_err());
        assert!(validate_permission_name("p", "é").is_err());
        assert!(validate_permission_name("p", "a/b").is_err());
    }

    #[test]
    fn role_names_count_characters_not_bytes() {
        assert!(validate_display_name("r", &"é".repeat(255)).is_ok());
        assert!(validate_display_name("r", &"é".repeat(256)).is_err());
        assert!(validate_display_name("r", "admin team").is_ok());
        assert!(validate_display_name("r", "bad\nname").is_err());
        assert!(validate_display_name("r", "").is_err());
    }

    #[test]
    fn namespace_names() {
        assert!(validate_namespace_name("namespace", "api.v1/users").is_ok());
        assert!(validate_namespace_name("namespace", &"n".repeat(512)).is_ok());
        assert!(validate_namespace_name("namespace", &"n".repeat(513)).is_err());
        let e = validate_namespace_name("namespace", "a\0b").unwrap_err();
        assert_eq!(e.to_string(), "namespace: must not contain NUL characters");
    }

    #[test]
    fn key_ids() {
        assert!(validate_key_id("keyId", "key_1").is_ok());
        assert!(validate_key_id("keyId", "").is_err());
        assert!(validate_key_id("keyId", &"k".repeat(256)).is_err());
    }

    proptest::proptest! {
        /// The validators against their definitions, on random strings drawn to hit the
        /// edges (lengths around 255, the allowed alphabet, controls, NUL, non-ASCII).
        #[test]
        fn validators_accept_exactly_their_definitions(
            name in proptest::string::string_regex("[a-zA-Z0-9._:*\\-]{0,3}|[a-z.]{250,260}|[\\x00-\\x7f\u{e9}\u{1f600}]{0,20}|[\u{80}-\u{9f}a]{1,4}").unwrap(),
        ) {
            let chars = name.chars().count();
            let permission_ok = (1..=255).contains(&chars)
                && name.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:*".contains(c));
            proptest::prop_assert_eq!(validate_permission_name("p", &name).is_ok(), permission_ok, "{:?}", name);
            let role_ok = (1..=255).contains(&chars) && !name.chars().any(char::is_control);
            proptest::prop_assert_eq!(validate_display_name("p", &name).is_ok(), role_ok, "{:?}", name);
            let namespace_ok = (1..=512).contains(&chars) && !name.contains('\0');
            proptest::prop_assert_eq!(validate_namespace_name("p", &name).is_ok(), namespace_ok, "{:?}", name);
            proptest::prop_assert_eq!(validate_key_id("p", &name).is_ok(), (1..=255).contains(&chars));
            // Every refusal names the field.
            if let Err(e) = validate_permission_name("permissions.3.name", &name) {
                proptest::prop_assert!(e.to_string().starts_with("permissions.3.name: "));
            }
        }
    }
}
