use keygate_domain::{ErrorCode, StorageError, ValidationError};

/// Every way an RBAC operation can fail. [`RbacError::code`] gives the stable API code;
/// `Display` gives the message shown to the caller (never internals for 5xx codes).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RbacError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    InsufficientPermissions(String),
    /// The operation needs something the deployment lacks (an encryption keyring).
    #[error("{0}")]
    Precondition(String),
    /// What was missing, and the message.
    #[error("{1}")]
    NotFound(Resource, String),
    /// What already exists, and the message.
    #[error("{1}")]
    Conflict(Resource, String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl RbacError {
    pub fn code(&self) -> ErrorCode {
        match self {
            RbacError::Invalid(_) | RbacError::BadRequest(_) => ErrorCode::BadRequest,
            RbacError::Unauthorized(_) => ErrorCode::Unauthorized,
            RbacError::Forbidden(_) => ErrorCode::Forbidden,
            RbacError::InsufficientPermissions(_) => ErrorCode::InsufficientPermissions,
            RbacError::Precondition(_) => ErrorCode::PreconditionFailed,
            RbacError::NotFound(..) => ErrorCode::NotFound,
            RbacError::Conflict(..) | RbacError::Storage(StorageError::Conflict(_)) => ErrorCode::Conflict,
            RbacError::Storage(StorageError::Unavailable(_)) => ErrorCode::ServiceUnavailable,
            RbacError::Storage(StorageError::Internal(_)) => ErrorCode::InternalServerError,
        }
    }

    /// `resource id-or-name not found`.
    pub fn not_found(resource: Resource, what: &str) -> Self {
        RbacError::NotFound(resource, format!("{} {what} not found", resource.noun()))
    }

    /// The kind of object a not-found or conflict error is about.
    pub fn resource(&self) -> Option<Resource> {
        match self {
            RbacError::NotFound(r, _) | RbacError::Conflict(r, _) => Some(*r),
            _ => None,
        }
    }

    /// The root key lacks `missing` (all of them are needed).
    pub fn missing(missing: &[&str]) -> Self {
        RbacError::InsufficientPermissions(format!(
            "the root key lacks the permission{} {}",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ))
    }
}

/// The kinds of object an operation can find missing or taken (v2's error types name them:
/// `unkey/data/<code>_not_found`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Api,
    Identity,
    Key,
    Permission,
    Role,
    Namespace,
    Override,
    Workspace,
    RootKey,
    /// A migration id of `keys.migrateKeys` (API-v2.md §15).
    Migration,
    /// A customer portal (API-v2.md §17).
    Portal,
    /// A webhook endpoint (API-v2.md §23).
    WebhookEndpoint,
    /// A delivery of a webhook event (API-v2.md §23).
    WebhookDelivery,
}

impl Resource {
    /// The word in messages ("key key_123 not found").
    pub const fn noun(self) -> &'static str {
        match self {
            Resource::Api => "API",
            Resource::Identity => "identity",
            Resource::Key => "key",
            Resource::Permission => "permission",
            Resource::Role => "role",
            Resource::Namespace => "namespace",
            Resource::Override => "override",
            Resource::Workspace => "workspace",
            Resource::RootKey => "root key",
            Resource::Migration => "migration",
            Resource::Portal => "portal",
            Resource::WebhookEndpoint => "webhook endpoint",
            Resource::WebhookDelivery => "webhook delivery",
        }
    }

    /// The stable code of the kind (Unkey's names): `ratelimit_namespace`, `key`, ...
    pub const fn code(self) -> &'static str {
        match self {
            Resource::Api => "api",
            Resource::Identity => "identity",
            Resource::Key => "key",
            Resource::Permission => "permission",
            Resource::Role => "role",
            Resource::Namespace => "ratelimit_namespace",
            Resource::Override => "ratelimit_override",
            Resource::Workspace => "workspace",
            Resource::RootKey => "root_key",
            Resource::Migration => "migration",
            Resource::Portal => "portal",
            Resource::WebhookEndpoint => "webhook_endpoint",
            Resource::WebhookDelivery => "webhook_delivery",
        }
    }
}
