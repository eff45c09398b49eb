//! Keys brought in, v2's `keys.migrateKeys` (API-v2.md §15): keys issued elsewhere, by
//! their hashes, each made as `createKey` makes a key; and the entry type `keygate keys
//! import` reads from its JSON lines.

use super::shared::{MAX_EXPIRES_MS, MAX_PERMISSIONS, MAX_ROLES};
use crate::error::ApiError;
use crate::handlers::v2::credits::{CreditsRequest, new_credits};
use crate::handlers::v2::identities::{RatelimitRequest, new_ratelimits};
use crate::handlers::v2::{Envelope, check_count, ok};
use crate::openapi::{Api, V2Errors, kinds};
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{MAX_NAME_CHARS, ValidationError};
use keygate_rbac::{MAX_MIGRATED_KEYS, Migrated, MigratedKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MigrateKeysBody {
    /// How the hashes were computed: `sha256_hex`, `sha256_base64`, or a migration id the
    /// configuration maps to one of them or to an old system's hashes (`legacy:SEP:POS`).
    #[schema(min_length = 1, max_length = 255, example = "sha256_hex")]
    migration_id: String,
    /// The API the keys go into; it must exist.
    #[schema(min_length = 3, max_length = 255, pattern = "^[A-Za-z0-9_]+$", example = "api_1234")]
    api_id: String,
    #[schema(min_items = 1, max_items = 1000, value_type = Vec<MigrateKeyEntry>)]
    keys: Vec<Obj<MigrateKeyEntry>>,
}

/// One key to bring in: its hash, and every other field as `createKey` takes it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrateKeyEntry {
    /// The key's hash on your side, under the migration's scheme: the SHA-256 digest as 64
    /// hex digits (`sha256_hex`, either case) or 43 base64 characters, standard or URL-safe,
    /// padding optional (`sha256_base64`); under a legacy migration, the old system's hash
    /// of the whole key: bcrypt (`$2a$`, `$2b$`, `$2y$`, cost at most 14), an argon2 or
    /// scrypt PHC string (at most 128 MiB), or Django's `pbkdf2_sha256$...`.
    #[schema(
        pattern = r"^(?:[0-9A-Fa-f]{64}|[A-Za-z0-9+/_-]{43}=?|\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}|\$(?:argon2id|argon2i|argon2d|scrypt)\$[^\s]+|pbkdf2_sha256\$[0-9]+\$[^$\s]+\$[A-Za-z0-9+/]{43}=)$",
        example = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    )]
    pub(crate) hash: String,
    /// Under a legacy migration (and only there): the part of the key its old system kept
    /// in clear to find it, e.g. its prefix; the migration says where it is in a key.
    #[schema(min_length = 1, max_length = 255)]
    lookup: Option<String>,
    #[schema(schema_with = kinds::role_name)]
    name: Option<String>,
    /// Links the key to the identity with this externalId, created when missing.
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$")]
    external_id: Option<String>,
    /// At most 100 properties, 64 KiB serialized.
    #[schema(value_type = Option<Object>)]
    meta: Option<Map<String, Value>>,
    /// Role names (or ids); each must exist.
    #[schema(schema_with = kinds::role_names_100_or_null)]
    roles: Option<Vec<String>>,
    /// Permission slugs; missing ones are created.
    #[schema(schema_with = kinds::permission_names_or_null)]
    permissions: Option<Vec<String>>,
    /// Unix ms (at most 2100-01-01).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64)]
    expires: Option<Number>,
    enabled: Option<bool>,
    #[schema(inline, value_type = Option<CreditsRequest>)]
    credits: Option<Obj<CreditsRequest>>,
    #[schema(max_items = 50, value_type = Option<Vec<RatelimitRequest>>)]
    ratelimits: Option<Vec<Obj<RatelimitRequest>>>,
}

impl MigrateKeyEntry {
    /// The entry as the service takes it (`at`: its path, `keys.<i>`), its own bounds
    /// checked as `createKey` checks a body.
    pub fn into_migrated(self, at: &str) -> Result<MigratedKey, ApiError> {
        let path = |field: &str| format!("{at}.{field}");
        if let Some(meta) = &self.meta
            && meta.len() > 100
        {
            return Err(ValidationError::new(path("meta"), "at most 100 properties").into());
        }
        check_count(&path("permissions"), self.permissions.as_deref().unwrap_or_default(), MAX_PERMISSIONS)?;
        check_count(&path("roles"), self.roles.as_deref().unwrap_or_default(), MAX_ROLES)?;
        let expires = self.expires.as_ref().map(|n| integer(&path("expires"), n, 0)).transpose()?;
        if expires.is_some_and(|e| e > MAX_EXPIRES_MS) {
            return Err(ValidationError::new(path("expires"), format!("must be <= {MAX_EXPIRES_MS}")).into());
        }
        if let Some(name) = &self.name {
            keygate_domain::check_len(&path("name"), name, MAX_NAME_CHARS)?;
        }
        Ok(MigratedKey {
            hash: self.hash,
            lookup: self.lookup,
            name: self.name,
            external_id: self.external_id,
            meta: self.meta.map(|m| Value::Object(m).to_string()),
            roles: self.roles.unwrap_or_default(),
            permissions: self.permissions.unwrap_or_default(),
            // At most MAX_EXPIRES_MS, so the conversion cannot fail.
            expires: expires.map(|e| i64::try_from(e).unwrap_or(i64::MAX)),
            enabled: self.enabled.unwrap_or(true),
            credits: new_credits(&path("credits"), self.credits)?,
            ratelimits: new_ratelimits(&path("ratelimits"), self.ratelimits.unwrap_or_default())?,
        })
    }
}

/// A key made by a migration.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = V2KeysMigrateKeysMigration)]
pub(crate) struct MigratedEntry {
    /// The hash as given.
    hash: String,
    key_id: String,
}

/// What a migration did.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = V2KeysMigrateKeysResponseData)]
pub(crate) struct MigrateKeysAnswer {
    /// The keys made, in request order.
    migrated: Vec<MigratedEntry>,
    /// The hashes skipped: already a key's, or repeating an earlier entry.
    failed: Vec<String>,
}

impl From<Migrated> for MigrateKeysAnswer {
    fn from(m: Migrated) -> Self {
        Self {
            migrated: m.migrated.into_iter().map(|(hash, key_id)| MigratedEntry { hash, key_id }).collect(),
            failed: m.failed,
        }
    }
}

/// Bring in keys issued elsewhere, by their hashes
///
/// Each entry becomes a key as `createKey` would make it, its secret the plaintext whose
/// hash it is (keygate never sees it), in one transaction. An entry whose hash is a key's
/// already, or repeats an earlier one, is listed in `failed` (200); any other error fails
/// the whole call and writes nothing. Needs `api.*.create_key` or `api.<apiId>.create_key`.
#[utoipa::path(post, path = "/v2/keys.migrateKeys", operation_id = "keys.migrateKeys", tag = "keys",
    request_body = MigrateKeysBody,
    responses((status = 200, description = "OK", body = Envelope<MigrateKeysAnswer>), V2Errors))]
pub async fn migrate_keys(mut call: Authed<Json<MigrateKeysBody>>) -> Result<HttpResponse, ApiError> {
    let body = &mut call.input.0;
    if body.keys.is_empty() || body.keys.len() > MAX_MIGRATED_KEYS {
        let msg = format!("must hold 1 to {MAX_MIGRATED_KEYS} entries");
        return Err(ValidationError::new("keys", msg).into());
    }
    let entries = std::mem::take(&mut body.keys)
        .into_iter()
        .enumerate()
        .map(|(i, Obj(e))| e.into_migrated(&format!("keys.{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let migrated =
        call.run(move |kg, p, Json(b)| kg.rbac.migrate_keys(p, &b.migration_id, &b.api_id, &entries)).await?;
    Ok(ok(MigrateKeysAnswer::from(migrated)))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(migrate_keys))]
struct V2Doc;

/// This room's part of a document (v2 only): an entry's `meta` holds at most 100
/// properties, and its credits follow their rules.
pub(crate) fn openapi(api: Api) -> Value {
    match api {
        Api::V1 => crate::openapi::room::<EmptyDoc>(),
        Api::V2 => {
            let mut doc = crate::openapi::room::<V2Doc>();
            let entry = crate::openapi::schema_mut(&mut doc, "MigrateKeyEntry");
            entry["properties"]["meta"]["maxProperties"] = 100.into();
            crate::handlers::v2::credits::credits_rules(&mut entry["properties"]["credits"]);
            doc
        }
    }
}

#[derive(utoipa::OpenApi)]
struct EmptyDoc;
