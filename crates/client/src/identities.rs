//! `identities.*`: the customers of the caller, whose keys share meta and rate limits
//! (API-v2.md §11).

use crate::client::{Client, Empty, Response};
use crate::error::Error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Identity {
    /// Its id (`id_...`).
    pub id: String,
    /// The caller's id for the customer.
    pub external_id: String,
    /// Its meta (`{}` when unset).
    #[serde(default)]
    pub meta: Map<String, Value>,
    /// Its rate limits, by name.
    #[serde(default)]
    pub ratelimits: Vec<RatelimitResponse>,
}

/// A rate limit of a key or an identity, as a request sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RatelimitRequest {
    /// Its name (1–128).
    pub name: String,
    /// Budget per window (1–1,000,000).
    pub limit: u64,
    /// Window in ms (1,000–2,592,000,000).
    pub duration: u64,
    /// Applied to every verification (default false: only when a verification names it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auto_apply: bool,
    /// `fixed` (when `None`), `sliding` or `token_bucket` (API-v2.md §26).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
}

/// A rate limit of a key or an identity, as answers show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RatelimitResponse {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Budget per window.
    pub limit: u64,
    /// Window in ms.
    pub duration: u64,
    /// Applied to every verification.
    #[serde(default)]
    pub auto_apply: bool,
    /// `fixed`, `sliding` or `token_bucket` (API-v2.md §26).
    #[serde(default = "fixed")]
    pub algorithm: String,
}

fn fixed() -> String {
    "fixed".into()
}

/// `identities.createIdentity`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateIdentityRequest {
    /// The caller's id for the customer (unique in the workspace).
    pub external_id: String,
    /// Any JSON object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// Its rate limits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratelimits: Vec<RatelimitRequest>,
}

/// `identities.createIdentity`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreatedIdentity {
    /// The new identity's id.
    pub identity_id: String,
}

/// `identities.getIdentity`, `identities.deleteIdentity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IdentityRequest {
    /// Its id or externalId.
    pub identity: String,
}

/// `identities.listIdentities`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListIdentitiesRequest {
    /// Page size (1–100, default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts (a previous answer's `pagination.cursor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Keeps identities whose id or externalId contains this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

/// `identities.updateIdentity`: absent fields stay; `meta: Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpdateIdentityRequest {
    /// Its id or externalId.
    pub identity: String,
    /// New meta, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Option<Map<String, Value>>>,
    /// Replaces its rate limits (`Some(vec![])` clears them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratelimits: Option<Vec<RatelimitRequest>>,
}

impl Client {
    /// `identities.createIdentity`.
    pub async fn create_identity(
        &self,
        req: &CreateIdentityRequest,
    ) -> Result<Response<CreatedIdentity>, Error> {
        self.call("identities.createIdentity", req).await
    }

    /// `identities.getIdentity`.
    pub async fn get_identity(&self, req: &IdentityRequest) -> Result<Response<Identity>, Error> {
        self.call("identities.getIdentity", req).await
    }

    /// `identities.listIdentities`: a page, ordered by externalId.
    pub async fn list_identities(
        &self,
        req: &ListIdentitiesRequest,
    ) -> Result<Response<Vec<Identity>>, Error> {
        self.call("identities.listIdentities", req).await
    }

    /// `identities.updateIdentity`.
    pub async fn update_identity(&self, req: &UpdateIdentityRequest) -> Result<Response<Identity>, Error> {
        self.call("identities.updateIdentity", req).await
    }

    /// `identities.deleteIdentity`: its keys are unlinked and keep working.
    pub async fn delete_identity(&self, req: &IdentityRequest) -> Result<Response<Empty>, Error> {
        self.call("identities.deleteIdentity", req).await
    }
}
