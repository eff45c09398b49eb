use keygate_domain::{ErrorCode, ValidationError};

/// Failures of the storage layer, as the service sees them.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// The database could not be reached (or timed out); nothing was written.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A uniqueness constraint was violated.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else: a bug or a corrupt database.
    #[error("storage error: {0}")]
    Internal(String),
}

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
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
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
            RbacError::NotFound(_) => ErrorCode::NotFound,
            RbacError::Conflict(_) | RbacError::Storage(StorageError::Conflict(_)) => ErrorCode::Conflict,
            RbacError::Storage(StorageError::Unavailable(_)) => ErrorCode::ServiceUnavailable,
            RbacError::Storage(StorageError::Internal(_)) => ErrorCode::InternalServerError,
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
