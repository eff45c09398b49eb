//! `ratelimit.*`: rate limiting any identifier in a namespace, and the overrides of a
//! namespace (API-v2.md §5, §9).

use crate::client::{Client, Empty, Response};
use crate::error::Error;
use serde::{Deserialize, Serialize};

/// `ratelimit.limit`, and one entry of `ratelimit.multiLimit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LimitRequest {
    /// The namespace (created on first use).
    pub namespace: String,
    /// Who is limited (a user id, an IP address...).
    pub identifier: String,
    /// Budget per window (an override of the identifier replaces it).
    pub limit: u64,
    /// Window in ms.
    pub duration: u64,
    /// What this request takes (default 1; 0 reads the budget without spending).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
}

/// `ratelimit.limit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LimitResult {
    /// Whether the request may pass (and was counted).
    pub success: bool,
    /// The budget that applied.
    pub limit: u64,
    /// What is left in the window.
    pub remaining: u64,
    /// Unix ms at which the window ends.
    pub reset: u64,
    /// The override that applied, if one did.
    #[serde(default)]
    pub override_id: Option<String>,
}

/// `ratelimit.multiLimit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MultiLimitResult {
    /// Whether every entry fit (and so was counted).
    pub passed: bool,
    /// Each entry's outcome, in request order.
    pub limits: Vec<MultiLimitEntry>,
}

/// One entry of a `ratelimit.multiLimit` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MultiLimitEntry {
    /// Its namespace.
    pub namespace: String,
    /// Its identifier.
    pub identifier: String,
    /// The budget that applied.
    pub limit: u64,
    /// What is left in the window.
    pub remaining: u64,
    /// Unix ms at which the window ends.
    pub reset: u64,
    /// Whether this entry fit.
    pub passed: bool,
    /// The override that applied, if one did.
    #[serde(default)]
    pub override_id: Option<String>,
}

/// `ratelimit.setOverride`: a different budget for one identifier (or a `*` pattern).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SetOverrideRequest {
    /// The namespace.
    pub namespace: String,
    /// The identifier or pattern.
    pub identifier: String,
    /// Its budget per window.
    pub limit: u64,
    /// Its window in ms.
    pub duration: u64,
}

/// `ratelimit.setOverride`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OverrideSet {
    /// The override's id.
    pub override_id: String,
}

/// `ratelimit.getOverride`, `ratelimit.deleteOverride`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OverrideRequest {
    /// The namespace.
    pub namespace: String,
    /// The identifier or pattern, exactly as set.
    pub identifier: String,
}

/// An override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Override {
    /// Its id.
    pub override_id: String,
    /// The identifier or pattern.
    pub identifier: String,
    /// Its budget per window.
    pub limit: u64,
    /// Its window in ms.
    pub duration: u64,
}

/// `ratelimit.listOverrides`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListOverridesRequest {
    /// The namespace.
    pub namespace: String,
    /// Page size (1–100, default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Client {
    /// `ratelimit.limit`: whether one more request of `identifier` fits.
    pub async fn limit(&self, req: &LimitRequest) -> Result<Response<LimitResult>, Error> {
        self.call("ratelimit.limit", req).await
    }

    /// `ratelimit.multiLimit`: several limits decided all-or-nothing.
    pub async fn multi_limit(&self, req: &[LimitRequest]) -> Result<Response<MultiLimitResult>, Error> {
        self.call("ratelimit.multiLimit", req).await
    }

    /// `ratelimit.setOverride`: creates or replaces an override.
    pub async fn set_override(&self, req: &SetOverrideRequest) -> Result<Response<OverrideSet>, Error> {
        self.call("ratelimit.setOverride", req).await
    }

    /// `ratelimit.getOverride`.
    pub async fn get_override(&self, req: &OverrideRequest) -> Result<Response<Override>, Error> {
        self.call("ratelimit.getOverride", req).await
    }

    /// `ratelimit.listOverrides`: a page of a namespace's overrides.
    pub async fn list_overrides(&self, req: &ListOverridesRequest) -> Result<Response<Vec<Override>>, Error> {
        self.call("ratelimit.listOverrides", req).await
    }

    /// `ratelimit.deleteOverride`.
    pub async fn delete_override(&self, req: &OverrideRequest) -> Result<Response<Empty>, Error> {
        self.call("ratelimit.deleteOverride", req).await
    }
}
