use std::fmt;

/// The stable error codes of the API (contract §1.1). Libraries return errors that map onto
/// one of these; the server maps each code to its HTTP status in exactly one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadRequest,
    Unauthorized,
    Forbidden,
    InsufficientPermissions,
    NotFound,
    MethodNotAllowed,
    Conflict,
    RequestTimeout,
    PayloadTooLarge,
    UnsupportedMediaType,
    /// A request the API understands but keygate cannot carry out by design (v2:
    /// `recoverable` or `decrypt` keys: keys are stored hashed).
    PreconditionFailed,
    TooManyRequests,
    InternalServerError,
    ServiceUnavailable,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::BadRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::InsufficientPermissions,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Conflict,
        ErrorCode::RequestTimeout,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::PreconditionFailed,
        ErrorCode::TooManyRequests,
        ErrorCode::InternalServerError,
        ErrorCode::ServiceUnavailable,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::InsufficientPermissions => "INSUFFICIENT_PERMISSIONS",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            ErrorCode::PreconditionFailed => "PRECONDITION_FAILED",
            ErrorCode::TooManyRequests => "TOO_MANY_REQUESTS",
            ErrorCode::InternalServerError => "INTERNAL_SERVER_ERROR",
            ErrorCode::ServiceUnavailable => "SERVICE_UNAVAILABLE",
        }
    }

    /// The HTTP status that goes with the code (contract §1.1).
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden | ErrorCode::InsufficientPermissions => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict => 409,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::PreconditionFailed => 412,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::InternalServerError => 500,
            ErrorCode::ServiceUnavailable => 503,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Invalid input, located by a dot path into the request (`permissions.2.name`).
/// Displays as `"<path>: <message>"`, the contract's 400 message format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }

    fn render(&self) -> String {
        if self.path.is_empty() { self.message.clone() } else { format!("{}: {}", self.path, self.message) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_upper_snake() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()));
            assert!(c.as_str().chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'));
        }
    }

    #[test]
    fn validation_message_has_path_prefix() {
        let e = ValidationError::new("permissions.2", "an entry needs an id or a name");
        assert_eq!(e.to_string(), "permissions.2: an entry needs an id or a name");
        assert_eq!(ValidationError::new("", "body is empty").to_string(), "body is empty");
    }
}

/// Failures of the storage layer, as every capability sees them (each crate's storage traits return it).
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
