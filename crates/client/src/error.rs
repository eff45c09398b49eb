//! The client's error: keygate's problem-details answer as a typed value, or what kept the
//! call from getting one.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// keygate (or Unkey) answered with an error: the problem details it sent.
    #[error("{0}")]
    Api(Box<ApiError>),
    /// No answer within the client's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The request could not be sent or its answer not read (connection refused, reset,
    /// TLS).
    #[error("transport: {0}")]
    Transport(#[source] reqwest::Error),
    /// An answer that is not the documented shape.
    #[error("unexpected answer (HTTP {status}): {message}")]
    Decode {
        /// The HTTP status of the answer.
        status: u16,
        /// What did not fit.
        message: String,
        /// The request id the answer carried, if any.
        request_id: Option<String>,
    },
    /// The client or the middleware was built with a setting that cannot work.
    #[error("configuration: {0}")]
    Config(String),
    /// The embedded back end failed (its store unreachable, say): `code` is keygate's
    /// stable error code (`SERVICE_UNAVAILABLE`, `BAD_REQUEST`, ...).
    #[error("{code}: {message}")]
    Embedded {
        /// keygate's stable error code.
        code: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// The problem details when keygate answered with an error.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The HTTP status keygate answered with, for [`Error::Api`] and [`Error::Decode`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.status),
            Error::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether a later try may succeed: keygate's 503 (its store unreachable), a timeout
    /// or a connection that failed. The client retries these itself, a few times.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Api(e) => e.status == 503,
            Error::Timeout(_) => true,
            Error::Transport(e) => e.is_connect(),
            Error::Embedded { code, .. } => *code == "SERVICE_UNAVAILABLE",
            _ => false,
        }
    }
}

/// keygate's v2 error answer (API-v2.md §1.1): `{meta: {requestId}, error: {title,
/// detail, status, type, errors?}}`, flattened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// A short summary of the kind of problem ("Not Found").
    pub title: String,
    /// What went wrong with this request.
    pub detail: String,
    /// The problem type: a URL ending in `<system>/<category>/<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The fields at fault (400 and 413 only).
    #[serde(default)]
    pub errors: Vec<FieldError>,
    /// The id keygate gave the request (also in its logs).
    #[serde(default)]
    pub request_id: String,
}

impl ApiError {
    /// The problem's code: the last segment of its type (`key_not_found`,
    /// `insufficient_permissions`, `invalid_input`, ...).
    pub fn code(&self) -> &str {
        self.kind.rsplit('/').next().unwrap_or_default()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {} {} ({}): {}", self.status, self.title, self.code(), self.detail)?;
        if !self.request_id.is_empty() {
            write!(f, " [request {}]", self.request_id)?;
        }
        Ok(())
    }
}

/// A field at fault in a 400 answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FieldError {
    /// `body` and the field's JSON path: `body.permissions[2]`.
    pub location: String,
    /// What is wrong with it.
    pub message: String,
}

/// The wire shape of an error answer.
#[derive(Deserialize)]
pub(crate) struct ProblemBody {
    pub(crate) error: ApiError,
    #[serde(default)]
    pub(crate) meta: Option<MetaBody>,
}

/// `meta` of every v2 answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetaBody {
    #[serde(default)]
    pub(crate) request_id: String,
}
