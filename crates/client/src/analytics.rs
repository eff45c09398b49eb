//! `keygate.getVerifications` and `keygate.getRatelimits`: usage analytics (API-v2.md §14).

use crate::client::{Client, Response};
use crate::error::Error;
use serde::{Deserialize, Serialize};

/// `keygate.getVerifications`: verification counts of an API over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GetVerificationsRequest {
    /// The API.
    pub api_id: String,
    /// Range start, Unix ms (default: 30 days before `end`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// Range end, Unix ms (default: now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Only the keys of this identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// Only these keys.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_id: Vec<String>,
    /// Only verifications with one of these tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tag: Vec<String>,
    /// Rows per these (`hour`, `day`, `month`, `key`, `identity`, `tags`, `tag`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_by: Vec<GroupBy>,
    /// Sort rows by this count (`time` when grouped by time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_by: Option<String>,
    /// `asc` or `desc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// At most this many rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A grouping of `getVerifications`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// Per key.
    Key,
    /// Per identity.
    Identity,
    /// Per tag set.
    Tags,
    /// Per single tag.
    Tag,
    /// Per hour.
    Hour,
    /// Per day.
    Day,
    /// Per month.
    Month,
}

/// A row of `getVerifications`: counts per outcome, and what the row is grouped by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VerificationsRow {
    /// The bucket's start (Unix ms), grouped by time.
    #[serde(default)]
    pub time: Option<i64>,
    /// The key, grouped by key.
    #[serde(default)]
    pub key_id: Option<String>,
    /// The identity, grouped by identity.
    #[serde(default)]
    pub identity: Option<RowIdentity>,
    /// The tag set, grouped by tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// The tag, grouped by tag.
    #[serde(default)]
    pub tag: Option<String>,
    /// `VALID` outcomes.
    pub valid: u64,
    /// `NOT_FOUND` outcomes.
    #[serde(default)]
    pub not_found: u64,
    /// `FORBIDDEN` outcomes.
    #[serde(default)]
    pub forbidden: u64,
    /// `USAGE_EXCEEDED` outcomes.
    #[serde(default)]
    pub usage_exceeded: u64,
    /// `RATE_LIMITED` outcomes.
    #[serde(default)]
    pub rate_limited: u64,
    /// `UNAUTHORIZED` outcomes.
    #[serde(default)]
    pub unauthorized: u64,
    /// `DISABLED` outcomes.
    #[serde(default)]
    pub disabled: u64,
    /// `INSUFFICIENT_PERMISSIONS` outcomes.
    #[serde(default)]
    pub insufficient_permissions: u64,
    /// `EXPIRED` outcomes.
    #[serde(default)]
    pub expired: u64,
    /// Every outcome.
    pub total: u64,
    /// The credits charged (API-v2.md §22).
    #[serde(default)]
    pub spent_credits: u64,
}

/// The identity of a row grouped by identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RowIdentity {
    /// Its id.
    pub id: String,
    /// Its externalId.
    pub external_id: String,
}

/// `keygate.getRatelimits`: rate-limit decisions of a namespace over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GetRatelimitsRequest {
    /// The namespace: name, id, or `verify:<limit name>` for keys' and identities' limits.
    pub namespace: String,
    /// Range start, Unix ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// Range end, Unix ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// `minute`, `hour` or `day` rows; absent: one row for the range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
    /// Rows per identifier (the heaviest ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identifiers: Option<bool>,
}

/// A row of `getRatelimits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RatelimitsRow {
    /// The bucket's start (Unix ms), grouped by time.
    #[serde(default)]
    pub time: Option<i64>,
    /// The identifier, per identifier.
    #[serde(default)]
    pub identifier: Option<String>,
    /// Decisions that passed.
    pub passed: u64,
    /// Decisions that were denied.
    pub denied: u64,
    /// Every decision.
    pub total: u64,
}

impl Client {
    /// `keygate.getVerifications`.
    pub async fn get_verifications(
        &self,
        req: &GetVerificationsRequest,
    ) -> Result<Response<Vec<VerificationsRow>>, Error> {
        self.call("keygate.getVerifications", req).await
    }

    /// `keygate.getRatelimits`.
    pub async fn get_ratelimits(
        &self,
        req: &GetRatelimitsRequest,
    ) -> Result<Response<Vec<RatelimitsRow>>, Error> {
        self.call("keygate.getRatelimits", req).await
    }
}
