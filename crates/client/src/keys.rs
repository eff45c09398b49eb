//! `keys.*`: create, read, update, reroll, delete and verify keys; their credits,
//! permissions and roles (API-v2.md §2, §12, §13).

use crate::client::{Client, Empty, Response};
use crate::error::Error;
use crate::identities::{Identity, RatelimitRequest, RatelimitResponse};
use crate::permissions::{Permission, Role};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `keys.createKey`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateKeyRequest {
    /// The API the key belongs to.
    pub api_id: String,
    /// Put before the random part of the secret (`prefix_...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Bytes of randomness in the secret (16–255).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byte_length: Option<u32>,
    /// A name for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Links the key to the identity with this externalId (created when missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// Any JSON object, answered with the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// Unix ms after which the key verifies `EXPIRED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// Whether it verifies at all (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Uses and their refill; absent: unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<CreditsRequest>,
    /// The key's own rate limits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratelimits: Vec<RatelimitRequest>,
    /// Permission slugs (created when missing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<String>,
    /// Role names (must exist).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// A key's credits as a request sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreditsRequest {
    /// Uses left; `None`: unlimited (then without refill).
    pub remaining: Option<u64>,
    /// How the uses refill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refill: Option<RefillRequest>,
}

/// A refill as a request sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefillRequest {
    /// `daily` or `monthly`.
    pub interval: RefillInterval,
    /// Uses the refill sets `remaining` to.
    pub amount: u64,
    /// The day of the month of a monthly refill (1–31, default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refill_day: Option<u32>,
}

/// How often credits refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefillInterval {
    /// Every day at 00:00 UTC.
    Daily,
    /// Every month on its refill day.
    Monthly,
}

/// `keys.createKey`'s and `keys.rerollKey`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreatedKey {
    /// The new key's id.
    pub key_id: String,
    /// The secret: shown this once, never stored by keygate.
    pub key: String,
}

/// v2's Key object (`getKey`, `whoami`, `listKeys`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Key {
    /// Its id.
    pub key_id: String,
    /// The visible start of its secret.
    pub start: String,
    /// Whether it verifies at all.
    pub enabled: bool,
    /// Unix ms.
    pub created_at: i64,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its meta.
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
    /// Unix ms after which it verifies `EXPIRED`.
    #[serde(default)]
    pub expires: Option<i64>,
    /// When it was last updated (Unix ms; absent: never since its creation).
    #[serde(default)]
    pub updated_at: Option<i64>,
    /// When it was last verified (Unix ms, the start of that minute; `lastUsed` from
    /// keygate servers before it took Unkey's name).
    #[serde(default, alias = "lastUsed")]
    pub last_used_at: Option<i64>,
    /// Its credits, when it has a credit setting.
    #[serde(default)]
    pub credits: Option<KeyCredits>,
    /// The identity it is linked to.
    #[serde(default)]
    pub identity: Option<Identity>,
    /// Its own rate limits.
    #[serde(default)]
    pub ratelimits: Vec<RatelimitResponse>,
    /// Its permissions: direct, and through its roles.
    #[serde(default)]
    pub permissions: Vec<String>,
    /// Its roles.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A key's credits as answers show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KeyCredits {
    /// Uses left; `None`: unlimited.
    #[serde(default)]
    pub remaining: Option<u64>,
    /// How they refill.
    #[serde(default)]
    pub refill: Option<Refill>,
}

/// A refill as answers show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Refill {
    /// `daily` or `monthly`.
    pub interval: RefillInterval,
    /// What `remaining` is set to.
    pub amount: u64,
    /// The day of the month (monthly).
    #[serde(default)]
    pub refill_day: Option<u32>,
    /// When the last refill happened (Unix ms).
    #[serde(default)]
    pub last_refill_at: Option<i64>,
}

/// `keys.getKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GetKeyRequest {
    /// The key's id.
    pub key_id: String,
}

/// `keys.whoami`: a key by its secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WhoamiRequest {
    /// The secret.
    pub key: String,
}

/// `keys.deleteKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteKeyRequest {
    /// The key's id.
    pub key_id: String,
}

/// `keys.updateKey`: absent fields stay as they are; `Some(None)` clears (`name`,
/// `externalId`, `meta`, `expires`, `credits`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateKeyRequest {
    /// The key's id.
    pub key_id: String,
    /// A new name, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<Option<String>>,
    /// Link to this identity (created when missing), or unlink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<Option<String>>,
    /// New meta, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Option<Map<String, Value>>>,
    /// A new expiry, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<Option<i64>>,
    /// New credits (`remaining` given: the counter is set), or unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<Option<UpdateCredits>>,
    /// Enable or disable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Replaces the key's own rate limits (`Some(vec![])` clears them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratelimits: Option<Vec<RatelimitRequest>>,
    /// Replaces its direct permissions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Vec<String>>,
    /// Replaces its roles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

/// `credits` of `keys.updateKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateCredits {
    /// Sets the counter; absent: kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// A new refill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refill: Option<RefillRequest>,
}

/// `keys.updateCredits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateCreditsRequest {
    /// The key's id.
    pub key_id: String,
    /// What to do with `value`.
    pub operation: CreditsOperation,
    /// The amount; `None` with `Set`: unlimited.
    pub value: Option<u64>,
}

/// The operation of `keys.updateCredits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CreditsOperation {
    /// `remaining = value`.
    Set,
    /// `remaining += value`.
    Increment,
    /// `remaining -= value`, floored at 0.
    Decrement,
}

/// `keys.rerollKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RerollKeyRequest {
    /// The key to replace.
    pub key_id: String,
    /// The original expires this many ms from now (0: at once); `None`: unchanged.
    pub expiration: Option<u64>,
}

/// `keys.verifyKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyKeyRequest {
    /// The secret to verify.
    pub key: String,
    /// A permission query the key must satisfy: `documents.read`, `a AND (b OR c)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Credits this call spends (default 1, for keys with credits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<VerifyCredits>,
    /// Rate limits this call counts against, besides the auto-applied ones.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratelimits: Vec<VerifyRatelimit>,
    /// Tags counted with the outcome in analytics.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The address the verified request came from (IPv4 or IPv6): needed for a key under
    /// an `allowedIps` list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// `credits` of `keys.verifyKey`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VerifyCredits {
    /// What the call spends.
    pub cost: u64,
}

/// A rate limit a verification counts against: one of the key's or its identity's by
/// name (its `limit`/`duration` replaced for this call when given), or an ad-hoc limit of
/// the key (both given).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyRatelimit {
    /// The limit's name.
    pub name: String,
    /// What the call takes from it (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// The budget per window, for this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The window in ms, for this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<u64>,
}

/// The outcome of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum VerifyCode {
    /// The key may pass.
    Valid,
    /// No such key (or outside the caller's reach).
    NotFound,
    /// The key is disabled.
    Disabled,
    /// The key has expired.
    Expired,
    /// The key lacks a permission the query asks for.
    InsufficientPermissions,
    /// The key has no credits left for this call.
    UsageExceeded,
    /// One of the key's rate limits is exhausted.
    RateLimited,
    /// The call's address is outside the key's (its identity's, its API's) `allowedIps`.
    Forbidden,
    /// A code this version does not know (from a newer keygate or Unkey).
    #[serde(other)]
    Unknown,
}

impl VerifyCode {
    /// The wire name (`VALID`, `NOT_FOUND`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyCode::Valid => "VALID",
            VerifyCode::NotFound => "NOT_FOUND",
            VerifyCode::Disabled => "DISABLED",
            VerifyCode::Expired => "EXPIRED",
            VerifyCode::InsufficientPermissions => "INSUFFICIENT_PERMISSIONS",
            VerifyCode::UsageExceeded => "USAGE_EXCEEDED",
            VerifyCode::RateLimited => "RATE_LIMITED",
            VerifyCode::Forbidden => "FORBIDDEN",
            VerifyCode::Unknown => "UNKNOWN",
        }
    }
}

/// `keys.verifyKey`'s answer: `valid` and `code`, and the key unless `NOT_FOUND`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VerifyKeyResult {
    /// Whether the key may pass (`code` is `VALID`).
    pub valid: bool,
    /// The outcome.
    pub code: VerifyCode,
    /// The key's id.
    #[serde(default)]
    pub key_id: Option<String>,
    /// Whether the key is enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its meta.
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
    /// Its expiry (Unix ms).
    #[serde(default)]
    pub expires: Option<i64>,
    /// Its permissions (direct and through roles).
    #[serde(default)]
    pub permissions: Vec<String>,
    /// Its roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Credits left after this call, when the key has credits.
    #[serde(default)]
    pub credits: Option<u64>,
    /// Every rate limit that applied.
    #[serde(default)]
    pub ratelimits: Vec<VerifyRatelimitResult>,
    /// The identity the key is linked to.
    #[serde(default)]
    pub identity: Option<Identity>,
}

impl VerifyKeyResult {
    /// A result of `code` that says nothing about a key (`NOT_FOUND`).
    pub fn not_found() -> Self {
        Self {
            valid: false,
            code: VerifyCode::NotFound,
            key_id: None,
            enabled: None,
            name: None,
            meta: None,
            expires: None,
            permissions: Vec::new(),
            roles: Vec::new(),
            credits: None,
            ratelimits: Vec::new(),
            identity: None,
        }
    }
}

/// How one rate limit fared in a verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VerifyRatelimitResult {
    /// The limit's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its budget per window.
    pub limit: u64,
    /// Its window (ms).
    pub duration: u64,
    /// Unix ms at which the window ends.
    pub reset: u64,
    /// What is left in the window after this call.
    pub remaining: u64,
    /// Whether it was exceeded.
    pub exceeded: bool,
    /// Whether it applies to every verification.
    #[serde(default)]
    pub auto_apply: bool,
}

/// `keys.setPermissions`, `keys.addPermissions`, `keys.removePermissions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyPermissionsRequest {
    /// The key's id.
    pub key_id: String,
    /// Permission slugs (or ids).
    pub permissions: Vec<String>,
}

/// `keys.setRoles`, `keys.addRoles`, `keys.removeRoles`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRolesRequest {
    /// The key's id.
    pub key_id: String,
    /// Role names (or ids).
    pub roles: Vec<String>,
}

impl Client {
    /// `keys.createKey`: a new key; its secret is in the answer, once.
    pub async fn create_key(&self, req: &CreateKeyRequest) -> Result<Response<CreatedKey>, Error> {
        self.call("keys.createKey", req).await
    }

    /// `keys.getKey`: a key by id.
    pub async fn get_key(&self, req: &GetKeyRequest) -> Result<Response<Key>, Error> {
        self.call("keys.getKey", req).await
    }

    /// `keys.whoami`: a key by its secret.
    pub async fn whoami(&self, req: &WhoamiRequest) -> Result<Response<Key>, Error> {
        self.call("keys.whoami", req).await
    }

    /// `keys.deleteKey`: deletes a key for good.
    pub async fn delete_key(&self, req: &DeleteKeyRequest) -> Result<Response<Empty>, Error> {
        self.call("keys.deleteKey", req).await
    }

    /// `keys.updateKey`: changes any of a key's settings in one transaction.
    pub async fn update_key(&self, req: &UpdateKeyRequest) -> Result<Response<Empty>, Error> {
        self.call("keys.updateKey", req).await
    }

    /// `keys.updateCredits`: sets, increments or decrements a key's live credit counter.
    pub async fn update_credits(&self, req: &UpdateCreditsRequest) -> Result<Response<KeyCredits>, Error> {
        self.call("keys.updateCredits", req).await
    }

    /// `keys.rerollKey`: a copy of a key with a new secret; the original expires.
    pub async fn reroll_key(&self, req: &RerollKeyRequest) -> Result<Response<CreatedKey>, Error> {
        self.call("keys.rerollKey", req).await
    }

    /// `keys.verifyKey`: whether a secret may pass (every outcome is `Ok`; read `code`).
    pub async fn verify_key(&self, req: &VerifyKeyRequest) -> Result<Response<VerifyKeyResult>, Error> {
        self.call("keys.verifyKey", req).await
    }

    /// `keys.setPermissions`: the key's direct permissions become exactly these.
    pub async fn set_permissions(
        &self,
        req: &KeyPermissionsRequest,
    ) -> Result<Response<Vec<Permission>>, Error> {
        self.call("keys.setPermissions", req).await
    }

    /// `keys.addPermissions`: adds direct permissions (created when missing).
    pub async fn add_permissions(
        &self,
        req: &KeyPermissionsRequest,
    ) -> Result<Response<Vec<Permission>>, Error> {
        self.call("keys.addPermissions", req).await
    }

    /// `keys.removePermissions`: removes direct permissions.
    pub async fn remove_permissions(
        &self,
        req: &KeyPermissionsRequest,
    ) -> Result<Response<Vec<Permission>>, Error> {
        self.call("keys.removePermissions", req).await
    }

    /// `keys.setRoles`: the key's roles become exactly these.
    pub async fn set_roles(&self, req: &KeyRolesRequest) -> Result<Response<Vec<Role>>, Error> {
        self.call("keys.setRoles", req).await
    }

    /// `keys.addRoles`: adds roles (they must exist).
    pub async fn add_roles(&self, req: &KeyRolesRequest) -> Result<Response<Vec<Role>>, Error> {
        self.call("keys.addRoles", req).await
    }

    /// `keys.removeRoles`: removes roles.
    pub async fn remove_roles(&self, req: &KeyRolesRequest) -> Result<Response<Vec<Role>>, Error> {
        self.call("keys.removeRoles", req).await
    }
}
